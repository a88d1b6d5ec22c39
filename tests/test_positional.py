"""tinyformer.models.positional against the closed form of Vaswani et al. (2017), Sec. 3.5."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tinyformer.models.positional import (
    SinusoidalPositionalEncoding,
    fit_shift_matrix,
    pair_wavelengths,
    position_from_encoding,
    relative_shift_matrix,
    sinusoidal_positional_encoding,
)


def closed_form(seq_len: int, d_model: int, base: float) -> torch.Tensor:
    """PE by the paper's formula, one entry at a time, with math.sin/math.cos."""
    table = torch.empty(seq_len, d_model, dtype=torch.float64)
    for pos in range(seq_len):
        for col in range(d_model):
            pair = col // 2
            angle = pos / base ** (2 * pair / d_model)
            table[pos, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return table


@given(seq_len=st.integers(0, 40), d_model=st.integers(1, 33), base=st.sampled_from([2.0, 100.0, 10000.0, 1e6]))
def test_encoding_matches_closed_form(seq_len, d_model, base):
    table = sinusoidal_positional_encoding(seq_len, d_model, base=base, dtype=torch.float64)
    torch.testing.assert_close(table, closed_form(seq_len, d_model, base), rtol=0, atol=1e-12)


def test_layout_is_interleaved_not_concatenated():
    table = sinusoidal_positional_encoding(10, 8, dtype=torch.float64)
    pos = torch.arange(10, dtype=torch.float64)
    # Column 1 is the cosine of the first pair; a concatenated layout would put sin of pair 1 there.
    torch.testing.assert_close(table[:, 0], pos.sin())
    torch.testing.assert_close(table[:, 1], pos.cos())
    torch.testing.assert_close(table[:, 2], (pos / 10000 ** (2 / 8)).sin())
    torch.testing.assert_close(table[:, 3], (pos / 10000 ** (2 / 8)).cos())


def test_odd_width_last_column_is_a_sine():
    table = sinusoidal_positional_encoding(6, 7, dtype=torch.float64)
    pos = torch.arange(6, dtype=torch.float64)
    torch.testing.assert_close(table[:, 6], (pos / 10000 ** (6 / 7)).sin())
    torch.testing.assert_close(table[:, :6], closed_form(6, 7, 10000.0)[:, :6])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_half_precision_is_accurate_to_its_dtype_at_long_lengths(dtype):
    seq_len = 50_000
    exact = sinusoidal_positional_encoding(seq_len, 64, dtype=torch.float64)
    table = sinusoidal_positional_encoding(seq_len, 64, dtype=dtype)
    assert table.dtype == dtype
    # Correctly rounded from float64: the error is at most half an ulp of 1 (values lie in [-1, 1]).
    half_ulp = torch.finfo(dtype).eps / 2
    assert (table.to(torch.float64) - exact).abs().max().item() <= half_ulp


def test_angles_computed_in_the_target_dtype_would_lose_the_phase():
    """Why the angles are computed in float64: float16 cannot even count positions past 2048 exactly."""
    position = torch.arange(4096, dtype=torch.float16)
    naive = position.sin()  # what computing the table in float16 gives for the first pair
    exact = torch.arange(4096, dtype=torch.float64).sin()
    assert (naive.double() - exact).abs().max().item() > 0.1
    ours = sinusoidal_positional_encoding(4096, 2, dtype=torch.float16)[:, 0]
    assert (ours.double() - exact).abs().max().item() <= torch.finfo(torch.float16).eps / 2


def test_device_and_dtype_arguments():
    table = sinusoidal_positional_encoding(3, 4, dtype=torch.float64, device="cpu")
    assert table.dtype == torch.float64
    assert table.device.type == "cpu"
    assert sinusoidal_positional_encoding(0, 4).shape == (0, 4)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seq_len": 3, "d_model": 0}, ValueError, "d_model=0"),
        ({"seq_len": 3, "d_model": -4}, ValueError, "d_model=-4"),
        ({"seq_len": -1, "d_model": 4}, ValueError, "seq_len=-1"),
        ({"seq_len": 3, "d_model": 4.0}, TypeError, "d_model must be an int"),
        ({"seq_len": 3, "d_model": 4, "base": 1.0}, ValueError, "base=1.0"),
        ({"seq_len": 3, "d_model": 4, "dtype": torch.int64}, TypeError, "floating"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        sinusoidal_positional_encoding(**kwargs)


def test_pair_wavelengths_closed_form():
    torch.testing.assert_close(
        pair_wavelengths(8, base=100.0),
        torch.tensor([2 * math.pi * 100 ** (k / 8) for k in (0, 2, 4, 6)], dtype=torch.float64),
    )


def test_relative_shift_matrix_rejects_odd_width():
    with pytest.raises(ValueError, match="d_model=5"):
        relative_shift_matrix(1, 5)


@pytest.mark.parametrize(("d_model", "base"), [(2, 10000.0), (8, 100.0), (16, 10000.0), (64, 10000.0), (64, 1e6)])
def test_every_position_below_half_the_slowest_wavelength_is_read_back(d_model, base):
    limit = math.pi * base ** ((d_model - 2) / d_model)  # half the slowest pair's wavelength, tokens
    positions = torch.cat((torch.arange(min(int(limit), 500)), torch.randint(int(limit), (500,))))
    table = sinusoidal_positional_encoding(int(limit) + 1, d_model, base=base, dtype=torch.float64)
    assert torch.equal(position_from_encoding(table[positions], base=base), positions)


def test_positions_are_read_back_through_an_error_in_every_entry():
    positions = torch.randint(23_000, (2000,), generator=torch.Generator().manual_seed(0))
    rows = sinusoidal_positional_encoding(23_000, 64)[positions]  # float32, as a model holds it
    noise = torch.rand(rows.shape, generator=torch.Generator().manual_seed(1)) * 0.04 - 0.02
    got = position_from_encoding(rows + noise)
    assert got.dtype == torch.int64
    assert torch.equal(got, positions)
    # The slowest pair alone is off by tens of tokens with the same error: the faster pairs matter.
    angle = torch.atan2(rows[:, -2] + noise[:, -2], rows[:, -1] + noise[:, -1]).double()
    assert (angle / 10000.0 ** (-62 / 64) - positions).abs().max() > 20


def test_a_position_past_half_the_slowest_wavelength_is_read_wrong():
    table = sinusoidal_positional_encoding(101, 8, base=100.0, dtype=torch.float64)  # limit 99.3
    assert position_from_encoding(table[99:100], base=100.0).item() == 99
    assert position_from_encoding(table[100:101], base=100.0).item() != 100


@pytest.mark.parametrize("bad", [torch.zeros(3, 5), torch.zeros(8), torch.zeros(2, 0)])
def test_position_from_encoding_refuses_a_shape_naming_it(bad):
    with pytest.raises(ValueError, match="encoding must be"):
        position_from_encoding(bad)


def test_position_from_encoding_refuses_integers():
    with pytest.raises(TypeError, match="encoding"):
        position_from_encoding(torch.zeros(2, 4, dtype=torch.int64))


@pytest.mark.parametrize("offset", [-7, -1, 0, 1, 3, 40])
@pytest.mark.parametrize("layout", ["interleaved", "split-half"])
def test_the_fitted_shift_is_the_derived_rotation(offset, layout):
    table = sinusoidal_positional_encoding(200, 12, base=100.0, dtype=torch.float64)
    want = relative_shift_matrix(offset, 12, base=100.0)
    if layout == "split-half":
        order = torch.cat((torch.arange(0, 12, 2), torch.arange(1, 12, 2)))
        table, want = table[:, order], want[order][:, order]
    torch.testing.assert_close(fit_shift_matrix(table, offset), want, rtol=0, atol=1e-10)


def test_a_short_table_cannot_fix_the_slow_pairs_rotation():
    gap = fit_shift_matrix(sinusoidal_positional_encoding(100, 16, dtype=torch.float64), 3) - relative_shift_matrix(
        3, 16
    )
    slow, fast = gap[12:].abs().max(), gap[:10].abs().max()
    assert slow > 0.1
    assert fast < 1e-2


def test_fit_shift_matrix_refuses_too_few_rows_naming_the_offset():
    with pytest.raises(ValueError, match="offset=5 leaves 3 pairs"):
        fit_shift_matrix(torch.zeros(8, 4, dtype=torch.float64), 5)
    with pytest.raises(ValueError, match="table must be"):
        fit_shift_matrix(torch.zeros(8, dtype=torch.float64), 1)
    with pytest.raises(TypeError, match="offset"):
        fit_shift_matrix(torch.zeros(8, 2, dtype=torch.float64), 1.5)


class TestModule:
    def test_adds_table_to_batch_first_input(self):
        module = SinusoidalPositionalEncoding(6, max_len=10)
        x = torch.randn(2, 4, 6)
        torch.testing.assert_close(module(x), x + sinusoidal_positional_encoding(4, 6))

    def test_table_is_a_non_persistent_buffer_that_follows_to(self):
        module = SinusoidalPositionalEncoding(6, max_len=10)
        assert "pe" in dict(module.named_buffers())
        assert "pe" not in module.state_dict()
        module.to(torch.float64)
        assert module.pe.dtype == torch.float64
        assert module(torch.zeros(1, 3, 6, dtype=torch.float64)).dtype == torch.float64

    def test_output_follows_input_dtype(self):
        module = SinusoidalPositionalEncoding(6, max_len=10)
        assert module(torch.zeros(1, 3, 6, dtype=torch.bfloat16)).dtype == torch.bfloat16

    def test_input_longer_than_max_len_names_both_lengths(self):
        module = SinusoidalPositionalEncoding(6, max_len=10)
        with pytest.raises(ValueError, match=r"length 11 exceeds max_len=10"):
            module(torch.zeros(1, 11, 6))

    @pytest.mark.parametrize("shape", [(3, 6), (1, 3, 5), (1, 1, 3, 6)])
    def test_wrong_shape_names_the_shape(self, shape):
        module = SinusoidalPositionalEncoding(6, max_len=10)
        with pytest.raises(ValueError, match=str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")):
            module(torch.zeros(shape))

    def test_dropout_only_in_training(self):
        module = SinusoidalPositionalEncoding(6, max_len=10, dropout=0.5)
        x = torch.randn(2, 4, 6)
        torch.testing.assert_close(module.eval()(x), x + module.pe[:4])
        with pytest.raises(ValueError, match=r"dropout=1\.5"):
            SinusoidalPositionalEncoding(6, dropout=1.5)
