"""Serving attention (chapter 10): the quantised cache (KIVI's keys per channel, values per token), the
paged cache (PagedAttention's blocks and block tables), the reservation simulation and the acceptance
rate of a draft. The chapter's claims are marked with it; multi-head latent attention and speculative
decoding have files of their own (tests/test_latent_attention.py, tests/test_speculative.py)."""

import math

import pytest
import torch

from tinyformer.labs.serving import (
    bigram_probabilities,
    cache_quality,
    draft_acceptance,
    simulate_reservations,
    unigram_probabilities,
)
from tinyformer.models.cache import KVCache, kv_cache_bytes
from tinyformer.models.decoder import DecoderConfig, TinyDecoder
from tinyformer.models.paged_cache import PagedKVCache, gather_blocks, physical_slot
from tinyformer.models.quantized_cache import QuantizedKVCache, dequantize, quantize
from tinyformer.models.speculative import acceptance_rate, expected_tokens_per_pass

DOUBLE = torch.float64
LLAMA = {"positional": "rotary", "norm": "rms", "activation": "swiglu", "bias": False}
SCHEMES = {
    "rotary": LLAMA,
    "learned": {"positional": "learned"},
    "alibi": {"positional": "alibi"},
    "grouped-query": LLAMA | {"num_kv_heads": 2},
    "latent": LLAMA | {"kv_lora_rank": 8, "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 8},
}


def _model(seed=0, **fields):
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=40, d_model=32, num_heads=4, d_ff=64, num_layers=2, **fields)
    return TinyDecoder(config).to(DOUBLE).eval()


def _step_logits(model, ids, cache, prefill=5):
    """Logits of a prefill of ``prefill`` tokens, then one token per pass."""
    out = [model(ids[:, :prefill], cache=cache)]
    out += [model(ids[:, t : t + 1], cache=cache) for t in range(prefill, ids.size(1))]
    return torch.cat(out, dim=1)


# --- the quantiser


@pytest.mark.parametrize("nbits", [2, 4, 8])
@pytest.mark.parametrize("dim", [0, -1])
def test_quantize_is_within_half_a_step_and_hits_both_ends(nbits, dim):
    x = torch.randn(16, 12, dtype=DOUBLE, generator=torch.Generator().manual_seed(nbits))
    codes, scale, low = quantize(x, dim, nbits)
    assert codes.dtype == torch.uint8
    assert codes.shape == x.shape
    assert scale.shape == low.shape == x.amin(dim, keepdim=True).shape
    error = (dequantize(codes, scale, low) - x).abs()
    assert bool((error <= scale / 2 + 1e-12).all())
    # the smallest number of every group gets code 0, the largest the top code
    assert bool((codes.amin(dim) == 0).all())
    assert bool((codes.amax(dim) == 2**nbits - 1).all())


def test_a_constant_group_dequantises_exactly():
    x = torch.full((3, 5), 0.25, dtype=DOUBLE)
    codes, scale, low = quantize(x, -1, 8)
    assert torch.equal(dequantize(codes, scale, low), x)


def test_keys_need_per_channel_groups_when_a_channel_holds_outliers():
    """KIVI's finding on a made-up key matrix: one channel 50 times larger than the rest. Per token, the
    outlier sets every token's scale and the other channels lose their precision; per channel they keep it."""
    generator = torch.Generator().manual_seed(0)
    keys = torch.randn(64, 16, dtype=DOUBLE, generator=generator)
    keys[:, 3] *= 50
    errors = {}
    for name, dim in (("per token", -1), ("per channel", 0)):
        codes, scale, low = quantize(keys, dim, 4)
        errors[name] = (dequantize(codes, scale, low) - keys)[:, [c for c in range(16) if c != 3]].abs().mean()
    assert errors["per channel"] < errors["per token"] / 5


def test_quantize_refuses_bad_input_by_name():
    with pytest.raises(ValueError, match="nbits must be one of"):
        quantize(torch.zeros(2, 2), -1, 3)
    with pytest.raises(TypeError, match=r"x must be a floating-point Tensor, got torch\.int64"):
        quantize(torch.zeros(2, 2, dtype=torch.long), -1, 8)


# --- the quantised cache


@pytest.mark.claim("serving-attention")
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_an_int8_cache_gives_the_float_caches_logits_to_within_its_rounding(scheme):
    model = _model(**SCHEMES[scheme])
    ids = torch.randint(0, 40, (2, 40), generator=torch.Generator().manual_seed(1))
    exact = _step_logits(model, ids, model.new_cache(2))
    cache = QuantizedKVCache(model.config, 2, nbits=8, group_size=8)
    quantised = _step_logits(model, ids, cache)
    gap = (quantised - exact).abs().max().item()
    assert 0 < gap < 1e-2
    assert cache.num_cached == cache.seq_len == 40
    # four bits: ~16 times coarser steps, and larger errors
    coarse = _step_logits(model, ids, QuantizedKVCache(model.config, 2, nbits=4, group_size=8))
    assert (coarse - exact).abs().max().item() > 4 * gap


def test_the_int8_cache_holds_a_byte_per_number_and_its_scales():
    model = _model(**LLAMA)
    model.float()
    cache = QuantizedKVCache(model.config, 1, nbits=8, group_size=8)
    model(torch.randint(0, 40, (1, 24)), cache=cache)
    config, d = model.config, model.config.head_dim
    heads, layers = config.kv_heads, config.num_layers
    # keys: a byte per number and a scale and minimum per channel per group of 8; values: a byte per
    # number and a scale and minimum per token and head, float32
    expected = layers * heads * 24 * (d + 2 * 4 * d / 8 + d + 2 * 4)
    assert cache.nbytes == expected
    # with a head width of 8 the scales cost as much as the codes: half of float32
    assert cache.nbytes == kv_cache_bytes(config, 1, 24) / 2


def test_keys_wait_in_full_precision_until_their_group_fills():
    model = _model(**LLAMA)
    ids = torch.randint(0, 40, (1, 11), generator=torch.Generator().manual_seed(2))
    cache = QuantizedKVCache(model.config, 1, nbits=8, group_size=4)
    model(ids, cache=cache)
    layer = cache._layers[0]
    assert layer.key_codes.size(2) == 8
    assert layer.key_residual.size(2) == 3
    assert layer.value_codes.size(2) == 11


def test_generate_takes_a_quantised_or_a_paged_cache():
    model = _model(**LLAMA)
    ids = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, :2] = False
    greedy = model.generate(ids, 12, attention_mask=mask)
    paged = model.generate(ids, 12, attention_mask=mask, cache=PagedKVCache(model.config, 2, block_size=3))
    assert torch.equal(paged, greedy)
    quantised = model.generate(ids, 12, attention_mask=mask, cache=QuantizedKVCache(model.config, 2))
    assert quantised.shape == greedy.shape


def test_bad_caches_are_refused_by_name():
    model = _model(**LLAMA)
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="nbits must be one of"):
        QuantizedKVCache(model.config, 1, nbits=5)
    with pytest.raises(ValueError, match="group_size=0 must be >= 1"):
        QuantizedKVCache(model.config, 1, group_size=0)
    with pytest.raises(ValueError, match="block_size=0 must be >= 1"):
        PagedKVCache(model.config, 1, block_size=0)
    windowed = model.config.replace(sliding_window=4)
    for make in (QuantizedKVCache, PagedKVCache):
        with pytest.raises(ValueError, match="takes no sliding_window"):
            make(windowed, 1)
    with pytest.raises(ValueError, match="cannot be cropped"):
        QuantizedKVCache(model.config, 1).crop(0)
    full = model.new_cache(1)
    model(ids, cache=full)
    with pytest.raises(ValueError, match="cache must be empty, it holds 3 tokens"):
        model.generate(ids, 2, cache=full)
    with pytest.raises(ValueError, match="cannot go with use_cache=False"):
        model.generate(ids, 2, cache=model.new_cache(1), use_cache=False)
    with pytest.raises(TypeError, match="cache must be a KVCache or None, got dict"):
        model.generate(ids, 2, cache={})


# --- the paged cache


@pytest.mark.claim("serving-attention")
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_a_paged_cache_gives_exactly_the_contiguous_caches_logits(scheme, block_size):
    model = _model(**SCHEMES[scheme])
    ids = torch.randint(0, 40, (2, 21), generator=torch.Generator().manual_seed(4))
    exact = _step_logits(model, ids, model.new_cache(2))
    paged = PagedKVCache(model.config, 2, block_size=block_size)
    assert torch.equal(_step_logits(model, ids, paged), exact)
    # a sequence holds ceil(21 / B) blocks: at most B - 1 empty slots
    assert len(paged.block_tables[0]) == math.ceil(21 / block_size)


def test_a_cropped_paged_cache_returns_its_blocks_and_decodes_on():
    model = _model(**LLAMA)
    ids = torch.randint(0, 40, (1, 30), generator=torch.Generator().manual_seed(5))
    contiguous, paged = model.new_cache(1), PagedKVCache(model.config, 1, block_size=4)
    for cache in (contiguous, paged):
        model(ids[:, :20], cache=cache)
        cache.crop(9)
    assert paged.block_tables[0] == paged.block_tables[0][:3]
    assert len(paged._free) >= 2
    torch.testing.assert_close(model(ids[:, 9:30], cache=paged), model(ids[:, 9:30], cache=contiguous), rtol=0, atol=0)


def test_blocks_are_read_in_table_order():
    pool = torch.arange(5 * 2 * 3, dtype=DOUBLE).view(5, 1, 3, 2)
    tables = torch.tensor([[4, 0], [1, 3]])
    keys = gather_blocks(pool, tables, 5)
    assert keys.shape == (2, 1, 5, 2)
    for row in range(2):
        for t in range(5):
            block, slot = physical_slot(tables[row], t, 3)
            assert torch.equal(keys[row, :, t], pool[block, :, slot])
    with pytest.raises(ValueError, match="num_tokens=7 is more than the 6 slots of 2 blocks"):
        gather_blocks(pool, tables, 7)
    with pytest.raises(TypeError, match=r"block_tables must be an integer tensor, got torch\.float32"):
        gather_blocks(pool, tables.float(), 2)
    with pytest.raises(ValueError, match="position=6 needs block 2 of the table; it has 2"):
        physical_slot(tables[0], 6, 3)


# --- the reservation simulation


@pytest.mark.claim("serving-attention")
def test_reserving_for_the_longest_text_wastes_most_of_the_cache_and_paging_little():
    for seed in range(3):
        shares = simulate_reservations(seed=seed)
        assert shares.max_length < shares.power_of_two < shares.oracle < 1
        assert shares.paged > 0.9
        # paging wastes at most B - 1 slots per request: its share is bounded below
        bound = 1 - 15 * shares.num_requests / (shares.num_requests * (shares.prompt_mean + 1))
        assert shares.paged >= bound


def test_a_block_of_one_token_wastes_nothing():
    assert simulate_reservations(block_size=1).paged == 1.0


def test_the_simulation_refuses_bad_sizes_by_name():
    with pytest.raises(ValueError, match="block_size=0 must be >= 1"):
        simulate_reservations(block_size=0)
    with pytest.raises(ValueError, match="sigma must be a number > 0, got -1"):
        simulate_reservations(sigma=-1)


# --- acceptance


def test_acceptance_rate_is_one_minus_the_total_variation_distance():
    generator = torch.Generator().manual_seed(6)
    p = torch.randn(5, 9, dtype=DOUBLE, generator=generator).softmax(-1)
    q = torch.randn(5, 9, dtype=DOUBLE, generator=generator).softmax(-1)
    distance = 0.5 * (p - q).abs().sum(-1)
    assert acceptance_rate(p, q) == pytest.approx(float((1 - distance).mean()), abs=1e-12)
    assert acceptance_rate(p, p) == pytest.approx(1.0)


def test_draft_acceptance_of_the_model_itself_is_one_and_of_count_drafts_below():
    model = _model(**LLAMA)
    windows = torch.randint(0, 40, (3, 12), generator=torch.Generator().manual_seed(7))
    assert draft_acceptance(model, windows, model) == pytest.approx(1.0)
    text = torch.randint(0, 40, (500,), generator=torch.Generator().manual_seed(8))
    bigram, unigram = bigram_probabilities(text, 40), unigram_probabilities(text, 40)
    torch.testing.assert_close(bigram.sum(-1), torch.ones(40, dtype=DOUBLE))
    assert 0 < draft_acceptance(model, windows, bigram) < 1
    assert 0 < draft_acceptance(model, windows, unigram) < 1
    with pytest.raises(TypeError, match="draft must be a TinyDecoder"):
        draft_acceptance(model, windows, "bigram")


def test_cache_quality_of_the_full_precision_cache_is_perfect():
    model = _model(**LLAMA)
    windows = torch.randint(0, 40, (2, 20), generator=torch.Generator().manual_seed(9))
    quality = cache_quality(model, windows, KVCache, prefill=4)
    assert quality.top1_agreement == 1.0
    assert quality.loss == quality.reference_loss
    assert quality.bytes_per_token == kv_cache_bytes(model.config, 1, 1, DOUBLE)
    with pytest.raises(ValueError, match="prefill=19 must be below"):
        cache_quality(model, windows, KVCache, prefill=19)


def test_eq_1_at_the_ends():
    assert expected_tokens_per_pass(0.0, 4) == 1.0
    assert expected_tokens_per_pass(1.0, 4) == 5.0


@pytest.mark.parametrize("make", [KVCache, QuantizedKVCache, PagedKVCache])
def test_a_pass_that_stopped_between_layers_leaves_every_cache_unchanged(make):
    model = _model(**LLAMA)
    ids = torch.randint(0, 40, (1, 9), generator=torch.Generator().manual_seed(10))
    cache, untouched = make(model.config, 1), make(model.config, 1)
    for c in (cache, untouched):
        model(ids[:, :6], cache=c)
    cache._begin()
    key = torch.zeros(1, model.config.kv_heads, 1, model.config.head_dim, dtype=DOUBLE)
    cache.update(0, key, key)
    with pytest.raises(RuntimeError, match=r"a pass updated layers \[0\] of 2; the cache is unchanged"):
        cache._commit(torch.ones(1, 7, dtype=torch.bool))
    assert cache.seq_len == cache.num_cached == 6
    torch.testing.assert_close(model(ids[:, 6:], cache=cache), model(ids[:, 6:], cache=untouched), rtol=0, atol=0)
