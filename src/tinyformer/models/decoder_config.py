"""The recipe of a :class:`~tinyformer.models.decoder.TinyDecoder`: its sizes
and switches, checked once when the config is made (frozen, so a trained
model's recipe cannot drift).

Shapes and names as in :mod:`tinyformer.models.decoder`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinyformer.models.positional.registry import (  # noqa: F401
    DECODER_POSITIONAL_SCHEMES,
    positional_scheme,
)
from tinyformer.models.positional.scaling import RopeScaling
from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.tools.checks import (
    check_int,
    check_number,
    check_probability,
)
from tinyformer.tools.config import TomlConfig

# DECODER_POSITIONAL_SCHEMES is importable from here as well; it is documented
# where it lives, tinyformer.models.positional.registry.
__all__ = [
    "DECODER_ACTIVATIONS",
    "DECODER_NORMS",
    "DecoderConfig",
]

#: The feed-forward activations, exact (erf) GELU, GPT-2's tanh GELU, ReLU
#: and the gated SwiGLU of Llama (Shazeer, 2020).
DECODER_ACTIVATIONS: tuple[str, ...] = (
    "gelu",
    "gelu_tanh",
    "relu",
    "swiglu",
)
#: The normalisations, LayerNorm (GPT-2) and RMSNorm (Llama; Zhang and
#: Sennrich, 2019).
DECODER_NORMS: tuple[str, ...] = ("layer", "rms")


@dataclass(frozen=True)
class DecoderConfig(TomlConfig):
    """Sizes and switches of a :class:`~tinyformer.models.decoder.TinyDecoder`; frozen, so a trained
    model's recipe cannot drift.

    Attributes:
        vocab_size: number of token ids V, >= 1.
        d_model: model width E, divisible by ``num_heads``.
        num_heads: query heads per layer H.
        num_kv_heads: key/value heads per layer ``H_kv``, dividing
            ``num_heads``; ``None`` means ``num_heads`` (multi-head
            attention), 1 is multi-query attention.
        d_ff: hidden width of the feed-forward network.
        num_layers: decoder layers, >= 1.
        max_len: rows of the ``"learned"`` and ``"sinusoidal"`` tables, in
            tokens: positions at or beyond it are refused. The other schemes
            have no table and ignore it.
        dropout: dropout probability in [0, 1) on the attention weights,
            the sublayer outputs and the embeddings (training only).
        positional: one of
            :data:`~tinyformer.models.positional.registry.DECODER_POSITIONAL_SCHEMES`
            (:attr:`positional_scheme` is the scheme object):
            ``"sinusoidal"`` and ``"learned"`` add a position vector to the
            embeddings; ``"rotary"`` rotates every layer's queries and keys;
            ``"alibi"`` adds ``-m_h (i - j)`` to every layer's scores;
            ``"t5"`` adds a learned bias per head and bucket of distance
            (:class:`~tinyformer.models.positional.T5RelativePositionBias`,
            one table for all layers).
        base: wavelength constant of the sinusoidal table and of the
            rotary angles, > 1.
        rotary_interleaved: the rotary pairing, ``(2i, 2i + 1)`` if True,
            ``(i, i + D/2)`` (Llama's and Hugging Face's) if False.
        rope_scaling: a context-extension rule for ``"rotary"``
            (:class:`~tinyformer.models.positional.RopeScaling`, or a
            mapping of its fields, as a TOML table gives), or None.
        relative_attention_num_buckets: the rows of ``"t5"``'s bias table,
            >= 2 (Hugging Face's ``T5Config`` name and default, 32).
        relative_attention_max_distance: the distance in tokens from which
            ``"t5"`` puts every key in its last bucket (default 128).
        sliding_window: if set, query ``i`` attends only to keys
            ``j > i - sliding_window`` (it sees ``sliding_window`` keys,
            itself included; Beltagy et al., 2020; Jiang et al., 2023),
            and a :class:`~tinyformer.models.cache.KVCache` keeps only the keys a later query can
            see. None: full causal attention.
        num_sink_tokens: StreamingLLM's attention sinks (Xiao et al.,
            2024): the first ``num_sink_tokens`` real tokens of a row stay
            visible to every query beside the window, and in the cache.
            Needs ``sliding_window``.
        norm: ``"layer"`` (LayerNorm) or ``"rms"`` (RMSNorm).
        norm_eps: the epsilon added inside the normalisation, > 0.
        activation: one of :data:`DECODER_ACTIVATIONS`.
        bias: whether the attention and feed-forward projections (and
            LayerNorm) have biases (GPT-2: True; Llama: False).
        tie_embeddings: if True the LM head reuses the token embedding
            matrix (Press and Wolf, 2017).
        attention_only: if True the layers have no feed-forward network
            (nor its norm): each layer only adds its attention's output to
            the residual stream, as in the attention-only models of Elhage
            et al. (2021) and Olsson et al. (2022). ``d_ff`` and
            ``activation`` are then unused.
        kv_lora_rank: if set, every layer's attention is multi-head latent
            attention (:class:`~tinyformer.models.latent_attention.MultiHeadLatentAttention`;
            DeepSeek-V2, Sec. 2.1) with a key-value latent of this width
            ``d_c``, and the cache holds ``d_c + qk_rope_head_dim``
            numbers per token and layer. Needs ``positional="rotary"``
            (the decoupled rotary key) and no ``num_kv_heads``. None:
            multi-head attention with ``num_kv_heads``. The names of this
            and the next four fields are Hugging Face's
            (``DeepseekV3Config``).
        q_lora_rank: with ``kv_lora_rank``, the width of the queries'
            latent, or None for queries projected from ``x`` directly.
        qk_nope_head_dim: with ``kv_lora_rank``, the width ``d_h`` of
            each head's query and key part without position; None means
            ``head_dim``.
        qk_rope_head_dim: with ``kv_lora_rank``, the even width
            ``d_h^R`` of the rotary part (per head for queries, one shared
            key); None means ``head_dim // 2`` (DeepSeek-V2's ratio, 64 to
            128).
        v_head_dim: with ``kv_lora_rank``, each head's value width; None
            means ``head_dim``.
        mla_absorbed: with ``kv_lora_rank``, compute attention with the
            key up-projection folded into the query and the value
            up-projection into the output projection (the same function,
            other rounding).

    Raises:
        TypeError: if an integer field is not an int or a switch not a
            bool.
        ValueError: if a field is out of range, naming the field and its
            value.
    """

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_kv_heads: int | None = None
    d_ff: int = 256
    num_layers: int = 2
    max_len: int = 256
    dropout: float = 0.0
    positional: str = "rotary"
    base: float = 10000.0
    rotary_interleaved: bool = False
    rope_scaling: RopeScaling | None = None
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    sliding_window: int | None = None
    num_sink_tokens: int = 0
    norm: str = "layer"
    norm_eps: float = 1e-5
    activation: str = "gelu"
    bias: bool = True
    tie_embeddings: bool = True
    attention_only: bool = False
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    mla_absorbed: bool = False

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "d_model",
            "num_heads",
            "d_ff",
            "num_layers",
            "max_len",
        ):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        if self.num_kv_heads is not None:
            check_int("num_kv_heads", self.num_kv_heads, minimum=1)
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"num_kv_heads={self.num_kv_heads} does not divide num_heads={self.num_heads}"
                )
        check_probability("dropout", self.dropout)
        scheme = positional_scheme(self.positional, decoder=True)
        choices = (
            ("activation", DECODER_ACTIVATIONS),
            ("norm", DECODER_NORMS),
        )
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} must be one of {list(allowed)}"
                )
        for name in (
            "rotary_interleaved",
            "bias",
            "tie_embeddings",
            "attention_only",
            "mla_absorbed",
        ):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"{name} must be a bool, got {getattr(self, name)!r}"
                )
        for name, lower in (("base", 1.0), ("norm_eps", 0.0)):
            check_number(name, getattr(self, name), lower)
        scaling = self.rope_scaling
        if isinstance(scaling, dict):
            # a TOML table or a from_dict mapping
            scaling = RopeScaling(**scaling)
            object.__setattr__(self, "rope_scaling", scaling)
        if scaling is not None:
            if not isinstance(scaling, RopeScaling):
                raise TypeError(
                    f"rope_scaling must be a RopeScaling, a mapping or None, got {type(scaling).__name__}"
                )
            if not scheme.rotary:
                raise ValueError(
                    f"rope_scaling={scaling.rope_type!r} scales rotary frequencies; positional={self.positional!r}"
                )
        if self.sliding_window is not None:
            check_int("sliding_window", self.sliding_window, minimum=1)
        check_int("num_sink_tokens", self.num_sink_tokens, minimum=0)
        if self.num_sink_tokens and self.sliding_window is None:
            raise ValueError(
                f"num_sink_tokens={self.num_sink_tokens} needs a sliding_window: sinks are kept beside a window"
            )
        for name in (
            "relative_attention_num_buckets",
            "relative_attention_max_distance",
        ):
            check_int(name, getattr(self, name), minimum=1)
        scheme.check(self, causal=True)
        self._check_latent()

    _LATENT_FIELDS = (
        "q_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
    )

    def _check_latent(self) -> None:
        """Check the multi-head latent attention fields and fill in the
        widths left None."""
        if self.kv_lora_rank is None:
            for name in (*self._LATENT_FIELDS, "mla_absorbed"):
                if getattr(self, name):
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} is a field of multi-head latent attention: set "
                        "kv_lora_rank too"
                    )
            return
        check_int("kv_lora_rank", self.kv_lora_rank, minimum=1)
        if self.positional != "rotary":
            raise ValueError(
                f"kv_lora_rank={self.kv_lora_rank} (multi-head latent attention) carries position in a "
                f"decoupled rotary key: positional must be 'rotary', got {self.positional!r}"
            )
        if self.num_kv_heads is not None:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} with kv_lora_rank={self.kv_lora_rank}: the heads of "
                "multi-head latent attention share one latent, not groups of keys"
            )
        if self.rope_scaling is not None:
            raise ValueError(
                f"rope_scaling={self.rope_scaling.rope_type!r} with kv_lora_rank: this edition's "
                "multi-head latent attention takes unscaled rotary positions"
            )
        defaults = {
            "qk_nope_head_dim": self.head_dim,
            "qk_rope_head_dim": max(2, self.head_dim // 2 // 2 * 2),
            "v_head_dim": self.head_dim,
        }
        for name, default in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
            check_int(name, getattr(self, name), minimum=1)
        if self.qk_rope_head_dim % 2:
            raise ValueError(
                f"qk_rope_head_dim={self.qk_rope_head_dim} must be even: rotary turns pairs of features"
            )
        if self.q_lora_rank is not None:
            check_int("q_lora_rank", self.q_lora_rank, minimum=1)

    @property
    def positional_scheme(self) -> PositionalScheme:
        """The :class:`~tinyformer.models.positional.scheme.PositionalScheme`
        that ``positional`` names."""
        return positional_scheme(self.positional, decoder=True)

    @property
    def head_dim(self) -> int:
        """Width of one head, ``D = d_model // num_heads``."""
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads in effect, ``H_kv``."""
        return (
            self.num_heads
            if self.num_kv_heads is None
            else self.num_kv_heads
        )
