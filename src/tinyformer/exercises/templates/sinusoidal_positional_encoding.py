"""Coding exercise sinusoidal-encoding (chapter 2, "Positional encoding").

Objective assessed: write down the sinusoidal encoding and compute it for
any width and base.

Write the body of the function below, then check it, offline: from a
clone of the book's repository, giving the path of this file,

    nox -s check -- sinusoidal-encoding path/to/sinusoidal_positional_encoding.py

or from this file's folder, in an environment with tinyformer installed,

    python -m tinyformer.exercises sinusoidal-encoding sinusoidal_positional_encoding.py
"""

import math

import torch
from torch import Tensor


def sinusoidal_positional_encoding(
    seq_len: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d_model)), PE[pos, 2i+1] = cos(...)
    (Vaswani et al., 2017, Sec. 3.5).

    Sine and cosine are interleaved, as in the paper: column ``2i`` holds
    the sine of pair ``i`` and column ``2i+1`` its cosine. An odd
    ``d_model`` is allowed: the same formula fills every column, so the last
    column is the sine of a pair whose cosine would fall outside the table.

    Args:
        seq_len: number of positions L (tokens), >= 0.
        d_model: encoding width E, >= 1.
        base: wavelength constant, > 1.

    Returns:
        ``(L, E)`` floating tensor with values in [-1, 1] (float32 or
        float64).
    """
    raise NotImplementedError
