"""T5's relative position bias (tinyformer.models.positional.t5) and the registry it joined (issue 34).

Peers: Hugging Face ``transformers``' ``T5Attention._relative_position_bucket`` and ``T5Attention.compute_bias``
(a module built from a small ``T5Config`` with random weights; nothing is downloaded). In the models: the
decoder's cached pass equals its full pass with left padding and with a sliding window, and the encoder's bias
is one table shared by its layers (Raffel et al., 2020, Sec. 2.1).
"""

import re

import pytest
import torch
from decodertools import DOUBLE, TIGHT, decoder, left_padded
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention

from tinyformer.models.attention import MultiHeadAttention
from tinyformer.models.decoder import DecoderConfig
from tinyformer.models.encoder import TinyTransformer, TransformerConfig
from tinyformer.models.positional import (
    DECODER_POSITIONAL_SCHEMES,
    POSITIONAL_SCHEMES,
    SCHEMES,
    PositionalScheme,
    T5RelativePositionBias,
    positional_scheme,
    t5_relative_position_bucket,
)

hf_bucket = T5Attention._relative_position_bucket


# ---------------------------------------------------------------------------------------------------------------
# the buckets are Hugging Face's


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(
    ("num_buckets", "max_distance"), [(32, 128), (8, 8), (6, 5), (64, 300), (7, 13), (33, 100), (10, 160), (48, 81)]
)
def test_buckets_equal_transformers_over_three_thousand_tokens_each_way(bidirectional, num_buckets, max_distance):
    relative = torch.arange(-3000, 3001)
    ours = t5_relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    theirs = hf_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert ours.dtype == torch.long
    assert torch.equal(ours, theirs)


@settings(max_examples=60)
@given(
    bidirectional=st.booleans(),
    num_buckets=st.integers(4, 80),
    extra=st.integers(1, 400),
    relative=st.lists(st.integers(-5000, 5000), min_size=1, max_size=40),
)
def test_buckets_equal_transformers_for_any_setting(bidirectional, num_buckets, extra, relative):
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    max_distance = exact + extra
    relative = torch.tensor(relative)
    ours = t5_relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    theirs = hf_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(ours, theirs)


def test_the_buckets_t5_describes():
    """Causal, 32 buckets: distances 0..15 exact, then log buckets; every distance from 128 on is in bucket 31
    (which starts at 113, the last log bucket); bidirectionally keys to the right take the upper half."""
    back = -torch.arange(0, 400)
    causal = t5_relative_position_bucket(back, bidirectional=False)
    assert torch.equal(causal[:16], torch.arange(16))
    assert bool((causal[128:] == 31).all())
    assert int((causal == 31).nonzero()[0]) == 113
    assert int(causal[112]) == 30
    assert bool((causal[1:] >= causal[:-1]).all()), "a longer distance never gets a smaller bucket"
    future = t5_relative_position_bucket(torch.arange(1, 50), bidirectional=False)
    assert bool((future == 0).all()), "causally a key to the right shares bucket 0 with the query"
    both = t5_relative_position_bucket(torch.tensor([-3, 0, 3]), bidirectional=True)
    assert both.tolist() == [3, 0, 16 + 3]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_buckets": 1, "bidirectional": False}, ValueError, "num_buckets=1 leaves 1 bucket(s) per direction"),
        ({"num_buckets": 3, "bidirectional": True}, ValueError, "num_buckets=3 leaves 1 bucket(s) per direction"),
        ({"num_buckets": 32, "max_distance": 16, "bidirectional": False}, ValueError, "max_distance=16 must exceed"),
        ({"num_buckets": 2.0, "bidirectional": False}, TypeError, "num_buckets"),
        ({"bidirectional": 1}, TypeError, "bidirectional must be a bool, got 1"),
    ],
)
def test_bad_bucket_settings_are_refused_naming_them(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        t5_relative_position_bucket(torch.arange(3), **kwargs)


@pytest.mark.parametrize("relative", [torch.arange(3.0), torch.tensor([True]), [1, 2]])
def test_relative_positions_must_be_an_integer_tensor(relative):
    with pytest.raises(TypeError, match="relative_position must be an integer Tensor"):
        t5_relative_position_bucket(relative, bidirectional=True)


# ---------------------------------------------------------------------------------------------------------------
# the bias is T5Attention.compute_bias


def hf_attention(is_decoder, num_buckets, max_distance, seed):
    config = T5Config(
        d_model=16,
        d_kv=4,
        num_heads=4,
        relative_attention_num_buckets=num_buckets,
        relative_attention_max_distance=max_distance,
        is_decoder=is_decoder,
    )
    torch.manual_seed(seed)
    attention = T5Attention(config, has_relative_attention_bias=True).to(DOUBLE).eval()
    torch.nn.init.normal_(attention.relative_attention_bias.weight)
    return attention


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 10)])
@pytest.mark.parametrize(("query_length", "past"), [(7, 0), (1, 6), (3, 40)])
def test_bias_equals_transformers_compute_bias(is_decoder, num_buckets, max_distance, query_length, past):
    """``past`` cached tokens: the queries sit at positions ``past ..``, as under a cache."""
    theirs = hf_attention(is_decoder, num_buckets, max_distance, seed=num_buckets + past)
    ours = T5RelativePositionBias(
        4, bidirectional=not is_decoder, num_buckets=num_buckets, max_distance=max_distance
    ).to(DOUBLE)
    ours.load_state_dict({"relative_attention_bias.weight": theirs.relative_attention_bias.weight})
    key_length = past + query_length
    expected = theirs.compute_bias(query_length, key_length, past_seen_tokens=past)  # (1, H, L, S)
    actual = ours(torch.arange(past, key_length), torch.arange(key_length))
    assert actual.shape == (4, query_length, key_length)
    assert torch.equal(actual, expected[0])
    # a batch of rows with their own positions (left padding) gives each row its own bias
    rows = torch.stack([torch.arange(key_length), torch.arange(key_length) + 5])
    batched = ours(rows[:, past:], rows)
    assert batched.shape == (2, 4, query_length, key_length)
    assert torch.equal(batched[0], expected[0])
    assert torch.equal(batched[1], expected[0])


def test_bias_takes_the_requested_dtype():
    bias = T5RelativePositionBias(2, bidirectional=True)
    assert bias(torch.arange(3), torch.arange(3), dtype=DOUBLE).dtype == DOUBLE
    assert bias(torch.arange(3), torch.arange(3)).dtype == torch.float32


# ---------------------------------------------------------------------------------------------------------------
# in the decoder: one table, the cache changes no logit


def small_t5(seed, **fields):
    """Few buckets, so a 20-token text reaches the logarithmic and the last bucket."""
    return decoder(seed, positional="t5", relative_attention_num_buckets=6, relative_attention_max_distance=7, **fields)


def cached_steps(model, ids, mask, first):
    with torch.no_grad():
        cache = model.new_cache(ids.size(0))
        steps = [model(ids[:, :first], attention_mask=mask[:, :first], cache=cache)]
        for t in range(first, ids.size(1)):
            steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache))
    return torch.cat(steps, 1), cache


def test_the_decoder_has_one_bias_table_for_all_layers():
    model = small_t5(0, num_layers=3)
    tables = [name for name, _ in model.named_parameters() if "relative_attention_bias" in name]
    assert tables == ["position_bias.relative_attention_bias.weight"]
    assert model.position_bias.relative_attention_bias.weight.shape == (6, 4)
    assert model.position_embed is None


@pytest.mark.parametrize("kv", [None, 2, 1])
def test_cached_logits_equal_the_full_pass_with_left_padding(kv):
    model = small_t5(1, num_kv_heads=kv)
    ids, mask = left_padded(1, 30, [0, 4, 9], 20)
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
    steps, _ = cached_steps(model, ids, mask, 5)
    real = mask.bool()
    torch.testing.assert_close(steps[real], full[real], **TIGHT)


@pytest.mark.parametrize(("window", "sinks"), [(4, 0), (5, 2), (1, 1)])
def test_a_window_that_drops_old_keys_gives_the_full_pass(window, sinks):
    model = small_t5(2, sliding_window=window, num_sink_tokens=sinks)
    ids, mask = left_padded(2, 30, [0, 3, 1], 20)
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
    steps, cache = cached_steps(model, ids, mask, 7)
    real = mask.bool()
    torch.testing.assert_close(steps[real], full[real], **TIGHT)
    assert cache.num_cached == window - 1 + sinks


def test_the_bias_moves_the_logits_and_a_left_padded_row_is_the_row_alone():
    model = small_t5(3)
    ids, mask = left_padded(3, 30, [0, 6], 14)
    with torch.no_grad():
        padded = model(ids, attention_mask=mask)
        alone = model(ids[1:, 6:])
        model.position_bias.relative_attention_bias.weight.zero_()
        unbiased = model(ids, attention_mask=mask)
    torch.testing.assert_close(padded[1, 6:], alone[0], **TIGHT)
    assert (padded - unbiased).abs().max() > 1e-2, "the learned bias must reach the logits"


def test_generation_with_and_without_the_cache_is_token_identical():
    model = small_t5(4, tie_embeddings=False)
    ids, mask = left_padded(4, 30, [0, 2, 5], 9)
    cached = model.generate(ids, 12, attention_mask=mask, use_cache=True)
    uncached = model.generate(ids, 12, attention_mask=mask, use_cache=False)
    assert torch.equal(cached, uncached)


def test_t5_has_no_table_so_any_length_runs():
    model = small_t5(5, max_len=4)
    with torch.no_grad():
        assert model(torch.zeros(1, 30, dtype=torch.long)).shape == (1, 30, 30)


# ---------------------------------------------------------------------------------------------------------------
# in the encoder: bidirectional, one table


def test_the_encoder_adds_one_bidirectional_table_to_every_layer():
    config = TransformerConfig(
        vocab_size=20,
        num_classes=3,
        d_model=16,
        num_heads=4,
        num_layers=2,
        positional="t5",
        relative_attention_num_buckets=8,
        relative_attention_max_distance=6,
    )
    torch.manual_seed(0)
    model = TinyTransformer(config).to(DOUBLE).eval()
    table = model.position_bias.relative_attention_bias.weight
    torch.nn.init.normal_(table)
    ids = torch.randint(0, 20, (2, 11))
    padding = torch.zeros(2, 11, dtype=torch.bool)
    padding[1, 8:] = True
    relative = torch.arange(11)[None, :] - torch.arange(11)[:, None]
    buckets = t5_relative_position_bucket(relative, bidirectional=True, num_buckets=8, max_distance=6)
    bias = table[buckets].permute(2, 0, 1)  # (H, L, L)
    x = model.positional(model.embedding(ids) * 4.0)
    for layer in model.layers:
        attended, _ = MultiHeadAttention.forward(layer.self_attn, x, attn_mask=bias, key_padding_mask=padding)
        x = layer.norm1(x + attended)
        x = layer.norm2(x + layer.ffn(x))
    hidden, _ = model.encode(ids, key_padding_mask=padding)
    torch.testing.assert_close(hidden, x, **TIGHT)
    # left and right differ: mirroring the keys' side changes the bias
    assert not torch.equal(bias, bias.transpose(-1, -2))


# ---------------------------------------------------------------------------------------------------------------
# the registry


def test_one_list_of_names_and_the_decoders_a_filtered_view():
    assert tuple(SCHEMES) == POSITIONAL_SCHEMES
    assert tuple(n for n in POSITIONAL_SCHEMES if n != "alibi_asymmetric") == DECODER_POSITIONAL_SCHEMES
    assert "t5" in DECODER_POSITIONAL_SCHEMES
    for name, scheme in SCHEMES.items():
        assert isinstance(scheme, PositionalScheme)
        assert scheme.name == name
        assert positional_scheme(name) is scheme
    with pytest.raises(ValueError, match=re.escape("positional='alibi_asymmetric' must be one of")):
        positional_scheme("alibi_asymmetric", decoder=True)
    with pytest.raises(ValueError, match=re.escape("positional='xpos' must be one of")):
        DecoderConfig(vocab_size=5, positional="xpos")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"relative_attention_num_buckets": 1}, "num_buckets=1 leaves 1 bucket(s) per direction"),
        ({"relative_attention_max_distance": 3}, "max_distance=3 must exceed the 16 exact buckets"),
        ({"relative_attention_max_distance": 0}, "relative_attention_max_distance=0 must be >= 1"),
    ],
)
def test_bad_t5_fields_are_refused_by_the_config(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        DecoderConfig(vocab_size=5, positional="t5", **fields)


def test_t5_fields_are_checked_only_when_t5_is_used():
    """Another scheme ignores the bucket fields (beyond their type), as it ignores them in the model."""
    assert DecoderConfig(vocab_size=5, positional="rotary", relative_attention_max_distance=2).positional == "rotary"
    with pytest.raises(ValueError, match=re.escape("num_buckets=3 leaves 1 bucket(s) per direction")):
        TransformerConfig(vocab_size=5, num_classes=2, positional="t5", relative_attention_num_buckets=3)


@pytest.mark.parametrize("init_std", [-0.1, True, "0.02"])
def test_a_bad_initial_spread_is_refused(init_std):
    with pytest.raises(ValueError, match=re.escape(f"init_std={init_std!r} must be a number >= 0")):
        T5RelativePositionBias(2, bidirectional=True, init_std=init_std)
