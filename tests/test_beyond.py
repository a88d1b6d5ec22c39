"""The chapter "Position beyond sinusoids": its lab's task and ceiling, every claim it makes from the lab, and
its glued numbers equal to what the library computes now."""

import itertools
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from booktools import glued_values
from hypothesis import given
from hypothesis import strategies as st

from tinyformer.labs.extrapolation import (
    LAB_SCHEMES,
    MARKER,
    ExtrapolationConfig,
    ExtrapolationResult,
    MarkerBatch,
    evaluation_batches,
    marker_batch,
    marker_logits,
    position_blind_ceiling,
    reflection_blind_ceiling,
    run_extrapolation,
    train_marker_model,
)
from tinyformer.labs.presets import preset
from tinyformer.models.encoder import TinyTransformer, TransformerConfig

ROOT = Path(__file__).resolve().parents[1]
PRESET = preset("extrapolation")
DOUBLE = torch.float64


@pytest.fixture(scope="module")
def lab(book):
    """The chapter's lab as the book's build ran it: its settings, and the numbers it glued (mean, spread,
    smallest and largest accuracy over seeds, by scheme and length factor; the ceilings), read from the
    build, so that a test run trains the lab's models once, in the chapter."""
    settings = ExtrapolationConfig.from_toml(PRESET)
    values = glued_values(book, "beyond-sinusoids")

    def number(name: str, scheme: str | None = None, factor: int | None = None) -> float:
        key = "_".join(str(part) for part in (name, scheme, factor) if part is not None)
        return float(values[key])

    return settings, number


# -- the task ----------------------------------------------------------------------------------------------


@given(
    batch_size=st.integers(1, 20),
    seq_len=st.integers(2, 40),
    num_symbols=st.integers(2, 10),
    seed=st.integers(0, 2**31 - 1),
)
def test_marker_batch_asks_for_the_symbol_after_the_single_marker(batch_size, seq_len, num_symbols, seed):
    batch = marker_batch(batch_size, seq_len, num_symbols=num_symbols, generator=torch.Generator().manual_seed(seed))
    assert batch.input_ids.shape == (batch_size, seq_len)
    assert ((batch.input_ids == MARKER).sum(dim=1) == 1).all()
    rows = torch.arange(batch_size)
    assert (batch.input_ids[rows, batch.marker] == MARKER).all()
    assert (batch.marker <= seq_len - 2).all()
    assert (batch.input_ids[rows, batch.marker + 1] - 2 == batch.labels).all()
    assert batch.input_ids.min() >= 1
    assert batch.input_ids.max() <= num_symbols + 1


def test_marker_positions_and_answers_are_uniform():
    batch = marker_batch(40_000, 9, num_symbols=4, generator=torch.Generator().manual_seed(0))
    marker_share = torch.bincount(batch.marker, minlength=8).double() / len(batch)
    label_share = torch.bincount(batch.labels, minlength=4).double() / len(batch)
    torch.testing.assert_close(marker_share, torch.full((8,), 1 / 8, dtype=DOUBLE), rtol=0, atol=0.01)
    torch.testing.assert_close(label_share, torch.full((4,), 1 / 4, dtype=DOUBLE), rtol=0, atol=0.01)


@pytest.mark.parametrize(("seq_len", "num_symbols"), [(3, 2), (4, 3), (5, 2), (5, 3)])
def test_position_blind_ceiling_is_the_best_order_blind_accuracy(seq_len, num_symbols):
    """Exhaustively: every sequence equally likely; group by bag of tokens; the best answer per bag wins its largest share."""
    rows, markers, labels = [], [], []
    for symbols in itertools.product(range(num_symbols), repeat=seq_len - 1):
        for marker in range(seq_len - 1):
            tokens = [s + 2 for s in symbols]
            tokens.insert(marker, MARKER)
            rows.append(tokens)
            markers.append(marker)
            labels.append(symbols[marker])
    batch = MarkerBatch(torch.tensor(rows), torch.tensor(markers), torch.tensor(labels), num_symbols)
    groups: dict[tuple[int, ...], Counter[int]] = {}
    for tokens, label in zip(rows, labels, strict=True):
        groups.setdefault(tuple(sorted(tokens)), Counter())[label] += 1
    best = sum(max(c.values()) for c in groups.values()) / len(rows)
    assert math.isclose(position_blind_ceiling(batch), best, rel_tol=1e-12)
    assert 1 / num_symbols < best < 1


def test_model_without_positions_is_order_blind_at_the_marker():
    """The argument behind the ceiling: permuting the tokens (marker included) leaves the marker's logits unchanged."""
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=10, num_classes=8, d_model=16, num_heads=4, d_ff=32, positional="none")
    model = TinyTransformer(config).to(DOUBLE).eval()
    batch = marker_batch(6, 12, num_symbols=8, generator=torch.Generator().manual_seed(1))
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(2))
    inverse = torch.argsort(perm)
    shuffled = MarkerBatch(batch.input_ids[:, perm], inverse[batch.marker], batch.labels, 8)
    assert (shuffled.input_ids[torch.arange(6), shuffled.marker] == MARKER).all()
    with torch.no_grad():
        torch.testing.assert_close(marker_logits(model, shuffled), marker_logits(model, batch))
        seeing = TinyTransformer(config.replace(positional="rotary")).to(DOUBLE).eval()
        assert not torch.allclose(marker_logits(seeing, shuffled), marker_logits(seeing, batch))


def test_learned_rows_past_the_training_length_keep_their_initial_values():
    lab = ExtrapolationConfig(steps=3, batch_size=8, train_len=6, min_train_len=6)
    config = TransformerConfig(
        vocab_size=10, num_classes=8, d_model=8, num_heads=2, d_ff=16, max_len=24, positional="learned"
    )
    run = train_marker_model(config, lab, seed=0)
    weight, initial = run.model.positional.weight, run.initial_state["positional.weight"]
    torch.testing.assert_close(weight[6:], initial[6:], rtol=0, atol=0)
    assert (weight[:6] - initial[:6]).abs().min() > 0


def test_training_is_reproducible():
    lab = ExtrapolationConfig(steps=4, batch_size=8)
    config = TransformerConfig(vocab_size=10, num_classes=8, d_model=8, num_heads=2, d_ff=16, positional="alibi")
    first, second = train_marker_model(config, lab, seed=3), train_marker_model(config, lab, seed=3)
    assert first.losses == second.losses


def test_lab_config_rejects_bad_values():
    with pytest.raises(ValueError, match="min_train_len=9 exceeds train_len=8"):
        ExtrapolationConfig(train_len=8, min_train_len=9)
    with pytest.raises(ValueError, match="seeds is empty"):
        ExtrapolationConfig(seeds=())
    with pytest.raises(ValueError, match="num_classes == 8"):
        train_marker_model(TransformerConfig(vocab_size=10, num_classes=5), ExtrapolationConfig(), seed=0)
    with pytest.raises(ValueError, match="scheme 'relative'"):
        run_extrapolation(TransformerConfig(vocab_size=10, num_classes=8), ExtrapolationConfig(), ("relative",))


# -- the chapter's claims about the lab, for every seed ------------------------------------------------------

# The ceilings are expectations; a finite test set (eval_size sequences) can land above one by chance.
# With 1,000 sequences the standard error of an accuracy is at most 0.016, so 0.04 is about 2.5 of them.
NOISE = 0.04


@pytest.mark.book
def test_rotary_extrapolates_for_every_seed(lab):
    settings, number = lab
    assert min(number("min", "rotary", f) for f in settings.length_factors) >= 0.98


@pytest.mark.book
def test_absolute_schemes_learn_the_task_but_lose_it_beyond_the_training_length(lab):
    settings, number = lab
    first, second, third = settings.length_factors  # L_train, 2 L_train, 4 L_train
    for scheme in ("sinusoidal", "learned"):
        assert number("min", scheme, first) >= 0.95, scheme
        assert number("max", scheme, second) < 0.8, scheme
        assert number("max", scheme, third) < 0.5, scheme
        assert number("max", scheme, third) < number("min", scheme, second), scheme  # every seed falls further
        assert number("max", scheme, third) < number("min", "rotary", third), scheme


@pytest.mark.book
def test_sinusoidal_beats_learned_beyond_the_training_length(lab):
    """Claimed for 2 L_train only: every sinusoidal seed above every learned seed."""
    settings, number = lab
    _, second, third = settings.length_factors
    assert number("min", "sinusoidal", second) > number("max", "learned", second)
    assert number("acc", "sinusoidal", third) > number("acc", "learned", third)


@pytest.mark.book
def test_absolute_schemes_answer_within_the_trained_positions_only(lab):
    settings, number = lab
    ceiling = number("lab_ceiling", None, settings.length_factors[-1])
    # The learned table: right inside its trained rows, worse than order-blind beyond them.
    assert number("inside_learned") > 0.9
    assert number("outside_learned") < ceiling
    # The sinusoidal table: part of the rule carries over (above the ceiling and the learned table), not most.
    assert number("outside_learned") < ceiling < number("outside_sinusoidal") < 0.5
    assert number("inside_sinusoidal") > number("outside_sinusoidal") + 0.2
    longest = evaluation_batches(settings)[-1]
    assert number("inside_share") == (longest.marker + 1 < settings.train_len).double().mean().item()


@pytest.mark.book
def test_no_positions_stays_at_the_order_blind_ceiling(lab):
    settings, number = lab
    for factor in settings.length_factors:
        ceiling = number("lab_ceiling", None, factor)
        assert number("max", "none", factor) <= ceiling + NOISE
        assert number("min", "none", factor) >= ceiling - 0.1  # it does learn to name the most frequent symbol


@pytest.mark.book
def test_alibi_stays_under_the_reflection_ceiling_at_every_length(lab):
    settings, number = lab
    factors = settings.length_factors
    for factor in factors:
        assert number("max", "alibi", factor) <= number("lab_reflection", None, factor) + NOISE
    # ... well above the order-blind ceiling, and about as good at 4 L_train as at L_train.
    lowest = min(number("min", "alibi", f) for f in factors)
    assert lowest > max(number("lab_ceiling", None, f) for f in factors) + 0.1
    assert abs(number("acc", "alibi", factors[-1]) - number("acc", "alibi", factors[0])) < 0.1


@pytest.mark.book
def test_asymmetric_alibi_beats_the_reflection_ceiling_and_keeps_the_task(lab):
    settings, number = lab
    factors = settings.length_factors
    assert number("min", "alibi_asymmetric", factors[0]) > number("lab_reflection", None, factors[0]) + 0.03
    start = number("acc", "alibi_asymmetric", factors[0])
    assert all(number("acc", "alibi_asymmetric", f) >= start - 0.02 for f in factors)
    assert all(number("acc", "rotary", f) > number("acc", "alibi_asymmetric", f) for f in factors)


def test_asymmetric_alibi_bias_is_ruoss_et_al_s():
    """Their code: -|i - j| with 0.5 added left of the diagonal (j < i), times the slope."""
    from tinyformer.models.positional import alibi_bias, alibi_slopes

    length = 7
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    expected = (-(i - j).abs() + 0.5 * (j < i)).to(DOUBLE) * alibi_slopes(4)[:, None, None]
    torch.testing.assert_close(alibi_bias(4, length, asymmetric=True, dtype=DOUBLE), expected, rtol=0, atol=0)
    with pytest.raises(TypeError, match="asymmetric must be a bool"):
        alibi_bias(4, length, asymmetric=1)


def test_asymmetric_alibi_encoder_tells_a_sequence_from_its_mirror_image():
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=10, num_classes=8, d_model=16, num_heads=4, d_ff=32, positional="alibi_asymmetric"
    )
    model = TinyTransformer(config).to(DOUBLE).eval()
    ids = torch.randint(10, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden, _ = model.encode(ids)
        mirrored, _ = model.encode(ids.flip(1))
    assert (mirrored - hidden.flip(1)).abs().max().item() > 1e-3


def test_learned_rows_past_the_training_length_are_untrained_in_the_lab():
    """On a small lab (the chapter's own glues the same change, ``learned_untrained_change``: 0)."""
    small = ExtrapolationConfig(steps=3, batch_size=4, seeds=(0, 1), eval_size=8)
    config = TransformerConfig(
        vocab_size=small.num_symbols + 2,
        num_classes=small.num_symbols,
        d_model=8,
        num_heads=2,
        d_ff=16,
        positional="learned",
    )
    result = run_extrapolation(config, small, ("learned",))
    for run in result.runs["learned"]:
        weight = run.model.positional.weight
        assert not torch.equal(weight[: small.train_len], run.initial_state["positional.weight"][: small.train_len])
        torch.testing.assert_close(
            weight[small.train_len :], run.initial_state["positional.weight"][small.train_len :], rtol=0, atol=0
        )


def test_alibi_encoder_cannot_tell_a_sequence_from_its_mirror_image():
    """The reason for the reflection ceiling: reversing the input reverses the outputs (no causal mask)."""
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=10, num_classes=8, d_model=16, num_heads=4, d_ff=32, positional="alibi")
    model = TinyTransformer(config).to(DOUBLE).eval()
    ids = torch.randint(10, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden, _ = model.encode(ids)
        mirrored, _ = model.encode(ids.flip(1))
    torch.testing.assert_close(mirrored, hidden.flip(1))


@pytest.mark.parametrize(("seq_len", "num_symbols"), [(3, 2), (4, 3), (5, 2)])
def test_reflection_blind_ceiling_is_the_best_mirror_blind_accuracy(seq_len, num_symbols):
    """Exhaustively: group each sequence with its mirror image; the best answer per group wins its largest share."""
    rows, markers, labels = [], [], []
    for symbols in itertools.product(range(num_symbols), repeat=seq_len - 1):
        for marker in range(seq_len - 1):
            tokens = [s + 2 for s in symbols]
            tokens.insert(marker, MARKER)
            rows.append(tuple(tokens))
            markers.append(marker)
            labels.append(symbols[marker])
    batch = MarkerBatch(torch.tensor(rows), torch.tensor(markers), torch.tensor(labels), num_symbols)
    groups: dict[tuple[int, ...], Counter[int]] = {}
    for tokens, label in zip(rows, labels, strict=True):
        groups.setdefault(min(tokens, tokens[::-1]), Counter())[label] += 1
    best = sum(max(c.values()) for c in groups.values()) / len(rows)
    assert math.isclose(reflection_blind_ceiling(batch), best, rel_tol=1e-12)


# -- the built chapter -------------------------------------------------------------------------------------


@pytest.mark.book
def test_beyond_chapter_numbers_equal_what_the_library_computes(book, lab):
    settings, number = lab
    data = glued_values(book, "beyond-sinusoids")
    for scheme in LAB_SCHEMES:
        for factor in settings.length_factors:
            assert number("min", scheme, factor) <= number("acc", scheme, factor) <= number("max", scheme, factor)
    ceilings = [position_blind_ceiling(batch) for batch in evaluation_batches(settings)]
    reflections = [reflection_blind_ceiling(batch) for batch in evaluation_batches(settings)]
    for n, factor in enumerate(settings.length_factors):
        assert float(data[f"lab_ceiling_{factor}"]) == ceilings[n]
        assert float(data[f"lab_reflection_{factor}"]) == reflections[n]
        assert int(data[f"lab_len_{factor}"]) == settings.eval_lengths[n]
    assert float(data["learned_untrained_change"]) == 0.0
    assert int(data["lab_num_seeds"]) == len(settings.seeds) >= 3
    assert float(data["alibi_first_slope"]) == 0.5
    assert float(data["alibi_last_slope"]) == 2.0**-8
    assert float(data["rotary_score_spread"]) < 1e-9
    assert float(data["pairing_gap"]) < 1e-12 < float(data["pairing_mismatch"])
    assert float(data["alibi_padding_weight"]) == float(data["alibi_future_weight"]) == 0.0


def test_results_merge_only_when_they_fit_together():
    lab = ExtrapolationConfig(steps=1, batch_size=4, seeds=(0,), eval_size=8)
    config = TransformerConfig(vocab_size=10, num_classes=8, d_model=8, num_heads=2, d_ff=16)
    first, second = run_extrapolation(config, lab, ("none",)), run_extrapolation(config, lab, ("rotary",))
    merged = ExtrapolationResult.merge([first, second])
    assert merged.schemes == ("none", "rotary")
    assert merged.accuracy["rotary"] is second.accuracy["rotary"]
    with pytest.raises(ValueError, match="more than one part"):
        ExtrapolationResult.merge([first, first])
    with pytest.raises(ValueError, match="different ExtrapolationConfigs"):
        ExtrapolationResult.merge(
            [
                first,
                run_extrapolation(
                    config, ExtrapolationConfig(steps=2, batch_size=4, seeds=(0,), eval_size=8), ("rotary",)
                ),
            ]
        )
