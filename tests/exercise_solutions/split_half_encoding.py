"""Reference solution of coding exercise split-half-encoding (chapter 2,
"Positional encoding").

Objective assessed: write down the sinusoidal encoding and compute
it for any width and base.

Write the body of the function below, then check it (offline, from
the book's repository):

    nox -s check -- split-half-encoding split_half_encoding.py
"""

import math

import torch
from torch import Tensor


def split_half_encoding(
    seq_len: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """The sinusoidal encoding in the split-half layout: column
    ``i`` holds ``sin(pos * w_i)`` for the ``ceil(E/2)`` pairs,
    column ``ceil(E/2) + i`` holds ``cos(pos * w_i)`` for
    ``i < E // 2``, with ``w_i = base^(-2i/d_model)``.

    Args:
        seq_len: number of positions L (tokens), >= 0.
        d_model: encoding width E, >= 1.
        base: wavelength constant, > 1.

    Returns:
        ``(L, E)`` float64 tensor with values in [-1, 1].
    """
    position = torch.arange(seq_len, dtype=torch.float64)
    position = position.unsqueeze(1)  # (L, 1)
    # 2i for the ceil(E/2) pairs
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)
    # (L, ceil(E/2)), radians
    angle = position / base ** (pair / d_model)
    # the sines of every pair, then the first E // 2 cosines
    cosines = angle[:, : d_model // 2].cos()
    return torch.cat((angle.sin(), cosines), dim=1)  # (L, E)
