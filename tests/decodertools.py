"""Helpers shared by the decoder tests (tests/test_decoder.py, tests/test_long_context.py): small random decoders,
left-padded batches, and Hugging Face models built from small configs with random weights (nothing is downloaded).

A test module that uses them also takes ``one_thread`` as an autouse fixture:
``pytestmark = pytest.mark.usefixtures("one_thread")``.
"""

import math

import pytest
import torch
from transformers import DeepseekV3Config, GPT2Config, LlamaConfig
from transformers.models.deepseek_v3 import modeling_deepseek_v3
from transformers.models.llama import modeling_llama

from tinyformer.models.decoder import DecoderConfig, TinyDecoder

DOUBLE = torch.float64
TIGHT = {"rtol": 0.0, "atol": 1e-10}
#: token ids of the Hugging Face configs, inside their small vocabulary
SPECIAL_TOKENS = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}


def float64_rms_norm(self, hidden_states):
    """Hugging Face's ``LlamaRMSNorm.forward`` with its float32 step in the input's dtype."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread while this module runs: on models this small, two threads on a shared machine spend
    most of their time waiting for each other (about 20 times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randomize(model, seed):
    """Give ``model`` weights of order one: embeddings N(0, 1), matrices N(0, 1/fan_in), norm weights near 1 and
    biases near 0 (never exactly 0, so a bias that is not copied or not added shows)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=DOUBLE).to(p.dtype)
            if p.dim() == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            elif "embed" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / math.sqrt(p.size(1)))
    return model


def decoder(seed=0, dtype=DOUBLE, **fields):
    """A small random ``TinyDecoder`` in eval mode; ``fields`` override the config's."""
    fields = {"vocab_size": 30, "d_model": 16, "num_heads": 4, "d_ff": 24, "num_layers": 2, "max_len": 32} | fields
    return randomize(TinyDecoder(DecoderConfig(**fields)).to(dtype).eval(), seed)


def left_padded(seed, vocab_size, pads, length):
    """``(ids, attention_mask)``, both ``(N, length)``: row ``r`` starts with ``pads[r]`` padding positions (mask
    0, random ids, which must not matter), then real tokens (mask 1)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (len(pads), length), generator=g)
    mask = torch.ones(len(pads), length, dtype=torch.long)
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    return ids, mask


def real_mask(batch_size, length):
    """An ``attention_mask`` of real tokens only, ``(batch_size, length)`` ones."""
    return torch.ones(batch_size, length, dtype=torch.long)


def extended(mask, new_tokens):
    """``attention_mask`` with ``new_tokens`` real columns appended."""
    return torch.cat((mask, torch.ones(mask.size(0), new_tokens, dtype=mask.dtype)), dim=1)


def perturb(model, seed):
    """Add N(0, 0.1) noise to every parameter of a Hugging Face model: its norms' weights leave 1 and its biases
    leave 0, so a norm or bias that is not copied shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def hf_model(cls, config, seed):
    """``cls(config)`` with seeded random weights, in float64 and eval mode; no end-of-sequence token for
    ``generate``, which would otherwise pad a row after it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config)
    model = perturb(model.double().eval(), seed)
    model.generation_config.eos_token_id = None
    return model


def gpt2_config(**fields):
    fields = {"vocab_size": 40, "n_positions": 32, "n_embd": 16, "n_layer": 2, "n_head": 4} | fields
    return GPT2Config(**(SPECIAL_TOKENS | {"initializer_range": 0.2} | fields))


def llama_config(**fields):
    fields = {
        "vocab_size": 40,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "attn_implementation": "sdpa",
    } | fields
    return LlamaConfig(**(SPECIAL_TOKENS | {"initializer_range": 0.1} | fields))


def hf_positions(mask):
    """The library's positions of a left-padded batch: real tokens counted from 0, padding at 0."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def logits_gap(theirs, ours, ids, mask):
    """``(their logits, our logits)`` at the real tokens of ``ids``."""
    with torch.no_grad():
        expected = theirs(ids, attention_mask=mask, position_ids=hf_positions(mask)).logits
        actual = ours(ids, attention_mask=mask)
    real = mask.bool()
    return expected[real], actual[real]


def _float64_rotary(self, x, position_ids):
    """A Hugging Face rotary embedding's ``forward`` (Llama's, DeepSeek-V3's) with ``inv_freq`` recomputed in
    float64 from ``rope_theta`` and the config's ``head_dim`` (DeepSeek-V3 sets it to ``qk_rope_head_dim``)."""
    config = self.config
    base = config.rope_parameters["rope_theta"]
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=DOUBLE) / dim))
    freqs = position_ids[..., None].to(DOUBLE) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


@pytest.fixture
def llama_in_float64(monkeypatch):
    """Hugging Face's ``LlamaRMSNorm`` and ``LlamaRotaryEmbedding`` with their float32 steps run in float64: the
    same operations, with ``inv_freq`` recomputed in float64 from ``rope_theta`` and ``head_dim``."""
    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", float64_rms_norm)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", _float64_rotary)


@pytest.fixture
def deepseek_in_float64(monkeypatch):
    """The same for Hugging Face's DeepSeek-V3: ``DeepseekV3RMSNorm`` (the layers' and the latents' norms) and
    ``DeepseekV3RotaryEmbedding`` with their float32 steps in float64."""
    monkeypatch.setattr(modeling_deepseek_v3.DeepseekV3RMSNorm, "forward", float64_rms_norm)
    monkeypatch.setattr(modeling_deepseek_v3.DeepseekV3RotaryEmbedding, "forward", _float64_rotary)


def deepseek_config(**fields):
    """A small dense DeepSeek-V3 config (every layer dense: ``first_k_dense_replace = num_hidden_layers``)."""
    fields = {
        "vocab_size": 40,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "kv_lora_rank": 12,
        "q_lora_rank": None,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4,
        "v_head_dim": 6,
        "max_position_embeddings": 64,
        "attn_implementation": "sdpa",
    } | fields
    fields.setdefault("first_k_dense_replace", fields["num_hidden_layers"])
    return DeepseekV3Config(**(SPECIAL_TOKENS | {"initializer_range": 0.1} | fields))
