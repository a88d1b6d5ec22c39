"""tinyformer.attention against PyTorch's own attention, in float64.

References: ``torch.nn.functional.scaled_dot_product_attention`` (same boolean polarity: True = may
attend) and ``torch.nn.MultiheadAttention`` (opposite boolean polarity: True = blocked; its masks are
inverted before they are passed to it).
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from tinyformer.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention

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
    @given(sizes)
    def test_equals_torch_without_mask(self, s):
        _, q, k, v = make_qkv(s)
        out, weights = scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=DOUBLE))

    @given(sizes)
    def test_equals_torch_with_boolean_mask(self, s):
        g, q, k, v = make_qkv(s)
        mask = random_bool_mask(g, (s["seq_len_q"], s["seq_len_k"]))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        assert (weights[..., ~mask] == 0).all()

    @given(sizes)
    def test_equals_torch_with_float_mask(self, s):
        g, q, k, v = make_qkv(s)
        mask = torch.randn(*s["batch"], s["seq_len_q"], s["seq_len_k"], generator=g, dtype=DOUBLE)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))

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
        reference = nn.MultiheadAttention(12, 3, dropout=0.25, dtype=DOUBLE)
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
