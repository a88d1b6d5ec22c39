"""Hugging Face ``transformers`` decoders as :class:`~tinyformer.models.decoder.TinyDecoder`
models: GPT-2 (Radford et al., 2019), Llama (Touvron et al., 2023), Mistral
(Jiang et al., 2023) and DeepSeek-V3 with dense layers (DeepSeek-AI, 2024).

``transformers`` is imported only to recognise the classes; nothing is
downloaded. A config option that :class:`~tinyformer.models.decoder.TinyDecoder`
does not compute is refused by name, never silently dropped.

Hugging Face's names stay inside this module: ``c_attn``, ``wte`` and
``past_key_values`` are the checkpoint's, not the library's.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from tinyformer.models.decoder import DecoderConfig, TinyDecoder
from tinyformer.models.positional.scaling import RopeScaling

__all__ = ["from_transformers", "supported_classes"]

#: Hugging Face's GPT-2 activation names and the decoder's.
_GPT2_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}


def supported_classes() -> tuple[str, ...]:
    """The Hugging Face classes :func:`from_transformers` converts."""
    return (
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "DeepseekV3ForCausalLM",
    )


def _refuse(model_name: str, option: str, value: Any, why: str) -> None:
    raise ValueError(
        f"{model_name} config {option}={value!r} is not supported: {why}"
    )


def _copy(target: Tensor, source: Tensor) -> None:
    if target.shape != source.shape:
        raise ValueError(
            f"weight of shape {tuple(source.shape)} does not fit {tuple(target.shape)}"
        )
    target.copy_(source)


def _tied(name: str, model: nn.Module, embedding: nn.Embedding) -> bool:
    """Whether ``model``'s LM head reads the embedding matrix itself.

    What the module computes decides, not ``tie_word_embeddings``: a head
    untied after loading (or tied by hand) is converted as it runs. A head
    with a bias is refused, naming it."""
    head = model.lm_head
    if getattr(head, "bias", None) is not None:
        _refuse(
            name,
            "lm_head.bias",
            tuple(head.bias.shape),
            "an LM head without a bias",
        )
    return head.weight is embedding.weight


def _empty(config: DecoderConfig, model: nn.Module) -> TinyDecoder:
    """A new ``TinyDecoder`` on ``model``'s device and dtype, so that copied
    weights keep every bit."""
    weight = next(model.parameters())
    return TinyDecoder(config).to(device=weight.device, dtype=weight.dtype)


def _gpt2(model: nn.Module) -> TinyDecoder:
    hf = model.config
    name = "GPT2LMHeadModel"
    if not hf.scale_attn_weights:
        _refuse(
            name,
            "scale_attn_weights",
            False,
            "scores are always divided by sqrt(head_dim)",
        )
    if hf.scale_attn_by_inverse_layer_idx:
        _refuse(
            name,
            "scale_attn_by_inverse_layer_idx",
            True,
            "no layer-wise score scaling",
        )
    if hf.reorder_and_upcast_attn:
        _refuse(
            name,
            "reorder_and_upcast_attn",
            True,
            "scores are computed in the model's dtype",
        )
    if getattr(hf, "add_cross_attention", False):
        _refuse(
            name,
            "add_cross_attention",
            True,
            "a decoder-only model has no cross-attention",
        )
    if hf.activation_function not in _GPT2_ACTIVATIONS:
        _refuse(
            name,
            "activation_function",
            hf.activation_function,
            f"use one of {sorted(_GPT2_ACTIVATIONS)}",
        )
    dropouts = {hf.attn_pdrop, hf.resid_pdrop, hf.embd_pdrop}
    if len(dropouts) != 1:
        _refuse(
            name,
            "attn_pdrop/resid_pdrop/embd_pdrop",
            sorted(dropouts),
            "one dropout probability for all three",
        )
    config = DecoderConfig(
        vocab_size=hf.vocab_size,
        d_model=hf.n_embd,
        num_heads=hf.n_head,
        d_ff=hf.n_inner if hf.n_inner is not None else 4 * hf.n_embd,
        num_layers=hf.n_layer,
        max_len=hf.n_positions,
        dropout=float(hf.attn_pdrop),
        positional="learned",
        norm="layer",
        norm_eps=float(hf.layer_norm_epsilon),
        activation=_GPT2_ACTIVATIONS[hf.activation_function],
        bias=True,
        tie_embeddings=_tied(name, model, model.transformer.wte),
    )
    ours = _empty(config, model)
    body = model.transformer
    with torch.no_grad():
        _copy(ours.embed.weight, body.wte.weight)
        _copy(ours.position_embed.weight, body.wpe.weight)
        for layer, block in zip(ours.layers, body.h, strict=True):
            _copy(layer.attn_norm.weight, block.ln_1.weight)
            _copy(layer.attn_norm.bias, block.ln_1.bias)
            # Conv1D stores (in, out): a Linear's weight is its transpose
            q, k, v = block.attn.c_attn.weight.t().chunk(3, dim=0)
            qb, kb, vb = block.attn.c_attn.bias.chunk(3)
            for proj, w, b in (
                (layer.attn.q_proj, q, qb),
                (layer.attn.k_proj, k, kb),
                (layer.attn.v_proj, v, vb),
            ):
                _copy(proj.weight, w)
                _copy(proj.bias, b)
            _copy(layer.attn.out_proj.weight, block.attn.c_proj.weight.t())
            _copy(layer.attn.out_proj.bias, block.attn.c_proj.bias)
            _copy(layer.ffn_norm.weight, block.ln_2.weight)
            _copy(layer.ffn_norm.bias, block.ln_2.bias)
            _copy(layer.ffn.up_proj.weight, block.mlp.c_fc.weight.t())
            _copy(layer.ffn.up_proj.bias, block.mlp.c_fc.bias)
            _copy(layer.ffn.down_proj.weight, block.mlp.c_proj.weight.t())
            _copy(layer.ffn.down_proj.bias, block.mlp.c_proj.bias)
        _copy(ours.norm.weight, body.ln_f.weight)
        _copy(ours.norm.bias, body.ln_f.bias)
        if not config.tie_embeddings:
            _copy(ours.lm_head.weight, model.lm_head.weight)
    return ours


#: Hugging Face's ``rope_parameters`` keys that each scaled ``rope_type``
#: computes with, beside ``rope_type`` and ``rope_theta``: the keys it
#: requires, then those it may read (``transformers`` 5.23,
#: ``modeling_rope_utils.py``, ``_validate_*_rope_parameters``). It warns
#: about any other key and ignores it; so does the converter.
_ROPE_KEYS = {
    "linear": ({"factor"}, set()),
    "dynamic": ({"factor"}, set()),
    "yarn": (
        {"factor", "original_max_position_embeddings"},
        {"beta_fast", "beta_slow", "attention_factor", "truncate"},
    ),
    "llama3": (
        {
            "factor",
            "original_max_position_embeddings",
            "low_freq_factor",
            "high_freq_factor",
        },
        set(),
    ),
}

#: Keys Hugging Face computes with that this library does not: refused.
_ROPE_REFUSED = {
    "partial_rotary_factor": "every pair of the head rotated (1.0)",
    "mscale": "YaRN's attention factor given as attention_factor",
    "mscale_all_dim": "YaRN's attention factor given as attention_factor",
}


def _rope_scaling(
    name: str, hf: Any, rope: dict[str, Any]
) -> RopeScaling | None:
    """The :class:`RopeScaling` of a Llama config's ``rope_parameters``."""
    rope_type = rope.get("rope_type", "default")
    for key, why in _ROPE_REFUSED.items():
        value = rope.get(key)
        if value is not None and not (
            key == "partial_rotary_factor" and value == 1.0
        ):
            _refuse(name, f"rope_parameters[{key!r}]", value, why)
    if rope_type == "default":
        return None
    if rope_type not in _ROPE_KEYS:
        _refuse(
            name,
            "rope_parameters['rope_type']",
            rope_type,
            f"rotary scaling 'default' or one of {sorted(_ROPE_KEYS)}",
        )
    required, optional = _ROPE_KEYS[rope_type]
    if rope_type == "yarn" and rope.get("factor") is None:
        # transformers' default: the ratio of the two context lengths
        required = required - {"factor"}
    missing = sorted(key for key in required if rope.get(key) is None)
    if missing:
        raise ValueError(
            f"{name} config rope_parameters of rope_type {rope_type!r} has no {missing[0]!r}: "
            f"rope_type {rope_type!r} needs {sorted(required)}"
        )
    unused = set(rope) - required - optional - set(_ROPE_REFUSED)
    unused -= {"rope_type", "rope_theta", "factor", "type"}
    if unused:
        # transformers warns the same way and computes without them
        warnings.warn(
            f"Unrecognized keys in `rope_parameters` for 'rope_type'='{rope_type}': {unused}; "
            "Hugging Face ignores them and so does the conversion",
            stacklevel=3,
        )
    original = rope.get("original_max_position_embeddings")
    factor = rope.get("factor")
    if rope_type in ("linear", "dynamic"):
        original = None
    if rope_type == "dynamic":
        # transformers' dynamic rule stretches from max_position_embeddings
        original = hf.max_position_embeddings
    if factor is None and rope_type == "yarn":
        factor = hf.max_position_embeddings / original
    fields: dict[str, Any] = {
        "rope_type": rope_type,
        "factor": float(factor),
        "original_max_len": None if original is None else int(original),
    }
    for key in ("beta_fast", "beta_slow", "attention_factor"):
        if rope.get(key) is not None:
            fields[key] = float(rope[key])
    if rope_type == "yarn":
        fields["truncate"] = bool(rope.get("truncate", True))
    if rope_type == "llama3":
        fields["low_freq_factor"] = float(rope["low_freq_factor"])
        fields["high_freq_factor"] = float(rope["high_freq_factor"])
    try:
        return RopeScaling(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: rope_parameters: {error}") from None


def _llama(model: nn.Module) -> TinyDecoder:
    hf = model.config
    name = type(model).__name__
    # Mistral is Llama with a sliding window and no bias switches
    attention_bias = bool(getattr(hf, "attention_bias", False))
    mlp_bias = bool(getattr(hf, "mlp_bias", False))
    window = getattr(hf, "sliding_window", None)
    rope = dict(getattr(hf, "rope_parameters", None) or {})
    scaling = _rope_scaling(name, hf, rope)
    head_dim = (
        getattr(hf, "head_dim", None)
        or hf.hidden_size // hf.num_attention_heads
    )
    if head_dim * hf.num_attention_heads != hf.hidden_size:
        _refuse(
            name,
            "head_dim",
            head_dim,
            f"head_dim must be hidden_size // num_attention_heads = {hf.hidden_size // hf.num_attention_heads}",
        )
    if hf.hidden_act != "silu":
        _refuse(
            name,
            "hidden_act",
            hf.hidden_act,
            "Llama's gated feed-forward network uses SiLU (SwiGLU)",
        )
    if attention_bias != mlp_bias:
        _refuse(
            name,
            "attention_bias/mlp_bias",
            (attention_bias, mlp_bias),
            "one bias switch for attention and feed-forward",
        )
    if getattr(hf, "pretraining_tp", 1) not in (None, 1):
        _refuse(
            name,
            "pretraining_tp",
            hf.pretraining_tp,
            "no tensor-parallel slicing of the projections",
        )
    config = DecoderConfig(
        vocab_size=hf.vocab_size,
        d_model=hf.hidden_size,
        num_heads=hf.num_attention_heads,
        num_kv_heads=hf.num_key_value_heads,
        d_ff=hf.intermediate_size,
        num_layers=hf.num_hidden_layers,
        max_len=hf.max_position_embeddings,
        dropout=float(hf.attention_dropout),
        positional="rotary",
        base=float(rope.get("rope_theta", 10000.0)),
        rotary_interleaved=False,
        rope_scaling=scaling,
        norm="rms",
        norm_eps=float(hf.rms_norm_eps),
        activation="swiglu",
        bias=attention_bias,
        tie_embeddings=_tied(name, model, model.model.embed_tokens),
        sliding_window=None if window is None else int(window),
    )
    ours = _empty(config, model)
    body = model.model
    with torch.no_grad():
        _copy(ours.embed.weight, body.embed_tokens.weight)
        for layer, block in zip(ours.layers, body.layers, strict=True):
            _copy(layer.attn_norm.weight, block.input_layernorm.weight)
            attn = block.self_attn
            pairs = (
                (layer.attn.q_proj, attn.q_proj),
                (layer.attn.k_proj, attn.k_proj),
                (layer.attn.v_proj, attn.v_proj),
                (layer.attn.out_proj, attn.o_proj),
                (layer.ffn.gate_proj, block.mlp.gate_proj),
                (layer.ffn.up_proj, block.mlp.up_proj),
                (layer.ffn.down_proj, block.mlp.down_proj),
            )
            for mine, theirs in pairs:
                _copy(mine.weight, theirs.weight)
                if config.bias:
                    _copy(mine.bias, theirs.bias)
            _copy(
                layer.ffn_norm.weight, block.post_attention_layernorm.weight
            )
        _copy(ours.norm.weight, body.norm.weight)
        if not config.tie_embeddings:
            _copy(ours.lm_head.weight, model.lm_head.weight)
    return ours


def _deepseek_v3(model: nn.Module) -> TinyDecoder:
    """DeepSeek-V3 with dense feed-forward layers only: multi-head latent
    attention (:class:`~tinyformer.models.latent_attention.MultiHeadLatentAttention`),
    RMSNorm and SwiGLU."""
    hf = model.config
    name = type(model).__name__
    if (
        hf.first_k_dense_replace is None
        or hf.first_k_dense_replace < hf.num_hidden_layers
    ):
        _refuse(
            name,
            "first_k_dense_replace",
            hf.first_k_dense_replace,
            f"layers from first_k_dense_replace on are mixture-of-experts layers, which this library does not "
            f"compute: set it to num_hidden_layers={hf.num_hidden_layers} (every layer dense)",
        )
    rope = dict(getattr(hf, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        _refuse(
            name,
            "rope_parameters['rope_type']",
            rope.get("rope_type"),
            "DeepSeek's scaled rotary (and its softmax scale) is not converted; only 'default'",
        )
    if hf.num_key_value_heads != hf.num_attention_heads:
        _refuse(
            name,
            "num_key_value_heads",
            hf.num_key_value_heads,
            f"multi-head latent attention gives every head its key and value: it must equal "
            f"num_attention_heads={hf.num_attention_heads}",
        )
    if hf.hidden_act != "silu":
        _refuse(
            name,
            "hidden_act",
            hf.hidden_act,
            "DeepSeek's gated feed-forward network uses SiLU (SwiGLU)",
        )
    if hf.attention_bias:
        _refuse(
            name,
            "attention_bias",
            hf.attention_bias,
            "one bias switch for attention and feed-forward, and DeepSeek's feed-forward has no bias",
        )
    if getattr(hf, "pretraining_tp", 1) not in (None, 1):
        _refuse(
            name,
            "pretraining_tp",
            hf.pretraining_tp,
            "no tensor-parallel slicing of the projections",
        )
    # d_model // num_heads only sets the defaults of widths given here
    heads = hf.num_attention_heads
    if hf.hidden_size % heads:
        _refuse(
            name,
            "hidden_size",
            hf.hidden_size,
            f"a multiple of num_attention_heads={heads}",
        )
    config = DecoderConfig(
        vocab_size=hf.vocab_size,
        d_model=hf.hidden_size,
        num_heads=heads,
        d_ff=hf.intermediate_size,
        num_layers=hf.num_hidden_layers,
        max_len=hf.max_position_embeddings,
        dropout=float(hf.attention_dropout),
        positional="rotary",
        base=float(rope.get("rope_theta", 10000.0)),
        rotary_interleaved=bool(hf.rope_interleave),
        norm="rms",
        norm_eps=float(hf.rms_norm_eps),
        activation="swiglu",
        bias=False,
        tie_embeddings=_tied(name, model, model.model.embed_tokens),
        kv_lora_rank=hf.kv_lora_rank,
        q_lora_rank=hf.q_lora_rank,
        qk_nope_head_dim=hf.qk_nope_head_dim,
        qk_rope_head_dim=hf.qk_rope_head_dim,
        v_head_dim=hf.v_head_dim,
    )
    ours = _empty(config, model)
    body = model.model
    with torch.no_grad():
        _copy(ours.embed.weight, body.embed_tokens.weight)
        for layer, block in zip(ours.layers, body.layers, strict=True):
            _copy(layer.attn_norm.weight, block.input_layernorm.weight)
            mine, theirs = layer.attn, block.self_attn
            names = [
                "kv_a_proj_with_mqa",
                "kv_a_layernorm",
                "kv_b_proj",
                "o_proj",
            ]
            names += (
                ["q_proj"]
                if config.q_lora_rank is None
                else ["q_a_proj", "q_a_layernorm", "q_b_proj"]
            )
            for part in names:
                _copy(
                    getattr(mine, part).weight, getattr(theirs, part).weight
                )
            if (
                theirs.kv_a_layernorm.variance_epsilon
                != mine.kv_a_layernorm.eps
            ):
                _refuse(
                    name,
                    "kv_a_layernorm.variance_epsilon",
                    theirs.kv_a_layernorm.variance_epsilon,
                    f"the latents' RMSNorm epsilon is {mine.kv_a_layernorm.eps}",
                )
            for part in ("gate_proj", "up_proj", "down_proj"):
                _copy(
                    getattr(layer.ffn, part).weight,
                    getattr(block.mlp, part).weight,
                )
            _copy(
                layer.ffn_norm.weight, block.post_attention_layernorm.weight
            )
        _copy(ours.norm.weight, body.norm.weight)
        if not config.tie_embeddings:
            _copy(ours.lm_head.weight, model.lm_head.weight)
    return ours


def from_transformers(model: nn.Module) -> TinyDecoder:
    """A :class:`~tinyformer.models.decoder.TinyDecoder` that computes what a Hugging
    Face decoder computes, with its weights, dtype, device and train/eval
    mode.

    * ``GPT2LMHeadModel``: learned positions, LayerNorm, GELU (tanh or
      exact), biases; the ``Conv1D`` weights are transposed into linear
      layers and the fused ``c_attn`` split into ``q_proj``, ``k_proj``,
      ``v_proj``.
    * ``LlamaForCausalLM``: RMSNorm, SwiGLU, rotary positions in the
      split-half pairing, grouped-query attention (``num_key_value_heads``),
      and ``rope_parameters`` of ``rope_type`` ``"default"``, ``"linear"``,
      ``"dynamic"``, ``"yarn"`` or ``"llama3"``
      (:class:`~tinyformer.models.positional.RopeScaling`).
    * ``MistralForCausalLM``: Llama's layers with a ``sliding_window``
      (Jiang et al., 2023).
    * ``DeepseekV3ForCausalLM`` whose layers are all dense
      (``first_k_dense_replace = num_hidden_layers``): multi-head latent
      attention with or without a query latent (``q_lora_rank``), the
      decoupled rotary key in DeepSeek's interleaved pairing or not
      (``rope_interleave``), RMSNorm, SwiGLU; ``rope_type`` ``"default"``
      only. Like Hugging Face's, its cache holds the latent and the rotary
      key, ``kv_lora_rank + qk_rope_head_dim`` numbers per token and
      layer.

    The LM head is converted as the module computes it: tied when it is
    the embedding matrix itself, a copy of its own weights otherwise,
    whatever ``tie_word_embeddings`` says. A ``rope_parameters`` key that
    Hugging Face does not read for its ``rope_type`` gives Hugging Face's
    warning and is ignored, as Hugging Face ignores it.

    Dynamic scaling: ``transformers`` keeps the frequencies of the longest
    length a model has seen until a call falls below
    ``max_position_embeddings``; this library recomputes them from each
    call's length (its largest position + 1). The two agree on a fresh
    model and on a generation, whose lengths only grow.

    Hugging Face's Llama computes RMSNorm and the rotary table in float32
    even in a float64 model; this library computes them in the model's
    dtype (the rotary angles in float64), so a float64 comparison differs
    by float32 rounding unless those two steps are run in float64 on both
    sides.

    Args:
        model: a ``transformers`` ``GPT2LMHeadModel``,
            ``LlamaForCausalLM``, ``MistralForCausalLM`` or
            ``DeepseekV3ForCausalLM``.

    Returns:
        The equal ``TinyDecoder``.

    Raises:
        TypeError: if ``model`` is another class, naming it and the
            supported ones.
        ValueError: if its config sets an option this library does not
            compute, naming the option and its value, or its
            ``rope_parameters`` lack a key their ``rope_type`` needs,
            naming the key.
    """
    kind = type(model).__name__
    converters = {
        "GPT2LMHeadModel": _gpt2,
        "LlamaForCausalLM": _llama,
        "MistralForCausalLM": _llama,
        "DeepseekV3ForCausalLM": _deepseek_v3,
    }
    if kind not in converters or not hasattr(model, "config"):
        raise TypeError(
            f"model must be one of {', '.join(supported_classes())}, got {kind}"
        )
    ours = converters[kind](model)
    ours.train(model.training)
    return ours
