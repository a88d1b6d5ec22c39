"""tinyformer.models.flash against exact attention in float64: the library's explicit path and PyTorch's
``F.scaled_dot_product_attention`` (outputs, logsumexp, and the gradients of query, key and value),
``torch.autograd.gradcheck``, properties over shapes, block sizes and masks, half precision, and
peak memory measured with ``tinyformer.bridges.memory`` (sizes are asserted, never times)."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from tinyformer.bridges.memory import peak_memory
from tinyformer.models.attention import scaled_dot_product_attention
from tinyformer.models.flash import (
    Tile,
    flash_attention,
    merge_attention,
    online_softmax,
    tile_schedule,
)

DOUBLE = torch.float64
TIGHT = {"rtol": 1e-10, "atol": 1e-10}


def inputs(seed, shape_q, seq_len_k, value_dim=None, dtype=DOUBLE, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    *lead, _, dim = shape_q
    value_dim = dim if value_dim is None else value_dim
    make = lambda *s: torch.randn(*s, generator=g, dtype=DOUBLE).to(dtype).requires_grad_(requires_grad)  # noqa: E731
    return make(*shape_q), make(*lead, seq_len_k, dim), make(*lead, seq_len_k, value_dim)


def exact_lse(query, key, mask=None, is_causal=False, scale=None):
    """The logsumexp of each row's scaled, masked scores, from the full matrix (-inf for an empty row)."""
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).tril().logical_not(), -math.inf)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    return torch.logsumexp(scores, dim=-1)


def grads(out, tensors, seed=7):
    g = torch.Generator().manual_seed(seed)
    upstream = torch.randn(out.shape, generator=g, dtype=DOUBLE).to(out.dtype)
    return torch.autograd.grad(out, tensors, upstream)


# -- the online softmax ----------------------------------------------------------------------------


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    block_size=st.integers(1, 6),
    seed=st.integers(0, 2**31 - 1),
    spread=st.sampled_from([1.0, 30.0, 300.0]),
)
def test_online_softmax_equals_torch_softmax(shape, block_size, seed, spread):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=DOUBLE) * spread
    for dim in range(len(shape)):
        torch.testing.assert_close(online_softmax(x, block_size=block_size, dim=dim), x.softmax(dim), **TIGHT)


def test_online_softmax_does_not_overflow_where_a_naive_softmax_does():
    x = torch.tensor([1000.0, 999.0, 998.0], dtype=torch.float32)
    assert torch.isnan(x.exp() / x.exp().sum()).all()  # the naive formula: inf / inf
    torch.testing.assert_close(online_softmax(x, block_size=2), x.softmax(0))


def test_online_softmax_of_a_blocked_row_is_zero_not_nan():
    x = torch.full((2, 4), -math.inf, dtype=DOUBLE)
    x[1, 2] = 0.5
    got = online_softmax(x, block_size=3)
    assert torch.equal(got[0], torch.zeros(4, dtype=DOUBLE))
    torch.testing.assert_close(got[1], torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=DOUBLE))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scores": torch.ones(3, dtype=torch.long), "block_size": 2}, TypeError, "scores"),
        ({"scores": torch.ones(3), "block_size": 0}, ValueError, "block_size=0"),
        ({"scores": torch.ones(3), "block_size": 2.0}, TypeError, "block_size"),
    ],
)
def test_online_softmax_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        online_softmax(**kwargs)


# -- the forward and backward against exact attention, float64 ----------------------------------------------


@pytest.mark.peer
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    ("seq_len_q", "seq_len_k", "block_size_q", "block_size_k"),
    [(16, 16, 4, 4), (13, 11, 4, 3), (5, 19, 8, 8), (20, 7, 3, 16), (1, 9, 1, 2)],
)
def test_output_lse_and_gradients_equal_exact_attention(seq_len_q, seq_len_k, block_size_q, block_size_k, is_causal):
    q, k, v = inputs(0, (2, 3, seq_len_q, 8), seq_len_k, value_dim=5)
    out, lse = flash_attention(
        q, k, v, is_causal=is_causal, block_size_q=block_size_q, block_size_k=block_size_k, return_lse=True
    )
    mask = torch.ones(seq_len_q, seq_len_k, dtype=torch.bool).tril() if is_causal else None
    want, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, want, **TIGHT)
    torch.testing.assert_close(lse, exact_lse(q, k, is_causal=is_causal), **TIGHT)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, reference, **TIGHT)
    for got, exp in zip(grads(out, (q, k, v)), grads(reference, (q, k, v)), strict=True):
        torch.testing.assert_close(got, exp, **TIGHT)


@pytest.mark.peer
@pytest.mark.parametrize("is_causal", [False, True])
def test_logsumexp_equals_pytorchs_cpu_flash_kernel(is_causal):
    """PyTorch's CPU kernel returns its logsumexp too (an internal operator); the two agree in float64."""
    q, k, v = inputs(15, (2, 3, 29, 8), 29, requires_grad=False)
    out, lse = flash_attention(q, k, v, is_causal=is_causal, block_size_q=8, block_size_k=16, return_lse=True)
    their_out, their_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal)[:2]
    torch.testing.assert_close(out, their_out, **TIGHT)
    torch.testing.assert_close(lse, their_lse, **TIGHT)


def test_gradient_through_the_logsumexp_is_exact():
    q, k, v = inputs(1, (2, 6, 4), 9)
    out, lse = flash_attention(q, k, v, block_size_q=4, block_size_k=4, return_lse=True)
    loss = (out**2).sum() + (lse * torch.linspace(-1, 1, 6, dtype=DOUBLE)).sum()
    got = torch.autograd.grad(loss, (q, k, v))
    want_out, _ = scaled_dot_product_attention(q, k, v)
    want_loss = (want_out**2).sum() + (exact_lse(q, k) * torch.linspace(-1, 1, 6, dtype=DOUBLE)).sum()
    for a, b in zip(got, torch.autograd.grad(want_loss, (q, k, v)), strict=True):
        torch.testing.assert_close(a, b, **TIGHT)


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradcheck(is_causal):
    q, k, v = inputs(2, (1, 2, 5, 3), 7, value_dim=2)
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(3)) > 0.3
    mask[:, 0] = True

    def fn(q, k, v):
        return flash_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, block_size_q=2, block_size_k=3, return_lse=True
        )

    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_float_mask_and_key_padding_mask_equal_exact_attention():
    q, k, v = inputs(4, (2, 3, 10, 4), 12)
    g = torch.Generator().manual_seed(5)
    bias = torch.randn(3, 10, 12, generator=g, dtype=DOUBLE)  # broadcast over N
    padding = torch.zeros(2, 12, dtype=torch.bool)
    padding[0, 9:] = True
    padding[1, 5:] = True
    out = flash_attention(q, k, v, attn_mask=bias, key_padding_mask=padding, block_size_q=3, block_size_k=5)
    combined = bias.expand(2, 3, 10, 12).masked_fill(padding[:, None, None, :], -math.inf)
    want, _ = scaled_dot_product_attention(q, k, v, combined)
    torch.testing.assert_close(out, want, **TIGHT)
    for a, b in zip(grads(out, (q, k, v)), grads(want, (q, k, v)), strict=True):
        torch.testing.assert_close(a, b, **TIGHT)


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 10), (1, 10), (10, 1), (3, 1, 10), (1, 1, 1, 1)])
def test_masks_that_broadcast_along_a_length_are_read_tile_by_tile(mask_shape):
    q, k, v = inputs(16, (2, 3, 10, 4), 10)
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(17)) > 0.3
    out = flash_attention(q, k, v, attn_mask=mask, block_size_q=4, block_size_k=3)
    want, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, want, **TIGHT)
    for a, b in zip(grads(out, (q, k, v)), grads(want, (q, k, v)), strict=True):
        torch.testing.assert_close(a, b, **TIGHT)


def test_rows_that_may_attend_to_nothing_give_zeros_minus_inf_and_zero_gradients():
    q, k, v = inputs(6, (1, 2, 6, 4), 8)
    mask = torch.ones(6, 8, dtype=torch.bool)
    mask[2] = False  # query 2 may see no key
    padding = torch.zeros(1, 8, dtype=torch.bool)
    out, lse = flash_attention(
        q, k, v, attn_mask=mask, key_padding_mask=padding, block_size_q=4, block_size_k=3, return_lse=True
    )
    assert not out.isnan().any()
    assert not lse.isnan().any()
    assert torch.equal(out[..., 2, :], torch.zeros(1, 2, 4, dtype=DOUBLE))
    assert torch.isneginf(lse[..., 2]).all()
    want, _ = scaled_dot_product_attention(q, k, v, mask)  # the library's rule: zeros there too
    torch.testing.assert_close(out, want, **TIGHT)
    dq, dk, dv = grads(out + 0 * lse[..., None], (q, k, v))
    assert torch.equal(dq[..., 2, :], torch.zeros(1, 2, 4, dtype=DOUBLE))
    for a, b in zip((dq, dk, dv), grads(want, (q, k, v)), strict=True):
        torch.testing.assert_close(a, b, **TIGHT)


def test_no_keys_at_all_gives_zeros():
    q, k, v = inputs(7, (2, 3, 4), 0)
    out, lse = flash_attention(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros(2, 3, 4, dtype=DOUBLE))
    assert torch.isneginf(lse).all()


masks = st.sampled_from(["none", "bool", "float", "padding"])


@pytest.mark.peer
@given(
    lead=st.lists(st.integers(1, 3), min_size=1, max_size=2),
    seq_len_q=st.integers(1, 12),
    seq_len_k=st.integers(1, 12),
    dim=st.integers(1, 6),
    block_size_q=st.integers(1, 13),
    block_size_k=st.integers(1, 13),
    is_causal=st.booleans(),
    mask_kind=masks,
    seed=st.integers(0, 2**31 - 1),
)
def test_properties_over_shapes_blocks_and_masks(
    lead, seq_len_q, seq_len_k, dim, block_size_q, block_size_k, is_causal, mask_kind, seed
):
    q, k, v = inputs(seed, (*lead, seq_len_q, dim), seq_len_k)
    g = torch.Generator().manual_seed(seed + 1)
    attn_mask = padding = None
    reference_mask = None
    if mask_kind == "bool":  # may leave rows empty: the library's rule gives zeros
        attn_mask = torch.rand(seq_len_q, seq_len_k, generator=g) > 0.5
        reference_mask = attn_mask
    elif mask_kind == "float":
        attn_mask = torch.randn(*lead, seq_len_q, seq_len_k, generator=g, dtype=DOUBLE)
        reference_mask = attn_mask
    elif mask_kind == "padding":
        padding = torch.rand(lead[0], seq_len_k, generator=g) > 0.6
        reference_mask = ~padding.view(lead[0], *([1] * len(lead)), seq_len_k)
    out, lse = flash_attention(
        q,
        k,
        v,
        attn_mask=attn_mask,
        key_padding_mask=padding,
        is_causal=is_causal,
        block_size_q=block_size_q,
        block_size_k=block_size_k,
        return_lse=True,
    )
    want, _ = scaled_dot_product_attention(q, k, v, reference_mask, is_causal=is_causal)
    torch.testing.assert_close(out, want, **TIGHT)
    torch.testing.assert_close(
        lse,
        exact_lse(q, k, reference_mask, is_causal=is_causal).expand(lse.shape),
        **TIGHT,
    )
    for a, b in zip(grads(out, (q, k, v)), grads(want, (q, k, v)), strict=True):
        torch.testing.assert_close(a, b, **TIGHT)


def test_block_sizes_do_not_change_the_result_beyond_rounding():
    q, k, v = inputs(8, (1, 2, 33, 8), 33, dtype=torch.float32, requires_grad=False)
    results = [flash_attention(q, k, v, block_size_q=b, block_size_k=c) for b, c in [(1, 1), (8, 5), (64, 64)]]
    for result in results[1:]:
        torch.testing.assert_close(result, results[0], rtol=1e-5, atol=1e-6)


def test_custom_scale_equals_the_explicit_formula():
    q, k, v = inputs(9, (2, 5, 4), 6)
    out = flash_attention(q, k, v, scale=0.3, block_size_q=2, block_size_k=4)
    want = torch.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1) @ v
    torch.testing.assert_close(out, want, **TIGHT)


# -- half precision -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_accumulates_in_float32(dtype):
    q, k, v = inputs(10, (1, 2, 40, 16), 40, dtype=dtype)
    out, lse = flash_attention(q, k, v, is_causal=True, block_size_q=16, block_size_k=16, return_lse=True)
    assert out.dtype == dtype
    assert lse.dtype == torch.float32
    q64, k64, v64 = (t.detach().to(DOUBLE).requires_grad_() for t in (q, k, v))
    exact = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
    # float32 accumulation: the only error left is the output's rounding to the half type
    eps = torch.finfo(dtype).eps
    assert (out.to(DOUBLE) - exact).abs().max() <= eps * exact.abs().max()
    torch.testing.assert_close(lse.to(DOUBLE), exact_lse(q64, k64, is_causal=True), rtol=1e-6, atol=1e-6)
    got = grads(out, (q, k, v))
    want = grads(exact, (q64, k64, v64))
    for a, b in zip(got, want, strict=True):
        assert a.dtype == dtype
        assert (a.to(DOUBLE) - b).abs().max() <= 4 * eps * b.abs().max()


# -- the tiles ------------------------------------------------------------------------------------------------


def test_tile_schedule_covers_the_matrix_and_marks_the_causal_tiles():
    tiles = tile_schedule(10, 10, block_size_q=4, block_size_k=4, is_causal=True)
    assert len(tiles) == 9
    assert tiles[0] == Tile(0, 4, 0, 4, "diagonal")
    assert tiles[1].kind == "skipped"
    assert tiles[3] == Tile(4, 8, 0, 4, "full")
    covered = torch.zeros(10, 10, dtype=torch.int64)
    for t in tiles:
        covered[t.q_start : t.q_stop, t.k_start : t.k_stop] += 1
        block = torch.ones(10, 10, dtype=torch.bool).tril()[t.q_start : t.q_stop, t.k_start : t.k_stop]
        assert t.kind == ("full" if block.all() else "skipped" if not block.any() else "diagonal")
    assert torch.equal(covered, torch.ones(10, 10, dtype=torch.int64))


# -- split-K: merging partial results -------------------------------------------------------------------------


def test_merging_the_pieces_of_a_split_cache_equals_attention_over_all_of_it():
    q, k, v = inputs(11, (2, 4, 1, 8), 30, requires_grad=False)  # one new query against a 30-token cache
    pieces = [
        flash_attention(q, k[..., a:b, :], v[..., a:b, :], return_lse=True) for a, b in [(0, 7), (7, 20), (20, 30)]
    ]
    out, lse = merge_attention([p[0] for p in pieces], [p[1] for p in pieces])
    want, want_lse = flash_attention(q, k, v, return_lse=True)
    torch.testing.assert_close(out, want, **TIGHT)
    torch.testing.assert_close(lse, want_lse, **TIGHT)


def test_merging_an_empty_piece_changes_nothing():
    q, k, v = inputs(12, (3, 2, 5), 6, requires_grad=False)
    full = flash_attention(q, k, v, return_lse=True)
    empty = flash_attention(q, k[:, :0], v[:, :0], return_lse=True)
    out, lse = merge_attention([full[0], empty[0]], [full[1], empty[1]])
    torch.testing.assert_close(out, full[0], **TIGHT)
    torch.testing.assert_close(lse, full[1], **TIGHT)
    with pytest.raises(ValueError, match="one lse per output"):
        merge_attention([full[0]], [])


def test_a_row_that_sees_no_key_in_any_piece_gets_zero_gradients_through_the_merge():
    """Issue 37, code 1: torch.logsumexp's backward is exp(x - lse), NaN on an all -inf row; before the fix
    every key's gradient was NaN. The merged gradients equal those of one flash pass over all the keys."""
    q, k, v = inputs(13, (2, 5, 8), 12)
    mask = torch.ones(2, 5, 12, dtype=torch.bool)
    mask[0, 3] = False  # query 3 of the first sequence may attend to nothing
    mask[1, :, 4:9] = False  # and every query of the second sees nothing in the middle piece
    bounds = [(0, 4), (4, 9), (9, 12)]

    def merged():
        pieces = [
            flash_attention(q, k[:, a:b], v[:, a:b], attn_mask=mask[:, :, a:b], block_size_k=3, return_lse=True)
            for a, b in bounds
        ]
        return merge_attention([p[0] for p in pieces], [p[1] for p in pieces])

    out, lse = merged()
    assert torch.isneginf(lse[0, 3])
    assert not torch.isinf(lse[1]).any()
    got = grads(out, (q, k, v))
    want = grads(flash_attention(q, k, v, attn_mask=mask, block_size_k=3), (q, k, v))
    for g, w in zip(got, want, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, **TIGHT)
    assert torch.equal(got[0][0, 3], torch.zeros(8, dtype=DOUBLE))
    # the logsumexp's own gradient path too: a loss on the finite logsumexps, the empty row left out
    _, lse = merged()
    finite = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    for g in torch.autograd.grad(finite.sum(), (q, k, v)):
        assert torch.isfinite(g).all()


def test_merged_pieces_of_only_empty_rows_give_zero_gradients():
    q, k, v = inputs(14, (1, 3, 4), 6)
    nothing = torch.zeros(1, 3, 3, dtype=torch.bool)
    pieces = [flash_attention(q, k[:, a:b], v[:, a:b], attn_mask=nothing, return_lse=True) for a, b in [(0, 3), (3, 6)]]
    out, lse = merge_attention([p[0] for p in pieces], [p[1] for p in pieces])
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.isneginf(lse).all()
    for g in grads(out, (q, k, v)):
        assert torch.equal(g, torch.zeros_like(g))


# -- errors --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"query": torch.ones(2, 3, 4, dtype=torch.long)}, TypeError, "query must be a floating"),
        ({"key": torch.ones(2, 5, 4, dtype=torch.float32)}, TypeError, "share a dtype"),
        ({"key": torch.ones(3, 5, 4, dtype=DOUBLE)}, ValueError, "leading dimensions"),
        ({"key": torch.ones(2, 5, 3, dtype=DOUBLE)}, ValueError, "query width 4 != key width 3"),
        ({"value": torch.ones(2, 6, 4, dtype=DOUBLE)}, ValueError, "key length 5 != value length 6"),
        ({"block_size_q": 0}, ValueError, "block_size_q=0"),
        ({"block_size_k": 2.5}, TypeError, "block_size_k"),
        ({"scale": -1.0}, ValueError, "scale=-1.0"),
        ({"is_causal": 1}, TypeError, "is_causal"),
        ({"attn_mask": torch.ones(3, 6, dtype=torch.bool)}, ValueError, "does not broadcast"),
        ({"attn_mask": torch.ones(3, 5, dtype=torch.int64)}, TypeError, "attn_mask must be bool"),
        ({"key_padding_mask": torch.ones(2, 5)}, TypeError, "key_padding_mask must be a bool"),
        (
            {"key_padding_mask": torch.ones(2, 4, dtype=torch.bool)},
            ValueError,
            r"key_padding_mask must have shape \(N, S\)",
        ),
    ],
)
def test_bad_input_raises_naming_the_argument(change, error, match):
    args = {
        "query": torch.ones(2, 3, 4, dtype=DOUBLE),
        "key": torch.ones(2, 5, 4, dtype=DOUBLE),
        "value": torch.ones(2, 5, 4, dtype=DOUBLE),
    }
    args.update(change)
    with pytest.raises(error, match=match):
        flash_attention(**args)


# -- memory: sizes, measured with torch.profiler ----------------------------------------------------------------


def forward_peak(fn, seq_len, **kwargs):
    q, k, v = inputs(13, (1, 2, seq_len, 16), seq_len, dtype=torch.float32, requires_grad=False)
    with torch.no_grad():
        return peak_memory(fn, q, k, v, **kwargs).peak_bytes


@pytest.mark.peer
def test_forward_peak_memory_grows_linearly_in_length_and_stays_near_the_output():
    lengths = (256, 512, 1024)
    peaks = [forward_peak(flash_attention, n, block_size_q=64, block_size_k=64) for n in lengths]
    outputs = [2 * n * 16 * 4 for n in lengths]  # the (1, 2, L, 16) float32 output
    tile = 2 * 64 * 64 * 4
    for peak, out in zip(peaks, outputs, strict=True):
        # the output, the logsumexp and a few tiles' worth of temporaries; no L x S tensor
        assert out <= peak <= out + out // 16 + 8 * tile
    assert peaks[2] - peaks[1] <= 2.2 * (peaks[1] - peaks[0])  # linear, not quadratic, growth
    explicit = forward_peak(lambda q, k, v: scaled_dot_product_attention(q, k, v), 1024)
    assert explicit >= 2 * 1024 * 1024 * 4  # the (1, 2, L, L) weights
    assert explicit > 20 * peaks[2]


def test_training_peak_memory_holds_no_length_squared_tensor():
    seq_len = 1024
    q, k, v = inputs(14, (1, 2, seq_len, 16), seq_len, dtype=torch.float32)

    def step():
        out = flash_attention(q, k, v, is_causal=True, block_size_q=64, block_size_k=64)
        out.sum().backward()

    peak = peak_memory(step).peak_bytes
    square = 2 * seq_len * seq_len * 4
    assert peak < square / 8  # inputs' grads, output, lse, D and tiles: about 4 (1, 2, L, 16) tensors
