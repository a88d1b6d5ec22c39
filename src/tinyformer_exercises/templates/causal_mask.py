"""Coding exercise causal-mask (chapter 1, "Attention from first principles").

Objective assessed: build a causal mask and state its polarity (True = may
attend).

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises causal-mask causal_mask.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- causal-mask path/to/causal_mask.py
"""

import torch
from torch import Tensor


def causal_mask(seq_len: int) -> Tensor:
    """Boolean ``(L, L)`` mask with True where query i may attend to key j,
    that is j <= i (Vaswani et al., 2017, Sec. 3.2.3).

    Args:
        seq_len: sequence length L (tokens), >= 0.

    Returns:
        ``(L, L)`` bool tensor, lower triangular including the diagonal.
        True = may attend.
    """
    raise NotImplementedError
