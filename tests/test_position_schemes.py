"""Learned, rotary and ALiBi positions (tinyformer.models.positional) and their use in attention and the Transformer, in float64."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from tinyformer.models.attention import MultiHeadAttention
from tinyformer.models.encoder import POSITIONAL_SCHEMES, TinyTransformer, TransformerConfig
from tinyformer.models.positional import (
    LearnedPositionalEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    relative_shift_matrix,
    rotary_angles,
)

DOUBLE = torch.float64
even_dims = st.sampled_from([2, 4, 6, 8, 16, 32])
seeds = st.integers(0, 2**31 - 1)


def score(q, k, m, n, *, interleaved=True, base=10000.0):
    """Dot product of q rotated to position m and k rotated to position n."""
    qm = apply_rotary(q[None], positions=torch.tensor([m]), interleaved=interleaved, base=base)[0]
    kn = apply_rotary(k[None], positions=torch.tensor([n]), interleaved=interleaved, base=base)[0]
    return qm @ kn


# -- rotary ------------------------------------------------------------------------------------------------


@given(
    head_dim=even_dims,
    m=st.integers(-500, 500),
    n=st.integers(-500, 500),
    shift=st.integers(-1000, 1000),
    interleaved=st.booleans(),
    seed=seeds,
)
def test_rotary_scores_depend_only_on_the_offset(head_dim, m, n, shift, interleaved, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, head_dim, generator=g, dtype=DOUBLE)
    torch.testing.assert_close(
        score(q, k, m, n, interleaved=interleaved), score(q, k, m + shift, n + shift, interleaved=interleaved)
    )


@given(head_dim=even_dims, interleaved=st.booleans(), seed=seeds)
def test_rotary_changes_scores_when_the_offset_changes(head_dim, interleaved, seed):
    """The property above is not vacuous: the score is a non-constant function of the offset."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, head_dim, generator=g, dtype=DOUBLE)
    values = torch.stack([score(q, k, 0, n, interleaved=interleaved) for n in range(8)])
    assert (values.max() - values.min()).item() > 1e-6


@given(head_dim=even_dims, seq_len=st.integers(1, 40), interleaved=st.booleans(), seed=seeds)
def test_rotary_preserves_the_norm_of_every_vector_and_pair(head_dim, seq_len, interleaved, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, seq_len, head_dim, generator=g, dtype=DOUBLE)
    rotated = apply_rotary(x, interleaved=interleaved)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    pairs = (
        (lambda t: t.unflatten(-1, (-1, 2))) if interleaved else (lambda t: t.unflatten(-1, (2, -1)).transpose(-1, -2))
    )
    torch.testing.assert_close(pairs(rotated).norm(dim=-1), pairs(x).norm(dim=-1))
    assert rotated.shape == x.shape
    assert rotated.dtype == x.dtype


@given(head_dim=even_dims, seq_len=st.integers(1, 30), base=st.sampled_from([100.0, 10000.0, 500000.0]), seed=seeds)
def test_rotary_pairings_agree_up_to_a_fixed_permutation(head_dim, seq_len, base, seed):
    """Interleaved (2i, 2i+1) and split halves (i, i + D/2) are one computation with the features permuted."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, seq_len, head_dim, generator=g, dtype=DOUBLE)
    to_halves = torch.cat(
        (torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2))
    )  # feature 2i -> i, 2i+1 -> i + D/2
    interleaved = apply_rotary(x, base=base, interleaved=True)
    halves = apply_rotary(x[..., to_halves], base=base, interleaved=False)
    torch.testing.assert_close(halves, interleaved[..., to_halves])
    if head_dim > 2 and seq_len > 1:  # the pairings really differ: without the permutation they disagree
        assert not torch.allclose(apply_rotary(x, base=base, interleaved=False), interleaved)


def test_rotary_matches_a_loop_over_cos_and_sin_for_small_cases():
    """An independent formula: math.cos/math.sin per pair, positions 0..L-1 and given positions."""
    g = torch.Generator().manual_seed(0)
    for head_dim, base in ((2, 10000.0), (4, 10000.0), (6, 100.0)):
        x = torch.randn(5, head_dim, generator=g, dtype=DOUBLE)
        for interleaved in (True, False):
            expected = torch.empty_like(x)
            for pos in range(5):
                for i in range(head_dim // 2):
                    a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + head_dim // 2)
                    t = pos * base ** (-2 * i / head_dim)
                    expected[pos, a] = x[pos, a] * math.cos(t) - x[pos, b] * math.sin(t)
                    expected[pos, b] = x[pos, a] * math.sin(t) + x[pos, b] * math.cos(t)
            torch.testing.assert_close(
                apply_rotary(x, base=base, interleaved=interleaved), expected, rtol=0, atol=1e-14
            )
    # Hand-computed: D = 2, position 1 rotates (1, 0) by 1 radian; position 3 of (0, 2) by 3 radians.
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=DOUBLE)
    got = apply_rotary(x, positions=torch.tensor([1, 3]))
    torch.testing.assert_close(
        got, torch.tensor([[math.cos(1), math.sin(1)], [-2 * math.sin(3), 2 * math.cos(3)]], dtype=DOUBLE)
    )


@given(head_dim=even_dims, position=st.integers(-300, 300), seed=seeds)
def test_rotary_is_the_complex_product_of_su_et_al_and_the_transpose_of_the_shift_matrix(head_dim, position, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, head_dim, generator=g, dtype=DOUBLE)
    got = apply_rotary(x, positions=torch.tensor([position]))
    # Su et al. (2024), Eq. 12-13: pair i as a complex number, multiplied by exp(i pos theta_i).
    theta = position * 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=DOUBLE) / head_dim)
    complex_pairs = torch.view_as_complex(x.view(1, -1, 2).contiguous()) * torch.polar(torch.ones_like(theta), theta)
    torch.testing.assert_close(got, torch.view_as_real(complex_pairs).flatten(-2))
    # The sinusoidal chapter's M_k (PE[pos + k] = M_k PE[pos]) rotates the other way: x R_pos = x M_pos.
    torch.testing.assert_close(got, x @ relative_shift_matrix(position, head_dim))


def test_rotary_positions_broadcast_and_default_to_arange():
    x = torch.randn(2, 3, 7, 8, dtype=DOUBLE)
    torch.testing.assert_close(apply_rotary(x), apply_rotary(x, positions=torch.arange(7)))
    per_batch = torch.stack([torch.arange(7), torch.arange(7) + 5])[:, None, :]  # (2, 1, 7)
    got = apply_rotary(x, positions=per_batch)
    torch.testing.assert_close(got[1], apply_rotary(x[1], positions=torch.arange(5, 12)))
    assert rotary_angles(torch.arange(3), 4).dtype == DOUBLE


def test_rotary_computes_angles_in_float64_and_casts_at_the_end():
    x = torch.randn(1, 1, 4, dtype=DOUBLE)
    far = torch.tensor([100_000])
    half = apply_rotary(x.to(torch.float16), positions=far)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.double(), apply_rotary(x, positions=far), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"x": torch.ones(3, 5)}, ValueError, "D=5, must be even"),
        ({"x": torch.ones(3)}, ValueError, "shape"),
        ({"x": torch.ones(3, 4, dtype=torch.long)}, TypeError, "floating"),
        ({"x": torch.ones(3, 4), "positions": torch.ones(3)}, TypeError, "integer"),
        ({"x": torch.ones(3, 4), "positions": torch.arange(4)}, ValueError, "do not broadcast"),
        ({"x": torch.ones(3, 4), "base": 1.0}, ValueError, "base=1.0"),
    ],
)
def test_rotary_rejects_bad_input(kwargs, error, match):
    x = kwargs.pop("x")
    with pytest.raises(error, match=match):
        apply_rotary(x, **kwargs)


# -- ALiBi -------------------------------------------------------------------------------------------------


def official_slopes(n):
    """The slopes function of Press et al.'s reference code (github.com/ofirpress/attention_with_linear_biases)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + official_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


def test_alibi_slopes_for_8_heads_are_powers_of_one_half():
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)], dtype=DOUBLE), rtol=0, atol=0
    )


def test_alibi_slopes_for_heads_that_are_not_a_power_of_two():
    """Closest power of two below, then every other slope of the next power of two (Press et al., 2022)."""
    exponents = {
        6: [2, 4, 6, 8, 1, 3],  # 4 heads' slopes, then the 1st and 3rd of 8 heads'
        12: [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5],  # 8 heads', then 16 heads' 1st, 3rd, 5th, 7th
        3: [4, 8, 2],
    }
    for num_heads, powers in exponents.items():
        torch.testing.assert_close(alibi_slopes(num_heads), torch.tensor([2.0**-p for p in powers], dtype=DOUBLE))


@given(num_heads=st.integers(1, 80))
def test_alibi_slopes_follow_the_reference_code(num_heads):
    slopes = alibi_slopes(num_heads)
    torch.testing.assert_close(slopes, torch.tensor(official_slopes(num_heads), dtype=DOUBLE))
    assert slopes.shape == (num_heads,)
    assert len(set(slopes.tolist())) == num_heads
    assert bool(((slopes > 0) & (slopes < 1)).all()) or num_heads == 1


@given(num_heads=st.integers(1, 12), seq_len_q=st.integers(0, 9), seq_len_k=st.integers(0, 9))
def test_alibi_bias_is_minus_slope_times_distance(num_heads, seq_len_q, seq_len_k):
    bias = alibi_bias(num_heads, seq_len_q, seq_len_k, dtype=DOUBLE)
    assert bias.shape == (num_heads, seq_len_q, seq_len_k)
    slopes = official_slopes(num_heads)
    expected = torch.tensor(
        [[[-slopes[h] * abs(i - j) for j in range(seq_len_k)] for i in range(seq_len_q)] for h in range(num_heads)],
        dtype=DOUBLE,
    ).reshape(num_heads, seq_len_q, seq_len_k)
    torch.testing.assert_close(bias, expected)  # the reference code's slopes differ in the last bit for some H
    torch.testing.assert_close(
        alibi_bias(num_heads, seq_len_q, dtype=DOUBLE), alibi_bias(num_heads, seq_len_q, seq_len_q, dtype=DOUBLE)
    )


def test_alibi_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_heads=0"):
        alibi_slopes(0)
    with pytest.raises(ValueError, match="seq_len_k=-1"):
        alibi_bias(2, 3, -1)
    with pytest.raises(TypeError, match="dtype"):
        alibi_bias(2, 3, dtype=torch.long)


def reference_mha(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.d_model, ours.num_heads, batch_first=True, dtype=DOUBLE)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


@given(
    batch_size=st.integers(1, 3),
    seq_len=st.integers(1, 7),
    num_heads=st.sampled_from([1, 2, 3, 6]),
    is_causal=st.booleans(),
    padded=st.booleans(),
    need_weights=st.booleans(),
    seed=seeds,
)
def test_alibi_bias_combines_with_causal_and_padding_masks_on_both_paths(
    batch_size, seq_len, num_heads, is_causal, padded, need_weights, seed
):
    """Ours with the (H, L, S) bias, is_causal and a bool padding mask = nn.MultiheadAttention with one float mask."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    mha = MultiHeadAttention(6, num_heads).to(DOUBLE).eval()
    x = torch.randn(batch_size, seq_len, 6, generator=g, dtype=DOUBLE)
    lengths = (
        torch.randint(1, seq_len + 1, (batch_size,), generator=g) if padded else torch.full((batch_size,), seq_len)
    )
    key_padding_mask = torch.arange(seq_len)[None, :] >= lengths[:, None]  # (N, S), True = padding (right)
    bias = alibi_bias(num_heads, seq_len, dtype=DOUBLE)  # (H, L, S)
    combined = bias.expand(batch_size, -1, -1, -1).clone()  # (N, H, L, S)
    combined = combined.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    if is_causal:
        combined = combined.masked_fill(~torch.ones(seq_len, seq_len, dtype=torch.bool).tril(), float("-inf"))
    ref = reference_mha(mha)
    expected, expected_weights = ref(
        x, x, x, attn_mask=combined.reshape(batch_size * num_heads, seq_len, seq_len), average_attn_weights=False
    )
    with torch.no_grad():
        got, weights = mha(
            x,
            attn_mask=bias,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=need_weights,
            average_attn_weights=False,
        )
    torch.testing.assert_close(got, expected)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights)


def test_a_per_head_mask_equals_its_four_dimensional_and_repeated_forms():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 4).to(DOUBLE).eval()
    x = torch.randn(3, 5, 8, dtype=DOUBLE)
    bias = alibi_bias(4, 5, dtype=DOUBLE)
    with torch.no_grad():
        for need_weights in (False, True):
            got = mha(x, attn_mask=bias, need_weights=need_weights)[0]
            torch.testing.assert_close(got, mha(x, attn_mask=bias[None], need_weights=need_weights)[0])
            torch.testing.assert_close(got, mha(x, attn_mask=bias.repeat(3, 1, 1), need_weights=need_weights)[0])
            assert not torch.allclose(got, mha(x, need_weights=need_weights)[0])
    with pytest.raises(ValueError, match=r"\(H, L, S\)=\(4, 5, 5\)"):
        mha(x, attn_mask=alibi_bias(2, 5, dtype=DOUBLE))


# -- rotary inside MultiHeadAttention ----------------------------------------------------------------------


@given(seq_len=st.integers(1, 8), num_heads=st.sampled_from([1, 2, 4]), interleaved=st.booleans(), seed=seeds)
def test_rotary_attention_rotates_queries_and_keys_per_head_on_both_paths(seq_len, num_heads, interleaved, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, num_heads, rotary=True, rotary_interleaved=interleaved, rotary_base=100.0).to(DOUBLE)
    mha.eval()
    x = torch.randn(2, seq_len, 8, dtype=DOUBLE)
    with torch.no_grad():
        q = apply_rotary(mha.split_heads(mha.q_proj(x)), base=100.0, interleaved=interleaved)  # (N, H, L, D)
        k = apply_rotary(mha.split_heads(mha.k_proj(x)), base=100.0, interleaved=interleaved)
        v = mha.split_heads(mha.v_proj(x))
        expected = mha.out_proj(mha.merge_heads(torch.nn.functional.scaled_dot_product_attention(q, k, v)))
        for need_weights in (False, True):
            torch.testing.assert_close(mha(x, need_weights=need_weights)[0], expected)


def test_rotary_is_off_by_default_and_needs_an_even_head_dim():
    torch.manual_seed(0)
    plain = MultiHeadAttention(8, 2).to(DOUBLE).eval()
    rotary = MultiHeadAttention(8, 2, rotary=True).to(DOUBLE).eval()
    rotary.load_state_dict(plain.state_dict())
    x = torch.randn(1, 6, 8, dtype=DOUBLE)
    with torch.no_grad():
        # Position 0 is not rotated, so a one-token input is unchanged; a longer one is not.
        torch.testing.assert_close(plain(x[:, :1])[0], rotary(x[:, :1])[0])
        assert not torch.allclose(plain(x)[0], rotary(x)[0])
        perm = torch.tensor([3, 1, 5, 0, 2, 4])
        torch.testing.assert_close(plain(x[:, perm])[0], plain(x)[0][:, perm])  # no position without rotary
    assert not plain.rotary
    assert MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, batch_first=True)).rotary is False
    with pytest.raises(ValueError, match="head_dim=3"):
        MultiHeadAttention(6, 2, rotary=True)


# -- learned table -----------------------------------------------------------------------------------------


def test_learned_embedding_adds_its_rows_and_refuses_a_longer_input():
    torch.manual_seed(0)
    learned = LearnedPositionalEmbedding(6, 4).to(DOUBLE)
    assert learned.weight.shape == (6, 4)
    assert learned.weight.requires_grad
    x = torch.randn(2, 5, 4, dtype=DOUBLE)
    torch.testing.assert_close(learned(x), x + learned.weight[:5])
    learned(x).sum().backward()
    assert learned.weight.grad[5].abs().sum().item() == 0.0  # a row no input reached gets no gradient
    assert learned.weight.grad[:5].abs().min().item() > 0.0
    with pytest.raises(ValueError, match=r"sequence length 7 exceeds max_len=6"):
        learned(torch.randn(1, 7, 4, dtype=DOUBLE))
    with pytest.raises(ValueError, match="d_model=4"):
        learned(torch.randn(1, 3, 5, dtype=DOUBLE))
    with pytest.raises(ValueError, match="max_len=0"):
        LearnedPositionalEmbedding(0, 4)


# -- TinyTransformer with each scheme ----------------------------------------------------------------------


def model_for(positional, **overrides):
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=12, num_classes=3, d_model=8, num_heads=2, d_ff=16, max_len=16)
    return TinyTransformer(config.replace(positional=positional, **overrides)).to(DOUBLE).eval()


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_every_positional_scheme_runs(positional, norm_first):
    model = model_for(positional, norm_first=norm_first)
    assert model.config.scheme == positional
    ids = torch.randint(12, (3, 9), generator=torch.Generator().manual_seed(1))
    logits = model(ids)
    assert logits.shape == (3, 3)
    assert bool(logits.isfinite().all())
    hidden, weights = model.encode(ids, need_weights=True)
    assert hidden.shape == (3, 9, 8)
    assert len(weights) == 2
    logits.sum().backward()
    assert all(p.grad is not None for name, p in model.named_parameters() if not name.startswith("positional"))
    kinds = {"learned": LearnedPositionalEmbedding}
    if positional in kinds:
        assert isinstance(model.positional, kinds[positional])
    assert model.layers[0].self_attn.rotary is (positional == "rotary")


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_every_scheme_but_none_is_permutation_sensitive(positional):
    model = model_for(positional)
    g = torch.Generator().manual_seed(2)
    ids = torch.randperm(12, generator=g)[:8].unsqueeze(0)  # distinct tokens, so a permutation changes the input
    perm = torch.randperm(8, generator=g)
    with torch.no_grad():
        same = torch.allclose(model(ids), model(ids[:, perm]), rtol=1e-12, atol=1e-12)
    assert same is (positional == "none")


@given(positional=st.sampled_from(POSITIONAL_SCHEMES), seed=seeds)
def test_padding_does_not_change_the_logits(positional, seed):
    model = model_for(positional)
    g = torch.Generator().manual_seed(seed)
    lengths = [int(n) for n in torch.randint(1, 10, (3,), generator=g)]
    width = max(lengths) + 2
    ids = torch.randint(1, 12, (3, width), generator=g)  # the padded tokens hold random ids: they must not matter
    key_padding_mask = torch.arange(width)[None, :] >= torch.tensor(lengths)[:, None]
    with torch.no_grad():
        batched = model(ids, key_padding_mask=key_padding_mask)
        for row, n in enumerate(lengths):
            torch.testing.assert_close(batched[row], model(ids[row : row + 1, :n])[0])


def test_schemes_without_a_table_accept_inputs_longer_than_max_len():
    ids = torch.ones(1, 20, dtype=torch.long)
    for positional in ("none", "rotary", "alibi", "alibi_asymmetric"):
        assert model_for(positional)(ids).shape == (1, 3)
    for positional in ("sinusoidal", "learned"):
        with pytest.raises(ValueError, match="sequence length 20 exceeds max_len=16"):
            model_for(positional)(ids)


def test_config_rejects_an_unknown_scheme_naming_it():
    config = TransformerConfig(vocab_size=4, num_classes=2)
    assert config.positional == "sinusoidal"
    assert config.scheme == "sinusoidal"
    with pytest.raises(ValueError, match="positional='relative'"):
        config.replace(positional="relative")
    with pytest.raises(ValueError, match="contradicts positional_encoding=False"):
        config.replace(positional="rotary", positional_encoding=False)
    assert config.replace(positional_encoding=False).scheme == "none"
    with pytest.raises(ValueError, match="even head_dim"):
        TransformerConfig(vocab_size=4, num_classes=2, d_model=6, num_heads=2, positional="rotary")
