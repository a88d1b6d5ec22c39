"""Coding exercise alibi-bias (chapter 5, "Position beyond sinusoids").

Objective assessed: compute ALiBi's slopes for any number of heads and its
distance biases.

Write the bodies of the two functions below, then check them, offline,
from this file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises alibi-bias alibi_bias.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- alibi-bias path/to/alibi_bias.py
"""

import math

import torch
from torch import Tensor


def alibi_slopes(num_heads: int) -> Tensor:
    """The head-specific slopes m_h of ALiBi (Press et al., 2022, Sec. 3 and
    their reference code).

    For a power of two ``H`` the slopes are the geometric sequence that
    starts and shrinks by ``2^(-8/H)``: ``2^-1, 2^-2, ..., 2^-8`` for 8
    heads, ``2^-0.5, 2^-1, ..., 2^-8`` for 16. For any other ``H`` the
    authors' rule takes the ``2^k`` slopes of the largest power of two
    ``2^k < H``, then fills the remaining ``H - 2^k`` heads with every other
    slope of the sequence for ``2^(k+1)`` heads (``2^(k+1)``'s first, third,
    fifth ... slope).

    Args:
        num_heads: number of heads H, >= 1.

    Returns:
        ``(H,)`` float tensor of slopes in (0, 1), head 0's first.
    """
    raise NotImplementedError


def alibi_bias(
    num_heads: int, seq_len_q: int, seq_len_k: int | None = None
) -> Tensor:
    """``bias[h, i, j] = -m_h * |i - j|``, to be added to the attention
    scores (Press et al., 2022, Sec. 3, Eq. 1).

    Query ``i`` and key ``j`` are counted from the start of their sequences.

    Args:
        num_heads: number of heads H, >= 1; head h uses slope
            ``alibi_slopes(H)[h]``.
        seq_len_q: query length L, >= 0.
        seq_len_k: key length S, >= 0; defaults to ``seq_len_q``.

    Returns:
        ``(H, L, S)`` float tensor, zero where ``i == j`` and negative
        elsewhere.
    """
    raise NotImplementedError
