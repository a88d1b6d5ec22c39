"""ALiBi, attention with linear biases: a per-head penalty on distance added
to the scores (Press et al., 2022, Sec. 3).

Shapes: ``H`` number of heads ``num_heads``, ``L`` query length, ``S`` key
length."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.tools.checks import check_int

__all__ = [
    "ALIBI",
    "ALIBI_ASYMMETRIC",
    "ALiBiBias",
    "alibi_bias",
    "alibi_slopes",
]


def _geometric_slopes(num_heads: int) -> list[float]:
    """``2^(-8/n), 2^(-16/n), ..., 2^(-8)``: the geometric sequence Press et
    al. use for ``n`` heads."""
    return [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]


def alibi_slopes(
    num_heads: int, *, dtype: torch.dtype = torch.float64
) -> Tensor:
    """The head-specific slopes m_h of ALiBi (Press et al., 2022, Sec. 3 and
    their reference code).

    For a power of two ``H`` the slopes are the geometric sequence that
    starts and shrinks by ``2^(-8/H)``: ``2^-1, 2^-2, ..., 2^-8`` for 8
    heads, ``2^-0.5, 2^-1, ..., 2^-8`` for 16. For any other ``H`` the
    authors' rule takes the ``2^k`` slopes of the largest power of two
    ``2^k < H``, then fills the remaining ``H - 2^k`` heads with every other
    slope of the sequence for ``2^(k+1)`` heads (``2^(k+1)``'s first, third,
    fifth ... slope), so the new slopes interleave with the old ones.

    Args:
        num_heads: number of heads H, >= 1.
        dtype: floating dtype of the result.

    Returns:
        ``(H,)`` tensor of slopes in (0, 1).

    Raises:
        TypeError: if ``num_heads`` is not an int.
        ValueError: if ``num_heads < 1``.
    """
    num_heads = check_int("num_heads", num_heads, minimum=1)
    # the largest power of two <= H
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _geometric_slopes(closest)
    slopes += _geometric_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=dtype)  # (H,)


def alibi_bias(
    num_heads: int,
    seq_len_q: int,
    seq_len_k: int | None = None,
    *,
    query_offset: int = 0,
    asymmetric: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """``bias[h, i, j] = -m_h * |(i + query_offset) - j|``, to be added to the attention
    scores (Press et al., 2022, Sec. 3, Eq. 1).

    With ``asymmetric=True`` every key to the left of its query
    (``j < i + query_offset``) gets ``m_h / 2`` added, as in Ruoss et al.'s
    (2023) code for encoders: the symmetric bias gives the keys ``d`` to the
    left and ``d`` to the right the same penalty, so an encoder whose only
    position signal it is cannot tell left from right.

    Query ``i`` and key ``j`` are counted from the start of their sequences
    (top-left aligned, as ``is_causal`` is). Press et al. use ALiBi in a
    causal decoder, where ``j <= i`` and the bias is ``-m_h (i - j)``; the
    absolute value makes the same penalty symmetric for an encoder. For
    causal use, pass this bias as a float ``attn_mask`` together with
    ``is_causal=True``: the causal rule blocks the future keys and the bias
    penalises the past ones. No position is ever added to the embeddings, so
    nothing limits the length: the bias of a longer sequence is the same
    formula.

    Under a key-value cache the ``L`` new queries are the last of the
    ``S`` positions: pass ``query_offset = S - L`` so that query ``i`` sits
    at position ``S - L + i``, and block the future keys with
    :func:`~tinyformer.models.cache.causal_block_mask` (the causal rule aligned
    at the bottom right).

    Args:
        num_heads: number of heads H, >= 1; head h uses slope
            ``alibi_slopes(H)[h]``.
        seq_len_q: query length L, >= 0.
        seq_len_k: key length S, >= 0; defaults to ``seq_len_q``.
        query_offset: position of the first query (tokens), >= 0.
        asymmetric: add ``m_h / 2`` to the bias of keys left of the query.
        dtype: floating dtype of the result (the dtype of the scores it is
            added to).
        device: device of the result.

    Returns:
        ``(H, L, S)`` tensor, zero where ``i == j`` and negative elsewhere;
        a float ``attn_mask`` for
        :class:`~tinyformer.models.attention.MultiHeadAttention`.

    Raises:
        TypeError: if a size is not an int or ``dtype`` is not a floating
            dtype.
        ValueError: if ``num_heads < 1``, a length or ``query_offset`` is
            negative.
    """
    seq_len_q = check_int("seq_len_q", seq_len_q, minimum=0)
    seq_len_k = (
        seq_len_q
        if seq_len_k is None
        else check_int("seq_len_k", seq_len_k, minimum=0)
    )
    query_offset = check_int("query_offset", query_offset, minimum=0)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"dtype must be a floating torch.dtype, got {dtype!r}"
        )
    if not isinstance(asymmetric, bool):
        raise TypeError(f"asymmetric must be a bool, got {asymmetric!r}")
    query_pos = torch.arange(seq_len_q) + query_offset  # (L,)
    key_pos = torch.arange(seq_len_k)  # (S,)
    # (H, L, S)
    return _bias_at(
        num_heads, query_pos, key_pos, asymmetric=asymmetric
    ).to(device=device, dtype=dtype)


def _bias_at(
    num_heads: int,
    query_positions: Tensor,
    key_positions: Tensor,
    *,
    asymmetric: bool,
) -> Tensor:
    """``-m_h |i - j|`` in float64, ``(..., H, L, S)``, for positions
    ``(..., L)`` and ``(..., S)``; with ``asymmetric``, half a slope less for
    keys to the left (Ruoss et al., 2023). Shared by :func:`alibi_bias` and
    :class:`ALiBiBias`."""
    query = query_positions.to(torch.float64)[..., :, None]  # (..., L, 1)
    key = key_positions.to(torch.float64)[..., None, :]  # (..., 1, S)
    distance = (query - key).abs()  # (..., L, S), tokens
    if asymmetric:
        distance = distance - 0.5 * (key < query)
    slopes = alibi_slopes(num_heads).to(distance.device)  # (H,)
    # (H, 1, 1) * (..., 1, L, S) -> (..., H, L, S)
    return -slopes[:, None, None] * distance[..., None, :, :]


class ALiBiBias(nn.Module):
    """ALiBi's bias as a module of positions: ``-m_h |i - j|`` for query
    position ``i`` and key position ``j`` (Press et al., 2022, Eq. 1), with
    Ruoss et al.'s half slope less for keys to the left when ``asymmetric``.

    It holds no weights. Computed in float64 and rounded once to ``dtype``,
    so it is :func:`alibi_bias` for positions ``0 .. L - 1``; a decoder
    passes the positions of its real tokens, cached keys included.

    Args:
        num_heads: heads H, >= 1.
        asymmetric: the encoder variant of Ruoss et al. (2023).
    """

    def __init__(self, num_heads: int, *, asymmetric: bool = False) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        if not isinstance(asymmetric, bool):
            raise TypeError(
                f"asymmetric must be a bool, got {asymmetric!r}"
            )
        self.asymmetric = asymmetric

    def forward(
        self,
        query_positions: Tensor,
        key_positions: Tensor,
        *,
        dtype: torch.dtype = torch.float32,
    ) -> Tensor:
        """``(..., H, L, S)`` bias for integer positions ``(..., L)`` and
        ``(..., S)``."""
        return _bias_at(
            self.num_heads,
            query_positions,
            key_positions,
            asymmetric=self.asymmetric,
        ).to(dtype)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, asymmetric={self.asymmetric}"


class _ALiBiScheme(PositionalScheme):
    name = "alibi"
    description = "a fixed distance penalty per head on the scores (Press et al., 2022)"
    asymmetric = False

    def score_bias(self, config: Any, *, causal: bool) -> nn.Module:
        return ALiBiBias(config.num_heads, asymmetric=self.asymmetric)


class _AsymmetricALiBiScheme(_ALiBiScheme):
    name = "alibi_asymmetric"
    description = "ALiBi with half a slope less to the left, for encoders (Ruoss et al., 2023)"
    asymmetric = True
    # a causal decoder sees keys on the left only: the variant is ALiBi there
    decoder = False


#: ALiBi, the scheme ``"alibi"``.
ALIBI = _ALiBiScheme()
#: Ruoss et al.'s encoder variant, the scheme ``"alibi_asymmetric"``.
ALIBI_ASYMMETRIC = _AsymmetricALiBiScheme()
