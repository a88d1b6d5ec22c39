"""A miniature Transformer encoder: feed-forward network, encoder layer,
classifier (Vaswani et al., 2017, Sec. 3).

Shapes: ``N`` batch size, ``L`` sequence length, ``E`` model width
``d_model``, ``H`` number of heads ``num_heads``, ``F`` hidden width of the
feed-forward network ``d_ff``, ``C`` number of classes.

Mask polarity, as in :mod:`tinyformer.models.attention`: ``attn_mask`` boolean
means **True = may attend**; ``key_padding_mask`` boolean means **True =
padding**, ignored by every query.

Layer normalisation is placed as in the paper ("post-LN",
``LayerNorm(x + Sublayer(x))``, Sec. 3.1) by default; ``norm_first=True``
moves it in front of each sublayer ("pre-LN", Xiong et al., 2020), which is
what most modern models do and what
``nn.TransformerEncoderLayer(norm_first=True)`` does."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinyformer.models.attention import MultiHeadAttention
from tinyformer.models.positional.registry import (  # noqa: F401
    POSITIONAL_SCHEMES,
    positional_scheme,
)
from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.tools.checks import check_int, check_probability
from tinyformer.tools.config import TomlConfig

# POSITIONAL_SCHEMES is importable from here as well; it is documented where
# it lives, tinyformer.models.positional.registry.
__all__ = [
    "EncoderLayer",
    "PositionwiseFeedForward",
    "TinyTransformer",
    "TransformerConfig",
]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _torch_activation(activation: object) -> str:
    """The name of a ``nn.TransformerEncoderLayer``'s activation that this
    module computes exactly.

    Raises:
        ValueError: naming the activation, if it is neither ReLU nor exact
            (erf) GELU.
    """
    if (
        activation is F.relu
        or activation is torch.relu
        or isinstance(activation, nn.ReLU)
    ):
        return "relu"
    if activation is F.gelu or (
        isinstance(activation, nn.GELU) and activation.approximate == "none"
    ):
        return "gelu"
    raise ValueError(
        f"activation={activation!r} is not supported: use relu or exact GELU (approximate='none'), "
        "the two this library computes"
    )


def _check_activation(activation: object) -> str:
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"activation={activation!r} must be one of {sorted(_ACTIVATIONS)}"
        )
    return str(activation)


@dataclass(frozen=True)
class TransformerConfig(TomlConfig):
    """Sizes and switches of a :class:`TinyTransformer`; frozen, so a
    trained model's recipe cannot drift.

    The paper's base model is
    ``d_model=512, num_heads=8, d_ff=2048, num_layers=6, dropout=0.1``
    (Vaswani et al., 2017, Table 3); the preset ``paper-base``
    (:mod:`tinyformer.labs.presets`) holds it.

    Attributes:
        vocab_size: number of token ids V, >= 1.
        num_classes: number of output classes C, >= 1.
        d_model: model width E, divisible by ``num_heads``.
        num_heads: heads per attention layer H.
        d_ff: hidden width F of the feed-forward network.
        num_layers: encoder layers, >= 1.
        max_len: longest input the positional table covers, in tokens
            (``"sinusoidal"`` and ``"learned"`` refuse longer inputs; the
            other schemes have no table and accept any length).
        dropout: dropout probability in [0, 1) (attention weights, sublayer
            outputs, embeddings).
        activation: ``"relu"`` (the paper's) or ``"gelu"``.
        norm_first: False for the paper's post-LN layers, True for pre-LN.
        positional_encoding: the original on/off switch: False means no
            positional information, whatever ``positional`` says (it may
            then only be ``"sinusoidal"``, the default, or ``"none"``).
        base: wavelength constant of the sinusoidal table and of the rotary
            angles, > 1.
        positional: the positional scheme, one of
            :data:`~tinyformer.models.positional.registry.POSITIONAL_SCHEMES`: ``"none"``; ``"sinusoidal"`` (the
            paper's table added to the embeddings, the default);
            ``"learned"`` (a learned table of ``max_len`` rows,
            :class:`~tinyformer.models.positional.LearnedPositionalEmbedding`);
            ``"rotary"`` (queries and keys of every layer rotated,
            :func:`~tinyformer.models.positional.apply_rotary`); ``"alibi"`` (a
            distance penalty per head added to every layer's scores,
            :func:`~tinyformer.models.positional.alibi_bias`);
            ``"alibi_asymmetric"`` (the same with ``m_h / 2`` less penalty
            on keys to the left, Ruoss et al.'s encoder variant); ``"t5"``
            (a learned bias per head and bucket of distance, bidirectional,
            :class:`~tinyformer.models.positional.T5RelativePositionBias`).
            :attr:`scheme` is the one in effect, :attr:`positional_scheme`
            its object.
        relative_attention_num_buckets: the rows of ``"t5"``'s bias table,
            half for keys on each side, >= 4 (T5's 32).
        relative_attention_max_distance: the distance in tokens from which
            ``"t5"`` puts every key in its side's last bucket (T5's 128).

    Raises:
        TypeError: if an integer field is not an int.
        ValueError: if a field is out of range or ``d_model`` is not
            divisible by ``num_heads``, naming the field and its value.
    """

    vocab_size: int
    num_classes: int
    d_model: int = 32
    num_heads: int = 4
    d_ff: int = 64
    num_layers: int = 2
    max_len: int = 64
    dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    positional_encoding: bool = True
    base: float = 10000.0
    positional: str = "sinusoidal"
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "num_classes",
            "d_model",
            "num_heads",
            "d_ff",
            "num_layers",
            "max_len",
            "relative_attention_num_buckets",
            "relative_attention_max_distance",
        ):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        check_probability("dropout", self.dropout)
        _check_activation(self.activation)
        for name in ("norm_first", "positional_encoding"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"{name} must be a bool, got {getattr(self, name)!r}"
                )
        if (
            isinstance(self.base, bool)
            or not isinstance(self.base, (int, float))
            or not self.base > 1
        ):
            raise ValueError(
                f"base={self.base!r} must be a number greater than 1"
            )
        scheme = positional_scheme(self.positional)
        if not self.positional_encoding and self.positional not in (
            "none",
            "sinusoidal",
        ):
            raise ValueError(
                f"positional={self.positional!r} contradicts positional_encoding=False; leave positional_encoding=True"
            )
        scheme.check(self, causal=False)

    @property
    def scheme(self) -> str:
        """The positional scheme in effect, ``"none"`` if
        ``positional_encoding`` is False and ``positional`` otherwise."""
        return self.positional if self.positional_encoding else "none"

    @property
    def positional_scheme(self) -> PositionalScheme:
        """The :class:`~tinyformer.models.positional.scheme.PositionalScheme`
        in effect (:attr:`scheme`'s)."""
        return positional_scheme(self.scheme)

    @property
    def head_dim(self) -> int:
        """Width of one head, ``D = d_model // num_heads``."""
        return self.d_model // self.num_heads


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position
    alone (Vaswani et al., 2017, Sec. 3.3).

    Args:
        d_model: input and output width E.
        d_ff: hidden width F (the paper uses ``4 * d_model``).
        dropout: dropout probability on the hidden activations, in [0, 1).
        activation: ``"relu"`` (the paper's) or ``"gelu"``.

    Shapes:
        ``(..., E)`` to ``(..., E)``: positions never mix, so permuting the positions of the input
        permutes the output the same way.

    Raises:
        TypeError, ValueError: for a non-int or non-positive width, a dropout outside [0, 1) or an
            unknown activation, naming the value.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        check_int("d_model", d_model, minimum=1)
        check_int("d_ff", d_ff, minimum=1)
        self.activation = _check_activation(activation)
        self.linear1 = nn.Linear(d_model, d_ff)  # W_1, b_1
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.linear2 = nn.Linear(d_ff, d_model)  # W_2, b_2

    def forward(self, x: Tensor) -> Tensor:
        hidden = _ACTIVATIONS[self.activation](self.linear1(x))  # (..., F)
        return self.linear2(self.dropout(hidden))  # (..., E)


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention and a feed-forward network, each
    wrapped in a residual and LayerNorm (Sec. 3.1).

    Post-LN (``norm_first=False``, the paper)::

        x = LayerNorm(x + Dropout(SelfAttention(x)))
        x = LayerNorm(x + Dropout(FFN(x)))

    Pre-LN (``norm_first=True``)::

        x = x + Dropout(SelfAttention(LayerNorm(x)))
        x = x + Dropout(FFN(LayerNorm(x)))

    The submodule names follow ``nn.TransformerEncoderLayer`` (``norm1``,
    ``norm2``, ``dropout1``, ``dropout2``; ``ffn.linear1``,
    ``ffn.linear2``), and :meth:`from_torch` copies one's weights.

    Args:
        d_model: model width E.
        num_heads: attention heads H, dividing ``d_model``.
        d_ff: hidden width F of the feed-forward network.
        dropout: dropout probability in [0, 1), used on attention weights,
            sublayer outputs and FFN hidden units.
        activation: ``"relu"`` or ``"gelu"``.
        norm_first: False for post-LN (the paper), True for pre-LN.
        layer_norm_eps: the LayerNorms' epsilon.
        rotary: if True, the self-attention rotates queries and keys (Su et
            al., 2021).
        rotary_base: the rotary wavelength constant, > 1.

    Raises:
        TypeError, ValueError: as :class:`~tinyformer.models.attention.MultiHeadAttention` and
            :class:`PositionwiseFeedForward` do for their arguments.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        rotary: bool = False,
        rotary_base: float = 10000.0,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model,
            num_heads,
            dropout=dropout,
            rotary=rotary,
            rotary_base=rotary_base,
        )
        self.ffn = PositionwiseFeedForward(
            d_model, d_ff, dropout=dropout, activation=activation
        )
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = bool(norm_first)

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoderLayer) -> EncoderLayer:
        """An ``EncoderLayer`` that computes what an
        ``nn.TransformerEncoderLayer`` computes.

        Every constructor option of ``nn.TransformerEncoderLayer`` is
        reproduced or refused: ``d_model``, ``nhead``, ``dim_feedforward``,
        ``dropout``, ``layer_norm_eps``, ``norm_first``, ``device`` and
        ``dtype`` are copied (with the weights and the train/eval mode);
        ``activation`` is copied when it is ReLU (``"relu"``, ``F.relu``,
        ``torch.relu``, ``nn.ReLU()``) or exact GELU (``"gelu"``,
        ``F.gelu``, ``nn.GELU()``) and refused otherwise
        (``nn.GELU(approximate="tanh")`` included); ``bias=False`` and
        ``batch_first=False`` (this layer is always batch first) are
        refused, as is anything
        :meth:`tinyformer.models.attention.MultiHeadAttention.from_torch` refuses
        in ``self_attn``.

        Raises:
            TypeError: if ``module`` is not an
                ``nn.TransformerEncoderLayer``.
            ValueError: for an option this layer does not reproduce, naming
                the option and its value.
        """
        if not isinstance(module, nn.TransformerEncoderLayer):
            raise TypeError(
                f"module must be an nn.TransformerEncoderLayer, got {type(module).__name__}"
            )
        activation = _torch_activation(module.activation)
        if not module.self_attn.batch_first:
            raise ValueError(
                "batch_first=False is not supported: tinyformer's EncoderLayer is batch first"
            )
        if module.linear1.bias is None or module.norm1.bias is None:
            raise ValueError(
                "bias=False is not supported: tinyformer's EncoderLayer has biases"
            )
        dropouts = {
            module.dropout.p,
            module.dropout1.p,
            module.dropout2.p,
            module.self_attn.dropout,
        }
        if len(dropouts) != 1:
            raise ValueError(
                f"dropout probabilities {sorted(dropouts)} differ; this layer uses one dropout"
            )
        weight = module.linear1.weight
        layer = cls(
            module.self_attn.embed_dim,
            module.self_attn.num_heads,
            module.linear1.out_features,
            dropout=module.dropout.p,
            activation=activation,
            norm_first=module.norm_first,
            layer_norm_eps=module.norm1.eps,
        )
        layer.to(device=weight.device, dtype=weight.dtype)
        layer.self_attn = MultiHeadAttention.from_torch(module.self_attn)
        layer.train(module.training)
        with torch.no_grad():
            for ours, theirs in (
                (layer.ffn.linear1, module.linear1),
                (layer.ffn.linear2, module.linear2),
                (layer.norm1, module.norm1),
                (layer.norm2, module.norm2),
            ):
                ours.weight.copy_(theirs.weight)
                ours.bias.copy_(theirs.bias)
        return layer

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Apply the layer.

        Args:
            x: ``(N, L, E)``.
            attn_mask: bool with **True = may attend**, or float added to
                the scores; ``(L, L)`` or any shape
                :class:`~tinyformer.models.attention.MultiHeadAttention` accepts.
            key_padding_mask: bool ``(N, L)`` with **True = padding**.
            is_causal: if True, position i attends only to positions j <= i.
            need_weights: if True, also return the per-head attention
                weights.

        Returns:
            ``(output, weights)``: output ``(N, L, E)``; weights
            ``(N, H, L, L)`` per head, or None.

        Raises:
            TypeError, ValueError: for inputs or masks of the wrong type or shape (from the attention).
        """
        masks = {
            "attn_mask": attn_mask,
            "key_padding_mask": key_padding_mask,
            "is_causal": is_causal,
        }
        if self.norm_first:
            attended, weights = self._attend(
                self.norm1(x), need_weights, masks
            )
            x = x + self.dropout1(attended)
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            attended, weights = self._attend(x, need_weights, masks)
            x = self.norm1(x + self.dropout1(attended))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return x, weights  # (N, L, E), (N, H, L, L) or None

    def _attend(
        self, x: Tensor, need_weights: bool, masks: dict[str, Any]
    ) -> tuple[Tensor, Tensor | None]:
        return self.self_attn(
            x,
            need_weights=need_weights,
            average_attn_weights=False,
            **masks,
        )


class TinyTransformer(nn.Module):
    """Token embedding, positional information, encoder layers, mean pooling
    and a linear classifier.

    ``config.positional_scheme`` says where position enters: added to the
    embeddings (``"sinusoidal"``, ``"learned"``), inside every attention
    layer (``"rotary"`` rotates queries and keys; ``"alibi"`` and ``"t5"``
    add a bias to the scores, computed once for all layers, as a float
    ``attn_mask`` combined with the padding mask) or nowhere (``"none"``).

    The embedding follows Sec. 3.4 of Vaswani et al. (2017): its weights are
    multiplied by ``sqrt(d_model)``. They are initialised with standard
    deviation ``d_model ** -0.5``, so the scaled embedding has unit variance
    per feature, the same order as the encoding's values in [-1, 1]. The
    paper's model is an encoder-decoder for translation; this one is an
    encoder with a classifier that averages the outputs of the non-padding
    positions, the smallest model in which a trained head can be seen using
    position.

    Args:
        config: the sizes and switches.

    Raises:
        TypeError: if ``config`` is not a :class:`TransformerConfig`.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(
                f"config must be a TransformerConfig, got {type(config).__name__}"
            )
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        nn.init.normal_(self.embedding.weight, std=config.d_model**-0.5)
        scheme = config.positional_scheme
        # position vectors added to the scaled embeddings (if any), dropout
        self.positional = scheme.encoder_embedding(config)
        # (query positions, key positions) -> (H, L, L) bias, or None
        self.position_bias = scheme.score_bias(config, causal=False)
        self.layers = nn.ModuleList(
            EncoderLayer(
                config.d_model,
                config.num_heads,
                config.d_ff,
                dropout=config.dropout,
                activation=config.activation,
                norm_first=config.norm_first,
                rotary=scheme.rotary,
                rotary_base=config.base,
            )
            for _ in range(config.num_layers)
        )
        # Pre-LN leaves the residual stream unnormalised; a final LayerNorm
        # closes it (Xiong et al., 2020).
        self.final_norm = (
            nn.LayerNorm(config.d_model)
            if config.norm_first
            else nn.Identity()
        )
        self.classifier = nn.Linear(config.d_model, config.num_classes)

    def _check_ids(
        self, input_ids: object, key_padding_mask: object
    ) -> None:
        if (
            not isinstance(input_ids, Tensor)
            or input_ids.dtype != torch.long
            or input_ids.dim() != 2
        ):
            raise TypeError(
                f"input_ids must be a 2-D torch.long Tensor (N, L), got {input_ids!r:.80}"
            )
        if (
            input_ids.size(1) > self.config.max_len
            and self.config.positional_scheme.table
        ):
            raise ValueError(
                f"sequence length {input_ids.size(1)} exceeds max_len={self.config.max_len}"
            )
        # The checks below read tensor values. Under torch.compile they
        # become in-graph assertions (RuntimeError when violated) instead of
        # a Python branch, which would break the graph.
        compiling = torch.compiler.is_compiling()
        in_range = (
            (input_ids >= 0) & (input_ids < self.config.vocab_size)
        ).all()
        message = f"input_ids must lie in [0, vocab_size={self.config.vocab_size})"
        if compiling:
            torch._assert_async(in_range, message)
        elif not bool(in_range):
            raise ValueError(message)
        if key_padding_mask is not None:
            if (
                not isinstance(key_padding_mask, Tensor)
                or key_padding_mask.dtype != torch.bool
            ):
                raise TypeError(
                    "key_padding_mask must be a bool Tensor (True = padding)"
                )
            if key_padding_mask.shape != input_ids.shape:
                raise ValueError(
                    f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, input_ids {tuple(input_ids.shape)}"
                )
            some_real = (~key_padding_mask).any(dim=1).all()
            message = "key_padding_mask marks every token of some sequence as padding"
            if compiling:
                torch._assert_async(some_real, message)
            elif not bool(some_real):
                raise ValueError(message)

    def encode(
        self,
        input_ids: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        """Run the encoder.

        Args:
            input_ids: long ``(N, L)`` token ids in ``[0, vocab_size)``.
            key_padding_mask: bool ``(N, L)`` with **True = padding**; every
                sequence needs one real token.
            need_weights: if True, collect every layer's per-head attention
                weights.

        Returns:
            ``(hidden, weights)``: hidden ``(N, L, E)``; weights a list with
            one ``(N, H, L, L)`` tensor per layer (empty when
            ``need_weights`` is False).

        Raises:
            TypeError: if ``input_ids`` is not a 2-D long tensor or the mask
                is not boolean.
            ValueError: for ids outside the vocabulary, a sequence longer
                than ``max_len`` (with a positional table), a mask of
                another shape, or a sequence that is all padding.
        """
        self._check_ids(input_ids, key_padding_mask)
        # (N, L, E)
        x = self.embedding(input_ids) * math.sqrt(self.config.d_model)
        x = self.positional(x)  # (N, L, E)
        bias = None
        if self.position_bias is not None:
            positions = torch.arange(input_ids.size(1), device=x.device)
            # (H, L, L), added to every layer's scores
            bias = self.position_bias(positions, positions, dtype=x.dtype)
        all_weights = []
        for layer in self.layers:
            x, weights = layer(
                x,
                attn_mask=bias,
                key_padding_mask=key_padding_mask,
                need_weights=need_weights,
            )
            if need_weights:
                all_weights.append(weights)  # (N, H, L, L)
        return self.final_norm(x), all_weights

    def forward(
        self, input_ids: Tensor, *, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        """Class scores (logits) ``(N, C)`` for a batch of token ids
        ``(N, L)``; arguments and errors as :meth:`encode`."""
        hidden, _ = self.encode(
            input_ids, key_padding_mask=key_padding_mask
        )
        if key_padding_mask is None:
            pooled = hidden.mean(dim=1)  # (N, E)
        else:
            # (N, L, 1)
            keep = (~key_padding_mask).unsqueeze(-1).to(hidden.dtype)
            # (N, E): mean over real tokens
            pooled = (hidden * keep).sum(dim=1) / keep.sum(dim=1)
        return self.classifier(pooled)  # (N, C)
