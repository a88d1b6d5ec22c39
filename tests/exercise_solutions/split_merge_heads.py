"""Reference solution of coding exercise split-merge-heads (chapter 3,
"Multi-head attention").

Objective assessed: split a projected embedding into heads and
concatenate the heads back, per position.

Write the bodies of the two functions below, then check them
(offline, from the book's repository):

    nox -s check -- split-merge-heads split_merge_heads.py
"""

import torch
from torch import Tensor


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(N, L, E)`` to ``(N, H, L, D)``: head h gets features
    ``h*D`` to ``(h+1)*D - 1`` of every position.

    Args:
        x: ``(N, L, E)`` projected queries, keys or values;
            ``E = d_model`` divisible by ``num_heads``.
        num_heads: number of heads H; the head width is
            ``D = E // H``.

    Returns:
        ``(N, H, L, D)`` tensor.
    """
    batch_size, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    # (N, L, H, D), then heads before positions: (N, H, L, D)
    x = x.reshape(batch_size, seq_len, num_heads, head_dim)
    return x.transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(N, H, L, D)`` to ``(N, L, E)``: the heads' outputs
    concatenated feature-wise, per position.

    Args:
        x: ``(N, H, L, D)`` outputs of H heads.

    Returns:
        ``(N, L, H * D)`` tensor whose features ``h*D`` to
        ``(h+1)*D - 1`` at position l are head h's output at l.
        ``merge_heads(split_heads(x, H))`` is ``x``.
    """
    batch_size, num_heads, seq_len, head_dim = x.shape
    # (N, L, H, D), then the heads side by side: (N, L, E)
    x = x.transpose(1, 2)
    return x.reshape(batch_size, seq_len, num_heads * head_dim)
