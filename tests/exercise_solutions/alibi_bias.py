"""Coding exercise alibi-bias.

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
    # BEGIN SOLUTION
    # the largest power of two <= H
    closest = 2 ** math.floor(math.log2(num_heads))
    ratio = 2.0 ** (-8.0 / closest)
    # 2^(-8/n), 2^(-16/n), ..., 2^-8 for n = closest
    slopes = [ratio ** (h + 1) for h in range(closest)]
    # the ratio of the sequence for 2 * closest heads
    finer = 2.0 ** (-8.0 / (2 * closest))
    # its 1st, 3rd, 5th ... slope
    slopes += [
        finer ** (2 * h + 1) for h in range(num_heads - closest)
    ]
    return torch.tensor(slopes, dtype=torch.float64)  # (H,)
    # END SOLUTION


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
    # BEGIN SOLUTION
    if seq_len_k is None:
        seq_len_k = seq_len_q
    slopes = alibi_slopes(num_heads)  # (H,)
    # (L, 1): i
    query_pos = torch.arange(
        seq_len_q, dtype=torch.float64
    ).unsqueeze(1)
    # (1, S): j
    key_pos = torch.arange(
        seq_len_k, dtype=torch.float64
    ).unsqueeze(0)
    # (L, S): |i - j|, tokens
    distance = (query_pos - key_pos).abs()
    return -slopes[:, None, None] * distance  # (H, L, S)
    # END SOLUTION
