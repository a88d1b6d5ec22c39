"""Multi-head latent attention (tinyformer.models.latent_attention; DeepSeek-V2, Sec. 2.1) in the decoder: the
naive and the absorbed form agree in float64, a cached pass equals the full pass and holds d_c + d_h^R numbers
per token and layer (kv_cache_bytes), and a converted Hugging Face DeepSeek-V3 with dense layers gives the same
logits in a full pass and in cached decoding, with as many cached numbers per token as Hugging Face's own cache
(issue 36, item 1)."""

import dataclasses

import pytest
import torch
from decodertools import (  # noqa: F401 (fixtures)
    DOUBLE,
    TIGHT,
    deepseek_config,
    deepseek_in_float64,
    hf_model,
    hf_positions,
    left_padded,
    logits_gap,
    one_thread,
    randomize,
)
from transformers import DeepseekV3ForCausalLM

from tinyformer.bridges.hf import from_transformers
from tinyformer.models.cache import kv_cache_bytes
from tinyformer.models.decoder import DecoderConfig, TinyDecoder
from tinyformer.models.latent_attention import MultiHeadLatentAttention

pytestmark = pytest.mark.usefixtures("one_thread")

LATENT = {
    "vocab_size": 30,
    "d_model": 16,
    "num_heads": 4,
    "d_ff": 24,
    "num_layers": 2,
    "norm": "rms",
    "activation": "swiglu",
    "bias": False,
    "kv_lora_rank": 5,
    "qk_nope_head_dim": 3,
    "qk_rope_head_dim": 4,
    "v_head_dim": 7,
}
VARIANTS = {
    "queries from x": {},
    "query latent": {"q_lora_rank": 6},
    "interleaved rotary, biases": {"rotary_interleaved": True, "bias": True, "q_lora_rank": 6},
    "defaults": {"qk_nope_head_dim": None, "qk_rope_head_dim": None, "v_head_dim": None},
}


def latent_decoder(seed=0, **fields):
    return randomize(TinyDecoder(DecoderConfig(**(LATENT | fields))).to(DOUBLE).eval(), seed)


def absorbed_twin(model):
    twin = TinyDecoder(dataclasses.replace(model.config, mla_absorbed=True)).to(DOUBLE).eval()
    twin.load_state_dict(model.state_dict())
    return twin


def step_by_step(model, ids, mask):
    """Logits of every token, fed one at a time through a cache; and the cache."""
    cache = model.new_cache(ids.size(0))
    with torch.no_grad():
        logits = [model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache) for t in range(ids.size(1))]
    return torch.cat(logits, dim=1), cache


class TestLatentAttention:
    @pytest.mark.claim("serving-attention")
    @pytest.mark.parametrize("variant", VARIANTS)
    def test_the_absorbed_form_equals_the_naive_one(self, variant):
        """W_UK folded into the query and W_UV into the output projection: the same logits in float64 (1e-10),
        in a full pass with left padding and in cached decoding, and the same attention weights."""
        model = latent_decoder(1, **VARIANTS[variant])
        twin = absorbed_twin(model)
        ids, mask = left_padded(1, 30, [0, 3, 1], 9)
        real = mask.bool()
        with torch.no_grad():
            naive, naive_weights = model(ids, attention_mask=mask, need_weights=True)
            absorbed, absorbed_weights = twin(ids, attention_mask=mask, need_weights=True)
            fused = twin(ids, attention_mask=mask)
        torch.testing.assert_close(absorbed[real], naive[real], **TIGHT)
        torch.testing.assert_close(fused[real], naive[real], **TIGHT)
        for mine, theirs in zip(absorbed_weights, naive_weights, strict=True):
            torch.testing.assert_close(mine, theirs, **TIGHT)
        stepped, _ = step_by_step(twin, ids, mask)
        torch.testing.assert_close(stepped[real], naive[real], **TIGHT)

    @pytest.mark.parametrize("variant", VARIANTS)
    def test_the_cache_holds_the_latent_and_one_rotary_key(self, variant):
        model = latent_decoder(2, **VARIANTS[variant])
        config = model.config
        ids, mask = left_padded(2, 30, [2, 0], 8)
        with torch.no_grad():
            full = model(ids, attention_mask=mask)
        stepped, cache = step_by_step(model, ids, mask)
        real = mask.bool()
        torch.testing.assert_close(stepped[real], full[real], **TIGHT)
        for key, value in zip(cache.keys, cache.values, strict=True):
            assert key.shape == (2, 1, 8, config.kv_lora_rank)
            assert value.shape == (2, 1, 8, config.qk_rope_head_dim)
        assert cache.nbytes == kv_cache_bytes(config, 2, 8, DOUBLE)
        per_token = config.num_layers * (config.kv_lora_rank + config.qk_rope_head_dim)
        assert kv_cache_bytes(config, 1, 1, torch.float16) == 2 * per_token

    def test_the_cache_against_multi_head_attentions(self):
        """DeepSeek-V2's Table 1 at the paper's sizes (d_c = 4 d_h, d_h^R = d_h / 2): MLA caches 4.5 d_h per
        token and layer, what grouped-query attention with 2.25 groups would cache."""
        sizes = {"vocab_size": 10, "d_model": 1024, "num_heads": 8, "num_layers": 1, "positional": "rotary"}
        mha = DecoderConfig(**sizes)
        mla = DecoderConfig(**sizes, kv_lora_rank=4 * mha.head_dim, qk_rope_head_dim=mha.head_dim // 2)
        ratio = kv_cache_bytes(mla, 1, 100) / kv_cache_bytes(mha, 1, 100)
        assert ratio == pytest.approx(2.25 / mha.num_heads)

    def test_a_window_and_speculative_decoding_run_on_the_latent_cache(self):
        windowed = latent_decoder(3, sliding_window=4, num_sink_tokens=1)
        ids, mask = left_padded(3, 30, [0, 2], 10)
        with torch.no_grad():
            full = windowed(ids, attention_mask=mask)
        stepped, cache = step_by_step(windowed, ids, mask)
        torch.testing.assert_close(stepped[mask.bool()], full[mask.bool()], **TIGHT)
        assert cache.num_cached <= 4 - 1 + 1
        model, draft = latent_decoder(4), latent_decoder(5, num_layers=1)
        prompt = ids[:1, :5]
        out = model.speculative_generate(draft, prompt, 12, num_draft_tokens=3)
        assert torch.equal(out.sequences, model.generate(prompt, 12))

    def test_training_reaches_every_weight(self):
        model = latent_decoder(6, q_lora_rank=6).train()
        ids = torch.randint(0, 30, (2, 7), generator=torch.Generator().manual_seed(6))
        model(ids).logsumexp(-1).sum().backward()
        attention = model.layers[0].attn
        assert isinstance(attention, MultiHeadLatentAttention)
        for name, parameter in attention.named_parameters():
            assert parameter.grad is not None, name
            assert bool(parameter.grad.abs().sum() > 0), name

    @pytest.mark.parametrize(
        ("fields", "error", "words"),
        [
            ({"positional": "alibi"}, ValueError, "positional must be 'rotary', got 'alibi'"),
            ({"num_kv_heads": 2}, ValueError, "num_kv_heads=2 with kv_lora_rank=5"),
            ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, ValueError, "rope_scaling='linear'"),
            ({"qk_rope_head_dim": 3}, ValueError, "qk_rope_head_dim=3 must be even"),
            ({"kv_lora_rank": 0}, ValueError, "kv_lora_rank"),
            ({"v_head_dim": 0}, ValueError, "v_head_dim"),
            ({"q_lora_rank": 0}, ValueError, "q_lora_rank"),
            ({"kv_lora_rank": None}, ValueError, "qk_nope_head_dim=3 is a field of multi-head latent attention"),
            ({"mla_absorbed": 1}, TypeError, "mla_absorbed must be a bool"),
        ],
    )
    def test_bad_fields_are_refused_by_name(self, fields, error, words):
        with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
            DecoderConfig(**(LATENT | fields))


DEEPSEEK_VARIANTS = {
    "queries from x, interleaved rotary": {},
    "query latent, interleaved rotary": {"q_lora_rank": 10},
    "split-half rotary, tied": {"rope_interleave": False, "tie_word_embeddings": True},
    "three layers, one head": {"num_hidden_layers": 3, "num_attention_heads": 1, "num_key_value_heads": 1},
}


@pytest.mark.peer
@pytest.mark.usefixtures("deepseek_in_float64")
@pytest.mark.parametrize("variant", DEEPSEEK_VARIANTS)
def test_deepseek_v3_logits_equal_transformers_in_float64(variant):
    """A dense DeepSeek-V3 built from a small config with random weights, its float32 RMSNorm and rotary steps
    run in float64: the converted decoder's logits equal Hugging Face's to 1e-10, in a full pass with left
    padding, in the absorbed form, and in cached decoding step by step."""
    theirs = hf_model(DeepseekV3ForCausalLM, deepseek_config(**DEEPSEEK_VARIANTS[variant]), seed=31)
    ours = from_transformers(theirs)
    assert isinstance(ours.layers[0].attn, MultiHeadLatentAttention)
    ids, mask = left_padded(31, 40, [0, 3, 1], 9)
    expected, actual = logits_gap(theirs, ours, ids, mask)
    torch.testing.assert_close(actual, expected, **TIGHT)
    _, absorbed = logits_gap(theirs, absorbed_twin(ours), ids, mask)
    torch.testing.assert_close(absorbed, expected, **TIGHT)
    stepped, _ = step_by_step(ours, ids, mask)
    torch.testing.assert_close(stepped[mask.bool()], expected, **TIGHT)


@pytest.mark.peer
@pytest.mark.usefixtures("deepseek_in_float64")
def test_deepseek_v3_cached_decoding_and_its_cache_equal_transformers():
    """Hugging Face's cached decoding, one token at a time, against the library's: the same logits at every
    step, and caches that hold the same number of elements per token and layer (the latent and the rotary key,
    kv_lora_rank + qk_rope_head_dim); greedy generation gives the same tokens."""
    theirs = hf_model(DeepseekV3ForCausalLM, deepseek_config(q_lora_rank=10), seed=32)
    ours = from_transformers(theirs)
    ids, mask = left_padded(32, 40, [2, 0], 8)
    cache = ours.new_cache(2)
    their_cache = None
    with torch.no_grad():
        for t in range(ids.size(1)):
            step = theirs(
                ids[:, t : t + 1],
                attention_mask=mask[:, : t + 1],
                position_ids=hf_positions(mask)[:, t : t + 1],
                past_key_values=their_cache,
                use_cache=True,
            )
            their_cache = step.past_key_values
            mine = ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache)
            torch.testing.assert_close(mine[:, -1][mask[:, t].bool()], step.logits[:, -1][mask[:, t].bool()], **TIGHT)
    config = theirs.config
    per_token = config.kv_lora_rank + config.qk_rope_head_dim
    for layer in their_cache.layers:
        assert (layer.keys.numel() + layer.values.numel()) == 2 * ids.size(1) * per_token
    assert (
        sum(t.numel() for t in (*cache.keys, *cache.values)) == 2 * ids.size(1) * per_token * config.num_hidden_layers
    )
    with torch.no_grad():
        expected = theirs.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    assert torch.equal(ours.generate(ids, 8, attention_mask=mask), expected)


@pytest.mark.peer
def test_deepseek_v3_stock_float32_steps_leave_a_small_gap():
    """Without the float64 patch Hugging Face computes its RMSNorms and rotary table in float32: the gap is
    float32 rounding, between 1e-12 and 1e-5."""
    theirs = hf_model(DeepseekV3ForCausalLM, deepseek_config(q_lora_rank=10), seed=33)
    expected, actual = logits_gap(theirs, from_transformers(theirs), *left_padded(33, 40, [0, 2], 7))
    gap = float((expected - actual).abs().max())
    assert 1e-12 < gap < 1e-5, f"gap {gap:.3g}"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"first_k_dense_replace": 1}, "first_k_dense_replace=1 is not supported: layers from"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type"),
        ({"num_key_value_heads": 2}, "num_key_value_heads=2"),
        ({"attention_bias": True}, "attention_bias=True"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_deepseek_v3_options_not_computed_are_refused_by_name(fields, words):
    theirs = hf_model(DeepseekV3ForCausalLM, deepseek_config(**fields), seed=34)
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("(", r"\(")):
        from_transformers(theirs)
