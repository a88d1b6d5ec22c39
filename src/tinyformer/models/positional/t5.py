"""T5's relative position bias: a learned number per head for each bucket of
key-minus-query distance, added to the scores (Raffel et al., 2020, Sec.
2.1; Shaw et al., 2018).

Distances shorter than half the buckets (a quarter, bidirectionally) each get
a bucket of their own; longer ones share buckets whose width grows
logarithmically up to ``max_distance``, and every distance from there on falls
in the last bucket (which begins a little earlier: at 113 tokens for T5's 32
causal buckets up to 128). So a model trained on sequences longer than
``max_distance`` has trained every bucket it will ever meet; Press et al.
(2022, Sec. 2.2) suggest that this shared far bucket may help T5's bias
extrapolate, and in their Table 2 it comes second to ALiBi. One bias table
serves every layer, as in T5 ("we share the position embedding parameters
across all layers").

Shapes: ``H`` number of heads ``num_heads``, ``L`` queries, ``S`` keys,
``...`` leading dimensions (batch)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.tools.checks import check_int, check_non_negative

__all__ = [
    "T5",
    "T5RelativePositionBias",
    "check_t5_buckets",
    "t5_relative_position_bucket",
]


def check_t5_buckets(
    num_buckets: object, max_distance: object, *, bidirectional: bool
) -> tuple[int, int]:
    """Check the bucket settings of :func:`t5_relative_position_bucket`.

    Returns:
        ``(num_buckets, max_distance)``.

    Raises:
        TypeError: if either is not an int.
        ValueError: if there are fewer than 2 buckets per direction, or if
            ``max_distance`` does not exceed the exact buckets (then the
            logarithmic buckets would cover no distance), naming both.
    """
    if not isinstance(bidirectional, bool):
        raise TypeError(
            f"bidirectional must be a bool, got {bidirectional!r}"
        )
    num_buckets = check_int("num_buckets", num_buckets, minimum=1)
    max_distance = check_int("max_distance", max_distance, minimum=1)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    if per_direction < 2:
        raise ValueError(
            f"num_buckets={num_buckets} leaves {per_direction} bucket(s) per direction; "
            f"{'bidirectional' if bidirectional else 'causal'} buckets need at least "
            f"{4 if bidirectional else 2}"
        )
    exact = per_direction // 2
    if max_distance <= exact:
        raise ValueError(
            f"max_distance={max_distance} must exceed the {exact} exact buckets of "
            f"num_buckets={num_buckets}"
        )
    return num_buckets, max_distance


def t5_relative_position_bucket(
    relative_position: Tensor,
    *,
    bidirectional: bool,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """The bucket of each relative position, as T5 bins them (Raffel et al.,
    2020, Sec. 2.1; the rule of Mesh TensorFlow and Hugging Face's
    ``T5Attention._relative_position_bucket``, which it equals).

    ``relative_position`` is the key's position minus the query's, in tokens
    (negative for a key to the left). Bidirectionally, half of the buckets
    are for keys to the right (``relative_position > 0``) and half for the
    rest; causally, keys to the right share bucket 0 with the query itself
    (the causal mask hides them anyway). Within a direction of ``B``
    buckets, distance ``d < B / 2`` has bucket ``d``; a longer distance has
    bucket ``B/2 + floor(log(d / (B/2)) / log(max_distance / (B/2)) *
    (B - B/2))``, computed in float32 as the reference does, and at most
    ``B - 1``.

    Args:
        relative_position: integer tensor of key-minus-query distances, any
            shape.
        bidirectional: False for a causal decoder, True for an encoder.
        num_buckets: buckets in all, >= 2 (>= 4 bidirectionally); the
            bias table has this many rows.
        max_distance: the distance from which on all distances share the
            last bucket, in tokens; greater than the exact buckets.

    Returns:
        ``torch.long`` tensor of ``relative_position``'s shape, values in
        ``[0, num_buckets)``.

    Raises:
        TypeError: if ``relative_position`` is not an integer tensor, or a
            setting has the wrong type.
        ValueError: for fewer than 2 buckets per direction, or a
            ``max_distance`` that does not exceed the exact buckets.
    """
    if (
        not isinstance(relative_position, Tensor)
        or relative_position.is_floating_point()
        or relative_position.is_complex()
        or relative_position.dtype == torch.bool
    ):
        raise TypeError(
            f"relative_position must be an integer Tensor, got {relative_position!r:.80}"
        )
    num_buckets, max_distance = check_t5_buckets(
        num_buckets, max_distance, bidirectional=bidirectional
    )
    relative_position = relative_position.long()
    if bidirectional:
        per_direction = num_buckets // 2
        # keys to the right use the upper half of the buckets
        offset = (relative_position > 0).long() * per_direction
        distance = relative_position.abs()
    else:
        per_direction = num_buckets
        offset = torch.zeros_like(relative_position)
        # a key to the left is d >= 0 tokens back; keys to the right are 0
        distance = (-relative_position).clamp(min=0)
    exact = per_direction // 2
    # log-spaced buckets from `exact` to `max_distance`, in float32 as the
    # reference computes them (float64 would move a few bucket boundaries)
    ratio = distance.clamp(min=exact).float() / exact
    scaled = (
        torch.log(ratio)
        / math.log(max_distance / exact)
        * (per_direction - exact)
    )
    far = (exact + scaled.long()).clamp(max=per_direction - 1)
    return offset + torch.where(distance < exact, distance, far)


class T5RelativePositionBias(nn.Module):
    """A learned bias per head and distance bucket, added to the attention
    scores of every layer (Raffel et al., 2020, Sec. 2.1).

    The table is ``relative_attention_bias``, an ``nn.Embedding(num_buckets,
    H)`` as Hugging Face's ``T5Attention`` names it, so its weights copy
    across; ``forward`` equals that module's ``compute_bias``. T5 scales no
    scores by ``1/sqrt(D)``; the models here do, and add this bias to the
    scaled scores.

    Args:
        num_heads: heads H, >= 1.
        bidirectional: True in an encoder, False in a causal decoder.
        num_buckets: rows of the table (:func:`t5_relative_position_bucket`).
        max_distance: the distance from which every key falls in the last
            bucket, in tokens (:func:`t5_relative_position_bucket`).
        init_std: standard deviation of the initial table, >= 0.

    Raises:
        TypeError, ValueError: for the settings
            :func:`t5_relative_position_bucket` refuses, naming them.
        ValueError: if ``init_std`` is not a number >= 0.
    """

    def __init__(
        self,
        num_heads: int,
        *,
        bidirectional: bool,
        num_buckets: int = 32,
        max_distance: int = 128,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        self.num_buckets, self.max_distance = check_t5_buckets(
            num_buckets, max_distance, bidirectional=bidirectional
        )
        self.bidirectional = bidirectional
        # (num_buckets, H): row b is every head's bias for bucket b
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)
        nn.init.normal_(
            self.relative_attention_bias.weight,
            std=check_non_negative("init_std", init_std),
        )

    def forward(
        self,
        query_positions: Tensor,
        key_positions: Tensor,
        *,
        dtype: torch.dtype | None = None,
    ) -> Tensor:
        """The bias of each head for each query and key.

        Args:
            query_positions: integer ``(..., L)`` positions of the queries.
            key_positions: integer ``(..., S)`` positions of the keys, with
                the same leading dimensions.
            dtype: dtype of the result; None keeps the table's.

        Returns:
            ``(..., H, L, S)`` bias.
        """
        # (..., L, S): key position minus query position, as in T5
        relative = (
            key_positions[..., None, :] - query_positions[..., :, None]
        )
        buckets = t5_relative_position_bucket(
            relative,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        # (..., L, S, H) -> (..., H, L, S)
        bias = self.relative_attention_bias(buckets).movedim(-1, -3)
        return bias if dtype is None else bias.to(dtype)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, bidirectional={self.bidirectional}, "
            f"num_buckets={self.num_buckets}, max_distance={self.max_distance}"
        )


class _T5Scheme(PositionalScheme):
    name = "t5"
    description = "a learned bias per head and bucket of distance (Raffel et al., 2020)"

    def check(self, config: Any, *, causal: bool) -> None:
        check_t5_buckets(
            config.relative_attention_num_buckets,
            config.relative_attention_max_distance,
            bidirectional=not causal,
        )

    def score_bias(self, config: Any, *, causal: bool) -> nn.Module:
        return T5RelativePositionBias(
            config.num_heads,
            bidirectional=not causal,
            num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )


#: T5's relative bias, the scheme ``"t5"``.
T5 = _T5Scheme()
