"""Long context (issue 20): rotary context extension, sliding-window attention and attention sinks, in float64.

References: Hugging Face ``transformers``' own rotary rules (``modeling_rope_utils.ROPE_INIT_FUNCTIONS``, stock in
float32 and run in float64), ``LlamaForCausalLM`` with scaled ``rope_parameters`` and ``MistralForCausalLM`` with a
sliding window, built from small configs with random weights (nothing is downloaded); ``transformers``' own
sliding-window mask function; masks written out element by element; and the decoder's own uncached pass, which a
cache that drops keys outside the window must reproduce.
"""

import concurrent.futures
import dataclasses
import logging
import math
import multiprocessing
import os
import re
import types

import pytest
import torch
from decodertools import (
    DOUBLE,
    SPECIAL_TOKENS,
    TIGHT,
    decoder,
    extended,
    float64_rms_norm,
    hf_model,
    hf_positions,
    left_padded,
    llama_config,
    logits_gap,
    one_thread,  # noqa: F401 (a fixture)
)
from transformers import LlamaForCausalLM, MistralConfig, MistralForCausalLM, modeling_rope_utils
from transformers.masking_utils import sliding_window_causal_mask_function
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral

from tinyformer.bridges.hf import from_transformers
from tinyformer.labs.long_context import (
    BOS,
    MARKER,
    QUERY,
    TASKS,
    CausalLabConfig,
    answer_accuracy,
    attention_maps,
    context_extension,
    default_workers,
    evaluation_batches,
    extension_scaling,
    fine_tune,
    first_token_mass,
    marker_batch,
    run_causal_lab,
    run_jobs,
    task_batch,
    train_causal_model,
    with_config,
)
from tinyformer.models.decoder import DecoderConfig, TinyDecoder, sliding_window_mask
from tinyformer.models.positional import (
    ROPE_SCALING_TYPES,
    RopeScaling,
    apply_rotary,
    rotary_angles,
    rotary_frequencies,
)

pytestmark = pytest.mark.usefixtures("one_thread")

#: Hugging Face rope_parameters of each scaled rope_type, on a 16-token original context.
HF_ROPE = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "yarn, betas, no truncation": {
        "rope_type": "yarn",
        "factor": 3.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 8.0,
        "beta_slow": 0.5,
        "truncate": False,
    },
    "yarn, attention_factor": {
        "rope_type": "yarn",
        "factor": 2.0,
        "original_max_position_embeddings": 16,
        "attention_factor": 1.3,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
}


def ours_of(rope_parameters, max_position_embeddings=16):
    """The library's RopeScaling of a Hugging Face rope_parameters dict."""
    original = rope_parameters.get("original_max_position_embeddings")
    if rope_parameters["rope_type"] == "dynamic":
        original = max_position_embeddings
    fields = {k: v for k, v in rope_parameters.items() if k not in ("rope_type", "original_max_position_embeddings")}
    return RopeScaling(rope_parameters["rope_type"], original_max_len=original, **fields)


def scaled_llama_config(rope, **fields):
    """A Llama config with 8-wide heads and ``rope`` scaling; ``max_position_embeddings`` 16 unless llama3's."""
    length = 64 if rope["rope_type"] == "llama3" else 16
    return llama_config(max_position_embeddings=length, rope_parameters={"rope_theta": 10000.0} | rope, **fields)


class Float64Torch(types.ModuleType):
    """``torch`` with ``torch.float`` and ``torch.float32`` meaning float64: given to ``modeling_rope_utils`` in
    place of ``torch``, it makes Hugging Face's own rotary rules compute in float64."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        if name in ("float", "float32"):
            return torch.float64
        return getattr(torch, name)


@pytest.fixture
def rope_in_float64(monkeypatch):
    """Hugging Face's rotary rules, RMSNorm and rotary table with their float32 steps run in float64: its own
    formulas (``ROPE_INIT_FUNCTIONS`` and the ``dynamic_rope_update`` decorator, unchanged), in float64.

    Its dynamic rule computes the new base from a tensor length in the default dtype, so that is float64 too."""
    for module in (modeling_rope_utils, modeling_llama, modeling_mistral):
        monkeypatch.setattr(module, "torch", Float64Torch())
    default = torch.get_default_dtype()
    torch.set_default_dtype(DOUBLE)

    @torch.no_grad()
    @modeling_rope_utils.dynamic_rope_update
    def rotary(self, x, position_ids):
        freqs = position_ids[..., None].to(DOUBLE) * self.inv_freq.to(DOUBLE)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)

    for module in (modeling_llama, modeling_mistral):
        prefix = "Llama" if module is modeling_llama else "Mistral"
        monkeypatch.setattr(getattr(module, f"{prefix}RMSNorm"), "forward", float64_rms_norm)
        monkeypatch.setattr(getattr(module, f"{prefix}RotaryEmbedding"), "forward", rotary)
    yield
    torch.set_default_dtype(default)


# ---------------------------------------------------------------------------------------------------------------
# 1. The frequency rules against Hugging Face's


class TestRotaryFrequencies:
    @pytest.mark.peer
    @pytest.mark.parametrize("variant", HF_ROPE)
    def test_each_rule_equals_transformers_in_float64(self, variant, rope_in_float64):
        config = scaled_llama_config(HF_ROPE[variant], hidden_size=256)  # 64-wide heads: ramps over many pairs
        expected, attention = modeling_rope_utils.ROPE_INIT_FUNCTIONS[HF_ROPE[variant]["rope_type"]](config)
        scaling = ours_of(HF_ROPE[variant], config.max_position_embeddings)
        assert expected.dtype == DOUBLE, "the float64 stand-in for torch should reach Hugging Face's rule"
        actual = rotary_frequencies(64, base=10000.0, scaling=scaling)
        torch.testing.assert_close(actual, expected, rtol=1e-14, atol=0)
        assert scaling.attention_scale == pytest.approx(attention, rel=1e-15)

    @pytest.mark.parametrize("variant", HF_ROPE)
    def test_each_rule_equals_stock_transformers_to_float32_rounding(self, variant):
        config = scaled_llama_config(HF_ROPE[variant], hidden_size=256)
        expected, _ = modeling_rope_utils.ROPE_INIT_FUNCTIONS[HF_ROPE[variant]["rope_type"]](config)
        assert expected.dtype == torch.float32
        actual = rotary_frequencies(64, scaling=ours_of(HF_ROPE[variant], config.max_position_embeddings))
        torch.testing.assert_close(actual.float(), expected, rtol=2e-6, atol=0)

    @pytest.mark.parametrize("seq_len", [1, 16, 17, 40, 64, 200])
    def test_dynamic_at_each_length_equals_transformers(self, seq_len, rope_in_float64):
        config = scaled_llama_config(HF_ROPE["dynamic"], hidden_size=256)
        expected, _ = modeling_rope_utils.ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=seq_len)
        actual = rotary_frequencies(64, scaling=ours_of(HF_ROPE["dynamic"]), seq_len=seq_len)
        torch.testing.assert_close(actual, expected, rtol=1e-14, atol=0)

    def test_linear_is_position_interpolation(self):
        positions = torch.arange(64)
        scaled = rotary_angles(positions, 16, scaling=RopeScaling("linear", 4.0))
        plain = rotary_angles(positions, 16)
        torch.testing.assert_close(scaled[::4], plain[:16], rtol=1e-15, atol=0)

    def test_ntk_keeps_the_fastest_pair_and_slows_the_slowest_by_the_factor(self):
        plain = rotary_frequencies(16)
        scaled = rotary_frequencies(16, scaling=RopeScaling("ntk", 4.0))
        assert scaled[0] == plain[0] == 1.0
        assert float(plain[-1] / scaled[-1]) == pytest.approx(4.0, rel=1e-13)
        assert bool((scaled <= plain).all())
        assert bool((scaled[1:] < plain[1:]).all())

    def test_dynamic_changes_nothing_inside_the_original_context(self):
        scaling = RopeScaling("dynamic", 4.0, original_max_len=16)
        for seq_len in (1, 8, 16):
            torch.testing.assert_close(rotary_frequencies(8, scaling=scaling, seq_len=seq_len), rotary_frequencies(8))
        assert bool((rotary_frequencies(8, scaling=scaling, seq_len=17)[1:] < rotary_frequencies(8)[1:]).all())

    def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones(self):
        scaling = RopeScaling("yarn", 4.0, original_max_len=512, beta_fast=8.0, beta_slow=1.0, truncate=False)
        plain = rotary_frequencies(32)
        scaled = rotary_frequencies(32, scaling=scaling)
        turns = 512 * plain / (2 * math.pi)  # rotations over the original context
        fast, slow = turns > 8.0 * 1.3, turns < 1.0 / 1.3  # clear of the ramp's ends
        assert fast.any()
        assert slow.any()
        assert (~fast & ~slow).any()
        torch.testing.assert_close(scaled[fast], plain[fast], rtol=1e-15, atol=0)
        torch.testing.assert_close(scaled[slow], plain[slow] / 4, rtol=1e-15, atol=0)
        middle = ~fast & ~slow
        assert bool((scaled[middle] <= plain[middle]).all())
        assert bool((scaled[middle] >= plain[middle] / 4).all())

    def test_llama3_keeps_short_wavelengths_and_divides_long_ones(self):
        scaling = RopeScaling("llama3", 8.0, original_max_len=64, low_freq_factor=1.0, high_freq_factor=4.0)
        plain = rotary_frequencies(32)
        scaled = rotary_frequencies(32, scaling=scaling)
        wavelength = 2 * math.pi / plain
        short, long = wavelength < 64 / 4, wavelength > 64
        assert short.any()
        assert long.any()
        assert (~short & ~long).any()
        torch.testing.assert_close(scaled[short], plain[short], rtol=0, atol=0)
        torch.testing.assert_close(scaled[long], plain[long] / 8, rtol=1e-15, atol=0)

    def test_yarn_attention_factor_scales_rotated_vectors_and_scores_by_its_square(self):
        scaling = RopeScaling("yarn", 16.0, original_max_len=32)
        assert scaling.attention_scale == pytest.approx(0.1 * math.log(16.0) + 1)
        x = torch.randn(3, 5, 8, dtype=DOUBLE, generator=torch.Generator().manual_seed(0))
        rotated = apply_rotary(x, scaling=scaling, interleaved=False)
        torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1) * scaling.attention_scale)

    @pytest.mark.parametrize(
        ("fields", "error", "message"),
        [
            ({"rope_type": "longrope", "factor": 2.0}, ValueError, "rope_type='longrope' must be one of"),
            ({"rope_type": "linear", "factor": 0}, ValueError, "factor=0 must be a number greater than 0"),
            ({"rope_type": "yarn", "factor": 2.0}, ValueError, "rope_type='yarn' needs original_max_len"),
            ({"rope_type": "dynamic", "factor": 2.0, "original_max_len": 0}, ValueError, "original_max_len=0"),
            ({"rope_type": "yarn", "factor": 2.0, "original_max_len": 8, "truncate": 1}, TypeError, "truncate"),
            (
                {"rope_type": "llama3", "factor": 8.0, "original_max_len": 8, "high_freq_factor": 0.5},
                ValueError,
                "high_freq_factor=0.5 must be a number greater than 1",
            ),
        ],
    )
    def test_bad_scaling_is_refused_naming_the_field(self, fields, error, message):
        with pytest.raises(error, match=re.escape(message)):
            RopeScaling(**fields)

    def test_decoder_config_takes_a_mapping_and_refuses_scaling_without_rotary(self, tmp_path):
        config = DecoderConfig(vocab_size=8, rope_scaling={"rope_type": "linear", "factor": 2.0})
        assert config.rope_scaling == RopeScaling("linear", 2.0)
        toml = tmp_path / "model.toml"
        toml.write_text('[model]\nvocab_size = 8\n[model.rope_scaling]\nrope_type = "ntk"\nfactor = 2.0\n')
        assert DecoderConfig.from_toml(toml).rope_scaling == RopeScaling("ntk", 2.0)
        with pytest.raises(ValueError, match="rope_scaling='linear' scales rotary frequencies; positional='alibi'"):
            DecoderConfig(vocab_size=8, positional="alibi", rope_scaling=RopeScaling("linear", 2.0))
        with pytest.raises(TypeError, match="rope_scaling must be a RopeScaling, a mapping or None, got float"):
            DecoderConfig(vocab_size=8, rope_scaling=2.0)

    def test_every_rule_has_a_transformers_or_a_property_test(self):
        tested = {v["rope_type"] for v in HF_ROPE.values()} | {"ntk"}
        assert tested == set(ROPE_SCALING_TYPES)


# ---------------------------------------------------------------------------------------------------------------
# 2. Scaled Llama models against Hugging Face's, past the original context


class TestScaledLlama:
    @pytest.mark.peer
    @pytest.mark.parametrize("variant", HF_ROPE)
    def test_logits_equal_transformers_beyond_the_original_context(self, variant, rope_in_float64):
        theirs = hf_model(LlamaForCausalLM, scaled_llama_config(HF_ROPE[variant]), seed=11)
        ours = from_transformers(theirs)
        assert ours.config.rope_scaling.rope_type == HF_ROPE[variant]["rope_type"]
        length = 3 * theirs.config.max_position_embeddings  # 48 tokens on a 16-token context (192 for llama3)
        ids, mask = left_padded(11, 40, [0, 5], length)
        expected, actual = logits_gap(theirs, ours, ids, mask)
        torch.testing.assert_close(actual, expected, **TIGHT)
        # and the scaling matters at that length: the unscaled model differs
        plain = TinyDecoder(ours.config.replace(rope_scaling=None)).to(DOUBLE).eval()
        plain.load_state_dict(ours.state_dict())
        with torch.no_grad():
            unscaled = plain(ids, attention_mask=mask)[mask.bool()]
        assert float((unscaled - expected).abs().max()) > 1e-3

    @pytest.mark.peer
    def test_a_key_hugging_face_ignores_converts_with_its_warning(self, rope_in_float64, caplog):
        """Issue 37, code 8: a dynamic config carrying original_max_position_embeddings (Hugging Face warns that
        it does not recognise the key, and stretches from max_position_embeddings) was refused; it converts to the
        same computation, with the same warning."""
        rope = HF_ROPE["dynamic"] | {"original_max_position_embeddings": 8}
        with caplog.at_level(logging.WARNING):
            theirs = hf_model(LlamaForCausalLM, scaled_llama_config(rope), seed=13)
        assert "original_max_position_embeddings" in caplog.text  # Hugging Face's own warning
        with pytest.warns(UserWarning, match=r"Unrecognized keys .*'dynamic'.*original_max_position_embeddings"):
            ours = from_transformers(theirs)
        assert ours.config.rope_scaling.original_max_len == 16
        ids, mask = left_padded(13, 40, [0, 5], 48)
        expected, actual = logits_gap(theirs, ours, ids, mask)
        torch.testing.assert_close(actual, expected, **TIGHT)

    @pytest.mark.parametrize(
        ("rope", "key"),
        [
            ({"rope_type": "linear"}, "factor"),
            ({"rope_type": "dynamic", "factor": None}, "factor"),
            (HF_ROPE["llama3"] | {"low_freq_factor": None}, "low_freq_factor"),
            ({k: v for k, v in HF_ROPE["llama3"].items() if k != "high_freq_factor"}, "high_freq_factor"),
        ],
    )
    def test_a_missing_key_is_refused_by_name(self, rope, key):
        """Issue 37, code 6: a missing factor gave a bare TypeError and llama3's frequency factors a KeyError."""
        theirs = LlamaForCausalLM(scaled_llama_config(HF_ROPE[rope["rope_type"]], num_hidden_layers=1))
        theirs.config.rope_parameters = {"rope_theta": 10000.0} | rope  # edited after Hugging Face checked it
        with pytest.raises(ValueError, match=rf"rope_type '{rope['rope_type']}' has no '{key}'"):
            from_transformers(theirs)

    def test_stock_float32_rules_leave_a_float32_gap(self):
        theirs = hf_model(LlamaForCausalLM, scaled_llama_config(HF_ROPE["yarn"]), seed=12)
        ids, mask = left_padded(12, 40, [0, 3], 48)
        expected, actual = logits_gap(theirs, from_transformers(theirs), ids, mask)
        gap = float((expected - actual).abs().max())
        assert 1e-12 < gap < 1e-4, f"gap {gap:.3g}"

    @pytest.mark.peer
    def test_dynamic_cache_keeps_the_rotation_each_key_was_cached_with(self, rope_in_float64):
        """Under dynamic scaling the base grows with the length: a cached key keeps the rotation of the pass that
        cached it, so cached logits past the original context differ from a full pass's, in Hugging Face's
        generation and in the library's alike. The library's cached generation equals Hugging Face's."""
        theirs = hf_model(LlamaForCausalLM, scaled_llama_config(HF_ROPE["dynamic"]), seed=13)
        ours = from_transformers(theirs)
        ids, mask = left_padded(13, 40, [0, 2], 12)
        new = 30  # to 42 tokens, past the 16-token context
        expected = theirs.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False)
        generated = ours.generate(ids, new, attention_mask=mask)
        assert torch.equal(generated, expected)
        # each new token's logits through the cache, and recomputed by a full pass over its prefix (what a
        # generation without a cache computes)
        full_mask = extended(mask, new)
        cache = ours.new_cache(2)
        with torch.no_grad():
            cached = [ours(generated[:, :12], attention_mask=full_mask[:, :12], cache=cache)[:, -1]]
            for t in range(12, generated.size(1) - 1):
                step = ours(generated[:, t : t + 1], attention_mask=full_mask[:, : t + 1], cache=cache)
                cached.append(step[:, -1])
            lengths = range(12, generated.size(1))
            recomputed = [ours(generated[:, :n], attention_mask=full_mask[:, :n])[:, -1] for n in lengths]
            # transformers keeps the frequencies of the longest length a model has seen: a fresh model each time
            theirs_recomputed = [
                hf_model(LlamaForCausalLM, theirs.config, seed=13)(
                    generated[:, :n], attention_mask=full_mask[:, :n], position_ids=hf_positions(full_mask[:, :n])
                ).logits[:, -1]
                for n in (16, 17, 30)
            ]
        cached, recomputed = torch.stack(cached, 1), torch.stack(recomputed, 1)  # (N, 30, V)
        inside = [n <= 16 for n in lengths]  # the longest row is still inside the original context
        torch.testing.assert_close(cached[:, inside], recomputed[:, inside], **TIGHT)
        outside = [n > 17 for n in lengths]
        gaps = (cached[:, outside] - recomputed[:, outside]).abs().amax(dim=(0, 2))
        assert bool((gaps > 1e-6).all()), f"cached and recomputed logits should differ past the context: {gaps}"
        for n, expected_logits in zip((16, 17, 30), theirs_recomputed, strict=True):
            torch.testing.assert_close(recomputed[:, n - 12], expected_logits, **TIGHT)

    @pytest.mark.parametrize(
        ("rope", "message"),
        [
            (
                {
                    "rope_type": "longrope",
                    "factor": 2.0,
                    "short_factor": [1.0] * 4,
                    "long_factor": [2.0] * 4,
                    "original_max_position_embeddings": 16,
                },
                "rope_parameters['rope_type']='longrope'",
            ),
            (
                {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 1.0},
                "rope_parameters['mscale']=1.0",
            ),
        ],
    )
    def test_rules_it_does_not_compute_are_refused_by_name(self, rope, message):
        with pytest.raises(ValueError, match=re.escape(message)):
            from_transformers(LlamaForCausalLM(scaled_llama_config(rope, num_hidden_layers=1)))


# ---------------------------------------------------------------------------------------------------------------
# 3. Sliding windows and attention sinks


def explicit_mask(seq_len, window, sinks, pads=0):
    """The rule written out: a real query ``i`` may see a real key ``j <= i`` if ``i - j < window`` or ``j`` is
    one of the first ``sinks`` real tokens; ``pads`` leading padding positions see and are seen by nothing."""
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(pads, seq_len):
        for j in range(pads, i + 1):
            mask[i, j] = (i - j < window) or (j - pads < sinks)
    return mask


def attention_mask_of(model, seq_len, pads):
    """The bool ``(L, S)`` mask a decoder builds for a row with ``pads`` leading pads."""
    real = torch.ones(1, seq_len, dtype=torch.bool)
    real[0, :pads] = False
    positions = (real.long().cumsum(1) - 1).clamp(min=0)
    index = torch.arange(seq_len)[None]
    return model._attn_mask(index[0], positions, index, positions, real)[0, 0]


class TestSlidingWindow:
    @pytest.mark.parametrize(("window", "sinks", "pads"), [(1, 0, 0), (3, 0, 0), (4, 2, 0), (3, 1, 2), (5, 4, 3)])
    def test_mask_equals_the_rule_written_out(self, window, sinks, pads):
        model = decoder(sliding_window=window, num_sink_tokens=sinks)
        expected = explicit_mask(12, window, sinks, pads)
        assert torch.equal(attention_mask_of(model, 12, pads)[pads:], expected[pads:])

    @pytest.mark.parametrize("window", [1, 2, 5, 9])
    def test_window_convention_is_transformers(self, window):
        rule = sliding_window_causal_mask_function(window)
        index = torch.arange(10)
        expected = torch.tensor([[bool(rule(index[0], index[0], i, j)) for j in index] for i in index])
        assert torch.equal(attention_mask_of(decoder(sliding_window=window), 10, 0), expected)

    @pytest.mark.parametrize(("window", "sinks"), [(1, 0), (3, 0), (4, 2), (5, 4), (12, 1)])
    def test_the_public_mask_is_the_rule_and_the_models(self, window, sinks):
        expected = explicit_mask(12, window, sinks)
        assert torch.equal(sliding_window_mask(12, 12, window, num_sink_tokens=sinks), expected)
        model = decoder(sliding_window=window, num_sink_tokens=sinks)
        assert torch.equal(attention_mask_of(model, 12, 0), expected)
        # the newest L queries under a cache are the last L rows of the full mask
        for seq_len_q in (1, 3, 12):
            rows = sliding_window_mask(seq_len_q, 12, window, num_sink_tokens=sinks)
            assert torch.equal(rows, expected[12 - seq_len_q :])

    @pytest.mark.peer
    @pytest.mark.parametrize("window", [1, 2, 5, 9])
    def test_the_public_mask_follows_transformers(self, window):
        rule = sliding_window_causal_mask_function(window)
        index = torch.arange(10)
        expected = torch.tensor([[bool(rule(index[0], index[0], i, j)) for j in index] for i in index])
        assert torch.equal(sliding_window_mask(10, 10, window), expected)

    @pytest.mark.parametrize(
        ("args", "error", "message"),
        [
            ((4, 4, 0), ValueError, "window=0"),
            ((4, 4, 2.0), TypeError, "window"),
            ((5, 4, 2), ValueError, "seq_len_q=5"),
        ],
    )
    def test_the_public_mask_refuses_bad_arguments_by_name(self, args, error, message):
        with pytest.raises(error, match=re.escape(message)):
            sliding_window_mask(*args)
        with pytest.raises(ValueError, match="num_sink_tokens=-1"):
            sliding_window_mask(4, 4, 2, num_sink_tokens=-1)

    def test_mistral_logits_and_generation_equal_transformers(self, rope_in_float64):
        config = MistralConfig(
            **SPECIAL_TOKENS,
            vocab_size=40,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            sliding_window=5,
            initializer_range=0.1,
            attn_implementation="sdpa",
        )
        theirs = hf_model(MistralForCausalLM, config, seed=14)
        ours = from_transformers(theirs)
        assert ours.config.sliding_window == 5
        ids, mask = left_padded(14, 40, [0, 3], 20)
        expected, actual = logits_gap(theirs, ours, ids, mask)
        torch.testing.assert_close(actual, expected, **TIGHT)
        generated = theirs.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False)
        assert torch.equal(ours.generate(ids, 10, attention_mask=mask), generated)

    @pytest.mark.peer
    @pytest.mark.parametrize("positional", ["rotary", "alibi", "learned", "none"])
    @pytest.mark.parametrize(("window", "sinks"), [(4, 0), (4, 2), (1, 1), (6, 3)])
    def test_a_cache_that_drops_old_keys_gives_the_full_pass(self, positional, window, sinks):
        model = decoder(seed=15, positional=positional, sliding_window=window, num_sink_tokens=sinks)
        ids, mask = left_padded(15, 30, [0, 3, 1], 20)
        with torch.no_grad():
            full = model(ids, attention_mask=mask)
            cache = model.new_cache(3)
            steps = [model(ids[:, :7], attention_mask=mask[:, :7], cache=cache)]
            sizes = []
            for t in range(7, 20):
                steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache))
                sizes.append(cache.num_cached)
        real = mask.bool()
        torch.testing.assert_close(torch.cat(steps, 1)[real], full[real], **TIGHT)
        assert max(sizes) == window - 1 + sinks, "the cache should hold the window and the sinks, no more"
        assert cache.seq_len == 20
        assert cache.nbytes == 2 * 2 * 3 * 4 * (window - 1 + sinks) * 4 * 8  # layers, rows, heads, P, D, bytes

    def test_window_as_long_as_the_text_changes_nothing(self):
        ids, mask = left_padded(16, 30, [0, 2], 12)
        plain, windowed = decoder(seed=16), decoder(seed=16, sliding_window=12)
        with torch.no_grad():
            torch.testing.assert_close(windowed(ids, attention_mask=mask), plain(ids, attention_mask=mask), **TIGHT)

    def test_a_token_outside_the_window_matters_only_as_a_sink(self):
        """One layer: the last logits ignore a token outside the window, unless it is a sink."""
        ids = torch.randint(0, 30, (1, 12), generator=torch.Generator().manual_seed(17))
        changed = ids.clone()
        changed[0, 1] = (ids[0, 1] + 1) % 30
        for sinks, moves in ((0, False), (2, True)):
            model = decoder(seed=17, num_layers=1, sliding_window=4, num_sink_tokens=sinks)
            with torch.no_grad():
                gap = float((model(ids)[0, -1] - model(changed)[0, -1]).abs().max())
            assert (gap > 1e-6) == moves, f"sinks={sinks}: gap {gap:.3g}"

    @pytest.mark.parametrize(
        ("fields", "error", "message"),
        [
            ({"sliding_window": 0}, ValueError, "sliding_window=0 must be >= 1"),
            ({"sliding_window": 2.5}, TypeError, "sliding_window must be an int"),
            ({"num_sink_tokens": 2}, ValueError, "num_sink_tokens=2 needs a sliding_window"),
            ({"sliding_window": 4, "num_sink_tokens": -1}, ValueError, "num_sink_tokens=-1 must be >= 0"),
        ],
    )
    def test_bad_window_settings_are_refused_naming_them(self, fields, error, message):
        with pytest.raises(error, match=re.escape(message)):
            DecoderConfig(vocab_size=8, **fields)


# ---------------------------------------------------------------------------------------------------------------
# 4. The causal length lab (tinyformer.labs.long_context)

LAB = CausalLabConfig(tasks=TASKS, train_len=12, min_train_len=6, steps=4, batch_size=8, seeds=(0,), eval_size=20)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("seq_len", [6, 7, 12, 13, 40])
def test_each_task_puts_its_answer_where_it_says(task, seq_len):
    batch = task_batch(task, LAB, 50, seq_len, torch.Generator().manual_seed(seq_len))
    ids = batch.input_ids
    assert ids.shape == (50, seq_len)
    assert bool((ids[:, 0] == BOS).all())
    answer = ids.gather(1, batch.answer_position[:, None]).squeeze(1)
    assert torch.equal(answer - 3, batch.labels), "the answer token is the label's symbol"
    if task == "index":
        k = ids[:, -1] - (LAB.vocab_size - LAB.num_index) + 1  # Q_k
        assert bool(((k >= 1) & (k <= LAB.num_index)).all())
        assert torch.equal(batch.answer_position, k)
    elif task == "marker":
        assert bool(((ids == MARKER).sum(1) == 1).all())
        assert bool((ids[:, -1] == QUERY).all())
        assert torch.equal(ids.gather(1, batch.answer_position[:, None] - 1).squeeze(1), torch.full((50,), MARKER))
    else:
        query = ids[:, -1]
        # the query key occurs once before it, right before the answer
        assert bool(((ids[:, :-1] == query[:, None]).sum(1) == 1).all())
        assert torch.equal(ids.gather(1, batch.answer_position[:, None] - 1).squeeze(1), query)


@pytest.mark.parametrize("task", TASKS)
def test_the_ceiling_is_the_share_of_the_most_frequent_candidate(task):
    batch = task_batch(task, LAB, 30, 11, torch.Generator().manual_seed(3))
    for row in range(30):
        ids = batch.input_ids[row].tolist()
        if task == "marker":
            candidates = [t for t in ids[1:-1] if t != MARKER]
        elif task == "index":
            candidates = ids[1:-1]
        else:
            start = 1 + (11 - 2) % 2
            candidates = ids[start + 1 : -1 : 2]
        counts = {c: candidates.count(c) for c in candidates}
        assert batch.ceiling[row].item() == pytest.approx(max(counts.values()) / len(candidates), rel=1e-15)


def test_marker_last_keeps_the_answer_near_the_end():
    batch = marker_batch(200, 60, generator=torch.Generator().manual_seed(4), last=5)
    assert int(batch.answer_position.min()) >= 60 - 1 - 5


def test_training_is_reproducible_and_fine_tuning_leaves_the_model_alone():
    config = DecoderConfig(vocab_size=LAB.vocab_size, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=48)
    first, second = train_causal_model(config, LAB, 1, "marker"), train_causal_model(config, LAB, 1, "marker")
    assert first.losses == second.losses
    assert all(math.isfinite(loss) for loss in first.losses)
    before = {k: v.clone() for k, v in first.model.state_dict().items()}
    tuned = fine_tune(first.model, LAB, "index", max_len=24, steps=2, seed=0, rope_scaling=RopeScaling("linear", 2.0))
    assert tuned.config.rope_scaling == RopeScaling("linear", 2.0)
    assert all(torch.equal(v, first.model.state_dict()[k]) for k, v in before.items())
    assert any(not torch.equal(v, tuned.state_dict()[k]) for k, v in before.items())


def test_with_config_keeps_the_weights():
    model = decoder(seed=20, vocab_size=LAB.vocab_size)
    ids = task_batch("marker", LAB, 4, 12, torch.Generator().manual_seed(5)).input_ids
    same = with_config(model, sliding_window=12)
    with torch.no_grad():
        torch.testing.assert_close(same(ids), model(ids), **TIGHT)


@pytest.mark.parametrize("positional", ["rotary", "alibi", "learned", "none"])
def test_attention_maps_are_the_layers_weights(positional):
    model = decoder(seed=21, positional=positional, vocab_size=LAB.vocab_size)
    ids = task_batch("recall", LAB, 3, 10, torch.Generator().manual_seed(6)).input_ids
    maps = attention_maps(model, ids)
    assert len(maps) == 2
    assert maps[0].shape == (3, 4, 10, 10)
    for weights in maps:
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 10, dtype=DOUBLE))
        assert float(weights.triu(1).abs().max()) == 0.0
    # the first layer's map is the weights its attention returns on the embedded input
    positions, index = torch.arange(10).expand(3, 10), torch.arange(10)
    real = torch.ones(3, 10, dtype=torch.bool)
    with torch.no_grad():
        x = model.embed(ids)
        if positional == "learned":
            x = model._add_positions(x, positions)
        mask = model._attn_mask(index, positions, index.expand(3, 10), positions, real)
        _, expected = model.layers[0].attn(
            model.layers[0].attn_norm(x), attn_mask=mask, positions=positions, need_weights=True
        )
    torch.testing.assert_close(maps[0], expected, **TIGHT)


def test_run_causal_lab_reports_every_task_scheme_seed_and_length():
    config = DecoderConfig(vocab_size=1, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    lab = dataclasses.replace(LAB, seeds=(0, 1))
    result = run_causal_lab(config, lab, ("none", "alibi"))
    for task in TASKS:
        for scheme in ("none", "alibi"):
            assert result.accuracy[task][scheme].shape == (2, 4)
            assert len(result.runs[task][scheme]) == 2
            assert bool(((result.accuracy[task][scheme] >= 0) & (result.accuracy[task][scheme] <= 1)).all())
        assert len(result.ceiling[task]) == 4
    with pytest.raises(ValueError, match="scheme 'alibi_asymmetric' is not one of"):
        run_causal_lab(config, lab, ("alibi_asymmetric",))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tasks": ("copy",)}, "task 'copy' is not one of"),
        ({"train_len": 4}, "train_len=4 must be >= 5"),
        ({"min_train_len": 20}, "min_train_len=20 exceeds train_len=12"),
        ({"scheme_learning_rates": {"alibi": -1.0}}, "scheme_learning_rates['alibi']=-1.0 must be a number > 0"),
        ({"scheme_learning_rates": {"xpos": 1e-3}}, "scheme_learning_rates names 'xpos'"),
        ({"learning_rate": 0}, "learning_rate=0 must be a number > 0"),
        ({"seeds": ()}, "seeds is empty"),
    ],
)
def test_bad_lab_settings_are_refused_naming_them(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        CausalLabConfig(**fields)


def test_scheme_learning_rates_from_a_mapping(tmp_path):
    lab = CausalLabConfig(scheme_learning_rates={"rotary": 5e-3, "learned": 4e-3})
    assert lab.scheme_learning_rates == (("learned", 4e-3), ("rotary", 5e-3))
    assert lab.learning_rate_for("rotary") == 5e-3
    assert lab.learning_rate_for("alibi") == lab.learning_rate
    toml = tmp_path / "lab.toml"
    toml.write_text("[lab]\nsteps = 7\n[lab.scheme_learning_rates]\nrotary = 0.005\n")
    assert CausalLabConfig.from_toml(toml).learning_rate_for("rotary") == 0.005


# ---------------------------------------------------------------------------------------------------------------
# 5. The chapter's helpers: workers, context extension, the first token's share


def small_lab_result(workers, executor=None):
    config = DecoderConfig(vocab_size=1, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    lab = dataclasses.replace(LAB, tasks=("index",), seeds=(0, 1), steps=6, eval_size=20)
    return run_causal_lab(config, lab, ("rotary", "none"), workers=workers, executor=executor)


def assert_same_models(one, two):
    for scheme in ("rotary", "none"):
        assert torch.equal(one.accuracy["index"][scheme], two.accuracy["index"][scheme])
        for a, b in zip(one.runs["index"][scheme], two.runs["index"][scheme], strict=True):
            assert a.losses == b.losses
            for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values(), strict=True):
                assert torch.equal(p, q), name


def test_two_workers_train_the_same_models_as_one():
    assert_same_models(small_lab_result(1), small_lab_result(2))
    with pytest.raises(ValueError, match="workers=0"):
        run_jobs(abs, [1, 2], 0)


def seeded_draw(job):
    """A job as the labs' are: it seeds torch's generator; it reports the settings it ran under."""
    if job == "raise":
        raise RuntimeError("a job that fails")
    torch.manual_seed(job)
    return torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(), torch.rand(2)


def test_jobs_run_in_this_process_run_as_a_worker_and_leave_its_generator_and_settings_as_they_were():
    """One worker: the jobs run here, with a worker's settings (one thread, deterministic algorithms), and the
    caller's next random numbers, threads and algorithm setting are what they would be had the jobs run in
    another process, also when a job fails. (Unrestored, the chapter's later cells would draw other numbers
    than with two workers.)"""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        torch.set_num_threads(2)
        torch.use_deterministic_algorithms(False)
        torch.manual_seed(5)
        expected = torch.rand(3)
        torch.manual_seed(5)
        results = run_jobs(seeded_draw, [1, 2], 1)
        assert torch.equal(torch.rand(3), expected)
        assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (2, False)
        for job, (job_threads, job_deterministic, draw) in zip([1, 2], results, strict=True):
            assert (job_threads, job_deterministic) == (1, True)
            assert torch.equal(draw, torch.rand(2, generator=torch.Generator().manual_seed(job)))
        torch.manual_seed(5)
        with pytest.raises(RuntimeError, match="a job that fails"):
            run_jobs(seeded_draw, [1, "raise"], 1)
        assert torch.equal(torch.rand(3), expected)
        assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (2, False)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def test_default_workers_is_a_process_per_core_or_what_the_environment_says(monkeypatch):
    monkeypatch.delenv("TINYFORMER_WORKERS", raising=False)
    assert default_workers() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("TINYFORMER_WORKERS", "3")
    assert default_workers() == 3
    for value in ("0", "two", "", "-1", "1.5"):
        monkeypatch.setenv("TINYFORMER_WORKERS", value)
        with pytest.raises(
            ValueError, match=re.escape(f"TINYFORMER_WORKERS must be a whole number >= 1, got {value!r}")
        ):
            default_workers()


class SerialExecutor(concurrent.futures.Executor):
    """The smallest Executor there is: each job runs at submit (another engine's executor, as the lab sees it)."""

    def __init__(self):
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        future = concurrent.futures.Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_a_lab_on_any_process_executor_trains_the_same_models_as_the_local_pool():
    """The grid on an executor the caller owns (a cluster's, in a lecturer's hands): the standard library's
    process pool, spawned as a cluster's workers are, and an Executor of another kind; the results are the
    local pool's, and the executor is used, not shut down."""
    local = small_lab_result(2)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        assert_same_models(local, small_lab_result(1, executor=pool))
        assert pool.submit(abs, -3).result() == 3  # still open
    serial = SerialExecutor()
    assert_same_models(local, small_lab_result(1, executor=serial))
    assert serial.submitted == 4  # 2 schemes x 2 seeds on the one task


def test_an_executor_whose_jobs_would_share_a_process_is_refused():
    with concurrent.futures.ThreadPoolExecutor(2) as threads, pytest.raises(TypeError, match="ThreadPoolExecutor"):
        run_jobs(abs, [1, 2], executor=threads)
    with pytest.raises(TypeError, match=re.escape("executor must be a concurrent.futures.Executor, got str")):
        run_jobs(abs, [1, 2], executor="dask")


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("none", None),
        ("linear", RopeScaling("linear", 3.0, original_max_len=12)),
        ("ntk", RopeScaling("ntk", 3.0, original_max_len=12)),
        ("dynamic", RopeScaling("dynamic", 1.0, original_max_len=12)),
        ("yarn", RopeScaling("yarn", 3.0, original_max_len=12)),
        ("llama3", RopeScaling("llama3", 3.0, original_max_len=12)),
    ],
)
def test_extension_scaling_names_each_rule(method, expected):
    assert extension_scaling(method, 3.0, 12) == expected


def test_extension_scaling_refuses_an_unknown_method():
    with pytest.raises(ValueError, match="method 'longrope' is not one of"):
        extension_scaling("longrope", 2.0, 12)


def test_context_extension_scores_each_method_zero_shot_and_tuned():
    result = small_lab_result(1)
    extension = context_extension(result, "index", methods=("none", "yarn"), tune_steps=2)
    lab = result.lab
    assert extension.methods == ("none", "yarn")
    for table in (extension.zero_shot, extension.tuned):
        for method in extension.methods:
            assert table[method].shape == (2, 4)
    # zero-shot "none" is the lab's own rotary accuracy, measured again
    torch.testing.assert_close(extension.zero_shot["none"], result.accuracy["index"]["rotary"])
    # zero-shot yarn at each length is the model with RopeScaling("yarn", length / L_train)
    model = result.runs["index"]["rotary"][1].model
    batches = evaluation_batches(lab)["index"]
    n, batch = lab.eval_lengths[2], batches[2]
    stretched = with_config(model, rope_scaling=RopeScaling("yarn", n / lab.train_len, original_max_len=12))
    assert extension.zero_shot["yarn"][1, 2].item() == answer_accuracy(stretched, batch, lab.num_symbols)
    # the fine-tune leaves the lab's models unchanged
    assert torch.equal(
        context_extension(result, "index", methods=("none",), tune_steps=2).zero_shot["none"],
        extension.zero_shot["none"],
    )
    with pytest.raises(ValueError, match="tune_steps=0"):
        context_extension(result, "index", tune_steps=0)


def test_first_token_mass_is_the_weights_on_key_zero():
    model = decoder(seed=22, positional="rotary", vocab_size=LAB.vocab_size)
    ids = task_batch("marker", LAB, 4, 16, torch.Generator().manual_seed(9)).input_ids
    per_layer, even = first_token_mass(model, ids, start=5)
    maps = attention_maps(model, ids)
    assert per_layer == [float(w[:, :, 5:, 0].mean()) for w in maps]
    assert even == pytest.approx(sum(1 / (i + 1) for i in range(5, 16)) / 11)
    # a model whose queries attend evenly gives the first token exactly the even share
    flat = decoder(seed=22, positional="none", vocab_size=LAB.vocab_size)
    for layer in flat.layers:
        layer.attn.q_proj.weight.data.zero_()
        layer.attn.q_proj.bias.data.zero_()
    shares, even = first_token_mass(flat, ids, start=5)
    assert shares[0] == pytest.approx(even)
    with pytest.raises(ValueError, match="start=16 must be below the length 16"):
        first_token_mass(model, ids, start=16)
