"""tinyformer.models.attention against PyTorch's own attention, in float64.

References: ``torch.nn.functional.scaled_dot_product_attention`` (same boolean polarity: True = may
attend) and ``torch.nn.MultiheadAttention`` (opposite boolean polarity: True = blocked; its masks are
inverted before they are passed to it).
"""

import inspect

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from tinyformer.models.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention

DOUBLE = torch.float64


def random_bool_mask(generator, shape, *, ensure_row=True):
    mask = torch.rand(shape, generator=generator, dtype=DOUBLE) > 0.4
    if ensure_row:  # PyTorch's references disagree on empty rows; those are tested separately
        mask[..., 0] = True
    return mask


sizes = st.fixed_dictionaries(
    {
        "batch": st.lists(st.integers(1, 3), min_size=0, max_size=2),
        "seq_len_q": st.integers(1, 7),
        "seq_len_k": st.integers(1, 7),
        "width": st.integers(1, 8),
        "value_width": st.integers(1, 8),
        "seed": st.integers(0, 2**31 - 1),
    }
)


def make_qkv(s):
    g = torch.Generator().manual_seed(s["seed"])
    batch = tuple(s["batch"])
    q = torch.randn(*batch, s["seq_len_q"], s["width"], generator=g, dtype=DOUBLE)
    k = torch.randn(*batch, s["seq_len_k"], s["width"], generator=g, dtype=DOUBLE)
    v = torch.randn(*batch, s["seq_len_k"], s["value_width"], generator=g, dtype=DOUBLE)
    return g, q, k, v


class TestScaledDotProductAttention:
    @pytest.mark.peer
    @given(sizes)
    def test_equals_torch_without_mask(self, s):
        _, q, k, v = make_qkv(s)
        out, weights = scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=DOUBLE))

    @pytest.mark.peer
    @given(sizes)
    def test_equals_torch_with_boolean_mask(self, s):
        g, q, k, v = make_qkv(s)
        mask = random_bool_mask(g, (s["seq_len_q"], s["seq_len_k"]))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        assert (weights[..., ~mask] == 0).all()

    @pytest.mark.peer
    @given(sizes)
    def test_equals_torch_with_float_mask(self, s):
        g, q, k, v = make_qkv(s)
        mask = torch.randn(*s["batch"], s["seq_len_q"], s["seq_len_k"], generator=g, dtype=DOUBLE)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))

    @pytest.mark.peer
    @given(sizes)
    def test_equals_torch_with_is_causal(self, s):
        _, q, k, v = make_qkv(s)
        out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def test_broadcasts_leading_dimensions(self):
        g = torch.Generator().manual_seed(0)
        q = torch.randn(2, 3, 5, 4, generator=g, dtype=DOUBLE)
        k = torch.randn(1, 3, 6, 4, generator=g, dtype=DOUBLE)
        v = torch.randn(2, 1, 6, 2, generator=g, dtype=DOUBLE)
        mask = random_bool_mask(g, (2, 1, 5, 6))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        reference = F.scaled_dot_product_attention(q, k.expand(2, 3, 6, 4), v.expand(2, 3, 6, 2), attn_mask=mask)
        torch.testing.assert_close(out, reference)
        assert weights.shape == (2, 3, 5, 6)

    def test_scale_is_one_over_sqrt_of_the_key_width(self):
        q = torch.ones(1, 1, 16, dtype=DOUBLE)
        k = torch.tensor([[[1.0] * 16], [[0.0] * 16]], dtype=DOUBLE).view(1, 2, 16)
        _, weights = scaled_dot_product_attention(q, k, torch.zeros(1, 2, 1, dtype=DOUBLE))
        # scores 16/4 = 4 and 0: softmax gives e^4 / (e^4 + 1)
        torch.testing.assert_close(
            weights[0, 0, 0], torch.tensor(4.0, dtype=DOUBLE).exp() / (torch.tensor(4.0, dtype=DOUBLE).exp() + 1)
        )

    def test_dropout_is_applied_to_the_returned_weights(self):
        torch.manual_seed(0)
        q = torch.randn(2, 6, 4, dtype=DOUBLE)
        out, weights = scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        assert (weights == 0).any()
        torch.testing.assert_close(out, weights @ q)

    @pytest.mark.parametrize(
        ("kwargs", "error", "message"),
        [
            ({"key": torch.zeros(3, 5)}, ValueError, r"query width 4 != key width 5"),
            ({"value": torch.zeros(4, 2)}, ValueError, r"key length 3 != value length 4"),
            ({"query": torch.zeros(4)}, ValueError, r"query must have shape \(\.\.\., length, features\), got \(4,\)"),
            ({"query": torch.zeros(2, 4, dtype=torch.int64)}, TypeError, "query must be a floating-point Tensor"),
            ({"key": torch.zeros(3, 4, dtype=DOUBLE)}, TypeError, "share a dtype"),
            (
                {"attn_mask": torch.ones(2, 2, dtype=torch.bool)},
                ValueError,
                r"attn_mask of shape \(2, 2\) does not broadcast",
            ),
            ({"attn_mask": torch.ones(2, 3, dtype=torch.int64)}, TypeError, "attn_mask must be bool"),
            ({"dropout_p": 1.0}, ValueError, "dropout_p=1.0"),
        ],
    )
    def test_bad_input_raises_clear_errors(self, kwargs, error, message):
        args = {"query": torch.zeros(2, 4), "key": torch.zeros(3, 4), "value": torch.zeros(3, 2)} | kwargs
        with pytest.raises(error, match=message):
            scaled_dot_product_attention(**args)


def test_causal_mask_allows_exactly_j_le_i():
    mask = causal_mask(5)
    for i in range(5):
        for j in range(5):
            assert mask[i, j].item() == (j <= i)
    # The same polarity and alignment as PyTorch's is_causal.
    q = torch.randn(1, 5, 3, dtype=DOUBLE)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask), F.scaled_dot_product_attention(q, q, q, is_causal=True)
    )


@pytest.mark.peer
def test_boolean_polarity_is_true_means_attend():
    """Pinned against PyTorch: True lets a key through in ours and in F.sdpa, and blocks it in nn.MultiheadAttention."""
    q = torch.randn(1, 2, 4, dtype=DOUBLE)
    mask = torch.tensor([[True, False], [True, False]])
    _, weights = scaled_dot_product_attention(q, q, q, mask)
    torch.testing.assert_close(weights, torch.tensor([[[1.0, 0.0], [1.0, 0.0]]], dtype=DOUBLE))
    torch_mha = nn.MultiheadAttention(4, 1, batch_first=True, dtype=DOUBLE)
    _, torch_weights = torch_mha(q, q, q, attn_mask=~mask)  # torch: True = blocked
    torch.testing.assert_close(torch_weights, weights)


class TestMultiHeadAttention:
    @staticmethod
    def pair(d_model, num_heads, bias=True, seed=0):
        torch.manual_seed(seed)
        reference = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True, dtype=DOUBLE).eval()
        return reference, MultiHeadAttention.from_torch(reference).eval()

    mha_sizes = st.fixed_dictionaries(
        {
            "batch_size": st.integers(1, 4),
            "seq_len_q": st.integers(1, 6),
            "seq_len_k": st.integers(1, 6),
            "num_heads": st.sampled_from([1, 2, 4]),
            "head_dim": st.integers(1, 4),
            "bias": st.booleans(),
            "seed": st.integers(0, 2**31 - 1),
        }
    )

    @pytest.mark.peer
    @given(mha_sizes, st.booleans(), st.booleans(), st.booleans())
    def test_equals_torch_with_masks_and_weights(self, s, use_attn_mask, use_padding, average):
        d_model = s["num_heads"] * s["head_dim"]
        reference, ours = self.pair(d_model, s["num_heads"], s["bias"], s["seed"])
        g = torch.Generator().manual_seed(s["seed"])
        n, lq, lk = s["batch_size"], s["seq_len_q"], s["seq_len_k"]
        query = torch.randn(n, lq, d_model, generator=g, dtype=DOUBLE)
        key = torch.randn(n, lk, d_model, generator=g, dtype=DOUBLE)
        value = torch.randn(n, lk, d_model, generator=g, dtype=DOUBLE)
        attn_mask = random_bool_mask(g, (lq, lk)) if use_attn_mask else None
        padding = None
        if use_padding:
            padding = torch.rand(n, lk, generator=g) < 0.3
            padding[:, 0] = False  # keep one key per row: torch returns NaN for empty rows
        with torch.no_grad():
            expected, expected_weights = reference(
                query,
                key,
                value,
                attn_mask=None if attn_mask is None else ~attn_mask,  # torch: True = blocked
                key_padding_mask=padding,
                need_weights=True,
                average_attn_weights=average,
            )
            out, weights = ours(
                query,
                key,
                value,
                attn_mask=attn_mask,
                key_padding_mask=padding,
                need_weights=True,
                average_attn_weights=average,
            )
            fast, none = ours(query, key, value, attn_mask=attn_mask, key_padding_mask=padding)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(weights, expected_weights)
        torch.testing.assert_close(fast, expected)
        assert none is None
        assert weights.shape == ((n, lq, lk) if average else (n, s["num_heads"], lq, lk))

    def test_float_attn_mask_and_per_head_mask(self):
        reference, ours = self.pair(8, 2)
        x = torch.randn(3, 5, 8, dtype=DOUBLE)
        float_mask = torch.randn(5, 5, dtype=DOUBLE)
        per_head = torch.rand(3 * 2, 5, 5) > 0.5
        per_head[..., 0] = True
        with torch.no_grad():
            torch.testing.assert_close(ours(x, attn_mask=float_mask)[0], reference(x, x, x, attn_mask=float_mask)[0])
            torch.testing.assert_close(ours(x, attn_mask=per_head)[0], reference(x, x, x, attn_mask=~per_head)[0])
            torch.testing.assert_close(
                ours(x, attn_mask=per_head.view(3, 2, 5, 5), need_weights=True)[1],
                reference(x, x, x, attn_mask=~per_head)[1],
            )

    @pytest.mark.peer
    def test_is_causal_equals_torch_with_causal_mask(self):
        reference, ours = self.pair(8, 4)
        x = torch.randn(2, 6, 8, dtype=DOUBLE)
        with torch.no_grad():
            expected = reference(x, x, x, attn_mask=~causal_mask(6), is_causal=True)[0]
            torch.testing.assert_close(ours(x, is_causal=True)[0], expected)
            torch.testing.assert_close(ours(x, is_causal=True, need_weights=True)[0], expected)

    def test_key_and_value_default_to_query(self):
        _, ours = self.pair(8, 2)
        x = torch.randn(2, 4, 8, dtype=DOUBLE)
        with torch.no_grad():
            torch.testing.assert_close(ours(x)[0], ours(x, x, x)[0])

    @pytest.mark.parametrize("need_weights", [False, True])
    @pytest.mark.parametrize("how", ["attn_mask", "key_padding_mask", "both", "float"])
    def test_row_with_nothing_to_attend_gives_zeros_and_no_nan(self, how, need_weights):
        _, ours = self.pair(8, 2)
        ours.train(False)
        x = torch.randn(2, 4, 8, dtype=DOUBLE, requires_grad=True)
        attn_mask = torch.ones(4, 4, dtype=torch.bool)
        padding = torch.zeros(2, 4, dtype=torch.bool)
        kwargs = {}
        if how in ("attn_mask", "both"):
            attn_mask[1] = False  # query 1 may attend to nothing
            kwargs["attn_mask"] = attn_mask
        if how in ("key_padding_mask", "both"):
            padding[1] = True  # sequence 1 is all padding
            kwargs["key_padding_mask"] = padding
        if how == "both":
            attn_mask[1] = True
            attn_mask[1, 2:] = False  # query 1 may only see keys 0-1 ...
            padding[0, :2] = True  # ... which are padding in sequence 0
        if how == "float":
            float_mask = torch.zeros(4, 4, dtype=DOUBLE)
            float_mask[1] = float("-inf")
            kwargs["attn_mask"] = float_mask
        out, weights = ours(x, need_weights=need_weights, average_attn_weights=False, **kwargs)
        out.sum().backward()
        assert not out.isnan().any()
        assert not x.grad.isnan().any()
        blocked_out = ours.out_proj.bias.expand_as(out)  # zero heads -> output is the projection's bias
        rows = {
            "attn_mask": (slice(None), 1),
            "float": (slice(None), 1),
            "key_padding_mask": (1, slice(None)),
            "both": (0, 1),
        }[how]
        torch.testing.assert_close(out[rows], blocked_out[rows])
        if need_weights:
            assert (weights[rows[0], :, rows[1]] == 0).all()

    def test_fast_path_equals_explicit_path_in_float32_with_masks(self):
        torch.manual_seed(1)
        ours = MultiHeadAttention(16, 4).eval()
        x = torch.randn(3, 9, 16)
        mask = torch.rand(9, 9) > 0.5
        mask[:, 0] = True
        padding = torch.zeros(3, 9, dtype=torch.bool)
        padding[0, 5:] = True
        with torch.no_grad():
            fast = ours(x, attn_mask=mask, key_padding_mask=padding)[0]
            explicit = ours(x, attn_mask=mask, key_padding_mask=padding, need_weights=True)[0]
        torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-6)

    def test_from_torch_keeps_dtype_and_head_count(self):
        reference = nn.MultiheadAttention(12, 3, dropout=0.25, batch_first=True, dtype=DOUBLE)
        ours = MultiHeadAttention.from_torch(reference)
        assert (ours.num_heads, ours.head_dim, ours.dropout) == (3, 4, 0.25)
        assert ours.q_proj.weight.dtype == DOUBLE

    @pytest.mark.parametrize(
        ("module", "message"),
        [
            (nn.MultiheadAttention(8, 2, kdim=4), "kdim=4"),
            (nn.MultiheadAttention(8, 2, add_bias_kv=True), "add_bias_kv"),
            (nn.Linear(8, 8), "nn.MultiheadAttention"),
        ],
    )
    def test_from_torch_rejects_unsupported_modules(self, module, message):
        with pytest.raises((ValueError, TypeError), match=message):
            MultiHeadAttention.from_torch(module)

    @pytest.mark.parametrize(
        ("d_model", "num_heads", "error", "message"),
        [
            (10, 3, ValueError, r"d_model=10 is not divisible by num_heads=3"),
            (8, 0, ValueError, r"d_model=8 and num_heads=0"),
            (8, -2, ValueError, r"num_heads=-2"),
            (8.0, 2, TypeError, r"d_model must be an int"),
        ],
    )
    def test_constructor_errors_name_both_values(self, d_model, num_heads, error, message):
        with pytest.raises(error, match=message):
            MultiHeadAttention(d_model, num_heads)

    @pytest.mark.parametrize(
        ("kwargs", "error", "message"),
        [
            ({"query": torch.zeros(4, 8)}, ValueError, r"query must have shape \(N, length, d_model=8\), got \(4, 8\)"),
            ({"query": torch.zeros(2, 4, 6)}, ValueError, r"got \(2, 4, 6\)"),
            ({"key": torch.zeros(3, 5, 8)}, ValueError, r"batch sizes differ"),
            (
                {"attn_mask": torch.ones(3, 3, dtype=torch.bool)},
                ValueError,
                r"attn_mask must have shape \(L, S\)=\(4, 4\).*got \(3, 3\)",
            ),
            ({"attn_mask": torch.ones(4, 4, dtype=torch.int32)}, TypeError, r"attn_mask must be bool"),
            (
                {"key_padding_mask": torch.zeros(2, 3, dtype=torch.bool)},
                ValueError,
                r"key_padding_mask must have shape \(N, S\)=\(2, 4\), got \(2, 3\)",
            ),
            ({"key_padding_mask": torch.zeros(2, 4)}, TypeError, r"key_padding_mask must be a bool Tensor"),
        ],
    )
    def test_forward_errors_name_argument_and_shapes(self, kwargs, error, message):
        module = MultiHeadAttention(8, 2)
        args = {"query": torch.zeros(2, 4, 8)} | kwargs
        with pytest.raises(error, match=message):
            module(**args)

    def test_to_moves_and_casts_parameters(self):
        module = MultiHeadAttention(8, 2).to(torch.float64)
        out, _ = module(torch.randn(1, 3, 8, dtype=torch.float64))
        assert out.dtype == torch.float64


# -- Half precision: scaled before the product, softmax in float32 -------------------------------------

# Magnitudes of the inputs' entries, from small up to where the inputs themselves overflow (float16's
# largest value is 65504). bfloat16 reaches 3.4e38, but its scaled scores (about magnitude**2) must fit
# in float32, PyTorch's accumulation type too: its sweep stops at 1e18.
HALF_MAGNITUDES = {
    torch.float16: [1e-3, 1e-1, 1.0, 10.0, 100.0, 1e3, 1e4, torch.finfo(torch.float16).max],
    torch.bfloat16: [1e-3, 1e-1, 1.0, 10.0, 100.0, 1e4, 1e8, 1e12, 1e18],
}
HALF_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # a few units of the dtype's rounding


def half_inputs(dtype, magnitude, seed, shape=(2, 3, 5, 8)):
    """Query, key, value with entries up to ``magnitude`` in ``dtype``, and their exact float64 copies."""
    g = torch.Generator().manual_seed(seed)
    tensors = [((torch.rand(shape, generator=g, dtype=DOUBLE) * 2 - 1) * magnitude).to(dtype) for _ in range(3)]
    return tensors, [t.to(DOUBLE) for t in tensors]


def test_issue_example_float16_entries_of_100_give_half_and_half():
    query = key = torch.full((2, 8), 100.0, dtype=torch.float16)
    value = torch.eye(2, dtype=torch.float16)
    output, weights = scaled_dot_product_attention(query, key, value)
    torch.testing.assert_close(output, torch.full((2, 2), 0.5, dtype=torch.float16), rtol=0, atol=0)
    torch.testing.assert_close(weights, torch.full((2, 2), 0.5, dtype=torch.float16), rtol=0, atol=0)
    expected = F.scaled_dot_product_attention(query, key, value)
    torch.testing.assert_close(output, expected)


@pytest.mark.parametrize("dtype", list(HALF_MAGNITUDES), ids=str)
def test_half_precision_matches_float64_up_to_overflow(dtype):
    tolerance = HALF_TOLERANCE[dtype]
    for magnitude in HALF_MAGNITUDES[dtype]:
        for seed in range(3):
            (q, k, v), (q64, k64, v64) = half_inputs(dtype, magnitude, seed)
            output, weights = scaled_dot_product_attention(q, k, v)
            expected, expected_weights = scaled_dot_product_attention(q64, k64, v64)
            assert output.dtype == weights.dtype == dtype
            assert torch.isfinite(output).all(), f"{dtype} magnitude {magnitude:g}: non-finite output"
            scale = float(v64.abs().max())
            torch.testing.assert_close(
                output.to(DOUBLE), expected, rtol=tolerance, atol=tolerance * scale, msg=f"magnitude {magnitude:g}"
            )
            torch.testing.assert_close(
                weights.to(DOUBLE), expected_weights, rtol=tolerance, atol=tolerance, msg=f"magnitude {magnitude:g}"
            )


@pytest.mark.parametrize("dtype", list(HALF_MAGNITUDES), ids=str)
def test_half_precision_masks_stay_finite(dtype):
    (q, k, v), (q64, k64, v64) = half_inputs(dtype, 100.0, 0)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(1)) > 0.5
    mask[0] = False  # a row with nothing to attend to: zero weights, zero output
    additive = torch.zeros(5, 5, dtype=dtype).masked_fill(~mask, float("-inf"))
    for attn_mask, attn_mask64 in ((mask, mask), (additive, additive.to(DOUBLE))):
        output, weights = scaled_dot_product_attention(q, k, v, attn_mask)
        expected, expected_weights = scaled_dot_product_attention(q64, k64, v64, attn_mask64)
        tolerance = HALF_TOLERANCE[dtype]
        torch.testing.assert_close(output.to(DOUBLE), expected, rtol=tolerance, atol=tolerance * 100)
        torch.testing.assert_close(weights.to(DOUBLE), expected_weights, rtol=tolerance, atol=tolerance)
        assert not weights[..., 0, :].any()
        assert not output[..., 0, :].any()


def identity_mha(d_model, num_heads, dtype):
    """A MultiHeadAttention whose four projections are the identity: q, k, v are the input itself."""
    mha = MultiHeadAttention(d_model, num_heads).eval()
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(d_model))
            proj.bias.zero_()
    return mha.to(dtype)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("dtype", list(HALF_MAGNITUDES), ids=str)
def test_multi_head_half_precision_paths_match_float64(dtype, need_weights):
    """Both paths of MultiHeadAttention (explicit and F.scaled_dot_product_attention) agree with float64."""
    ours, reference = identity_mha(8, 2, dtype), identity_mha(8, 2, DOUBLE)
    tolerance = HALF_TOLERANCE[dtype]
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, 3:] = True
    for magnitude in HALF_MAGNITUDES[dtype]:
        (x, _, _), (x64, _, _) = half_inputs(dtype, magnitude, 0, shape=(2, 5, 8))
        for masks in ({}, {"key_padding_mask": padding, "is_causal": True}):
            with torch.no_grad():
                output, _ = ours(x, need_weights=need_weights, **masks)
                expected, _ = reference(x64, **masks)
            assert output.dtype == dtype
            assert torch.isfinite(output).all(), f"magnitude {magnitude:g}: {output}"
            torch.testing.assert_close(
                output.to(DOUBLE), expected, rtol=tolerance, atol=tolerance * magnitude, msg=f"magnitude {magnitude:g}"
            )


# -- Faithful copies: every constructor option of nn.MultiheadAttention reproduced or refused ---------

REPRODUCED = None
# For each constructor parameter of nn.MultiheadAttention, non-default values to build it with, and
# either REPRODUCED (the copy computes the same to float64 round-off) or the ValueError's text.
MHA_OPTIONS = {
    "embed_dim": [(12, REPRODUCED)],
    "num_heads": [(4, REPRODUCED), (1, REPRODUCED)],
    "dropout": [(0.25, REPRODUCED)],
    "bias": [(False, REPRODUCED)],
    "add_bias_kv": [(True, r"add_bias_kv=True is not supported")],
    "add_zero_attn": [(True, r"add_zero_attn=True is not supported")],
    "kdim": [(4, r"kdim=4 is not supported"), (8, REPRODUCED)],
    "vdim": [(6, r"vdim=6 is not supported"), (8, REPRODUCED)],
    "batch_first": [(False, r"batch_first=False is not supported")],
    "device": [("cpu", REPRODUCED)],
    "dtype": [(DOUBLE, REPRODUCED)],
}


def test_every_multihead_attention_option_is_listed():
    assert set(inspect.signature(nn.MultiheadAttention).parameters) == set(MHA_OPTIONS)


@pytest.mark.peer
@pytest.mark.parametrize(
    ("option", "value", "outcome"),
    [(option, value, outcome) for option, cases in MHA_OPTIONS.items() for value, outcome in cases],
)
def test_from_torch_reproduces_or_refuses_each_option(option, value, outcome):
    kwargs = {"embed_dim": 8, "num_heads": 2, "batch_first": True} | {option: value}
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(**kwargs).to(DOUBLE)
    if outcome is not REPRODUCED:
        with pytest.raises(ValueError, match=outcome):
            MultiHeadAttention.from_torch(reference)
        return
    if reference.in_proj_bias is not None:
        with torch.no_grad():  # PyTorch starts the biases at zero: make them show
            reference.in_proj_bias.uniform_(-1, 1)
            reference.out_proj.bias.uniform_(-1, 1)
    for training in (True, False):
        reference.train(training)
        ours = MultiHeadAttention.from_torch(reference)
        assert ours.training is training
    assert ours.dropout == reference.dropout
    assert ours.num_heads == reference.num_heads
    assert {p.dtype for p in ours.parameters()} == {DOUBLE}
    assert {p.device for p in ours.parameters()} == {reference.out_proj.weight.device}
    g = torch.Generator().manual_seed(1)
    embed_dim = kwargs["embed_dim"]
    query, key = (torch.randn(3, n, embed_dim, generator=g, dtype=DOUBLE, requires_grad=True) for n in (4, 6))
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[0, 4:] = True
    expected, expected_weights = reference(query, key, key, key_padding_mask=padding, need_weights=True)
    for need_weights in (False, True):
        output, weights = ours(query, key, key_padding_mask=padding, need_weights=need_weights)
        torch.testing.assert_close(output, expected)
        if need_weights:
            torch.testing.assert_close(weights, expected_weights)


# -- Compiles cleanly: torch.compile(fullgraph=True) and torch.export -----------------------------------


def test_multi_head_attention_compiles_with_fullgraph():
    torch._dynamo.reset()
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    compiled = torch.compile(mha, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 5, 8)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, 3:] = True
    for kwargs in ({}, {"key_padding_mask": padding, "is_causal": True}, {"need_weights": True}):
        with torch.no_grad():
            expected = mha(x, **kwargs)
            output = compiled(x, **kwargs)
        torch.testing.assert_close(output[0], expected[0])
        if kwargs.get("need_weights"):
            torch.testing.assert_close(output[1], expected[1])


def test_multi_head_attention_exports():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[0, 4:] = True
    program = torch.export.export(mha, (x,), {"key_padding_mask": padding, "need_weights": True})
    output, weights = program.module()(x, key_padding_mask=padding, need_weights=True)
    expected, expected_weights = mha(x, key_padding_mask=padding, need_weights=True)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights, expected_weights)
