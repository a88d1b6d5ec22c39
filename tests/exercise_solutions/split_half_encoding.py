"""Coding exercise split-half-encoding.

Objective assessed: write down the sinusoidal encoding and compute it for
any width and base.

Write the body of the function below, then check it, offline: from a
clone of the book's repository, giving the path of this file,

    nox -s check -- split-half-encoding path/to/split_half_encoding.py

or from this file's folder, in an environment with tinyformer installed,

    python -m tinyformer_exercises split-half-encoding split_half_encoding.py

Calling the library's ``sinusoidal_positional_encoding`` is refused by the
checker: compute the table yourself.
"""

import math

import torch
from torch import Tensor


def split_half_encoding(
    seq_len: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """The sinusoidal encoding of Vaswani et al. (2017, Sec. 3.5) in the
    split-half layout: the sines of all pairs first, then their cosines.

    With ``w_i = base^(-2i/d_model)``, the speed of pair ``i`` (the paper's
    speeds), column ``i`` holds ``sin(pos * w_i)`` for the ``ceil(E/2)``
    pairs ``i = 0, 1, ...``, and column ``ceil(E/2) + i`` holds
    ``cos(pos * w_i)`` for ``i < E // 2``. An odd ``d_model`` has one more
    sine than cosines. (Hugging Face's Marian models store their table this
    way; the paper and chapter 2's listing interleave the two.)

    Args:
        seq_len: number of positions L (tokens), >= 0.
        d_model: encoding width E, >= 1.
        base: wavelength constant, > 1.

    Returns:
        ``(L, E)`` floating tensor with values in [-1, 1] (float32 or
        float64).
    """
    # BEGIN SOLUTION
    position = torch.arange(seq_len, dtype=torch.float64)
    position = position.unsqueeze(1)  # (L, 1)
    # 2i for the ceil(E/2) pairs
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)
    # (L, ceil(E/2)), radians
    angle = position / base ** (pair / d_model)
    # the sines of every pair, then the first E // 2 cosines
    cosines = angle[:, : d_model // 2].cos()
    return torch.cat((angle.sin(), cosines), dim=1)  # (L, E)
    # END SOLUTION
