"""Coding exercise split-merge-heads (chapter 3, "Multi-head attention").

Objective assessed: split a projected embedding into heads and concatenate
the heads back, per position.

Write the bodies of the two functions below, then check them, offline: from
a clone of the book's repository, giving the path of this file,

    nox -s check -- split-merge-heads path/to/split_merge_heads.py

or from this file's folder, in an environment with tinyformer installed,

    python -m tinyformer.exercises split-merge-heads split_merge_heads.py
"""

import torch
from torch import Tensor


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(N, L, E)`` to ``(N, H, L, D)``: head h gets features ``h*D`` to
    ``(h+1)*D - 1`` of every position.

    Args:
        x: ``(N, L, E)`` projected queries, keys or values; ``E = d_model``
            divisible by ``num_heads``.
        num_heads: number of heads H; the head width is ``D = E // H``.

    Returns:
        ``(N, H, L, D)`` tensor.
    """
    raise NotImplementedError


def merge_heads(x: Tensor) -> Tensor:
    """``(N, H, L, D)`` to ``(N, L, E)``: the heads' outputs concatenated
    feature-wise, per position.

    Args:
        x: ``(N, H, L, D)`` outputs of H heads.

    Returns:
        ``(N, L, H * D)`` tensor whose features ``h*D`` to ``(h+1)*D - 1``
        at position l are head h's output at l.
        ``merge_heads(split_heads(x, H))`` is ``x``.
    """
    raise NotImplementedError
