"""Reference solution of coding exercise sinusoidal-encoding (chapter 2,
"Positional encoding").

Objective assessed: write down the sinusoidal encoding and compute
it for any width and base.

Write the body of the function below, then check it (offline, from
the book's repository):

    nox -s check -- sinusoidal-encoding sinusoidal_positional_encoding.py
"""

import math

import torch
from torch import Tensor


def sinusoidal_positional_encoding(
    seq_len: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d_model)), PE[pos, 2i+1] =
    cos(...) (Vaswani et al., 2017, Sec. 3.5).

    Sine and cosine are interleaved, as in the paper: column ``2i``
    holds the sine of pair ``i`` and column ``2i+1`` its cosine. An
    odd ``d_model`` is allowed: the same formula fills every column,
    so the last column is the sine of a pair whose cosine would fall
    outside the table.

    Args:
        seq_len: number of positions L (tokens), >= 0.
        d_model: encoding width E, >= 1.
        base: wavelength constant, > 1.

    Returns:
        ``(L, E)`` floating tensor with values in [-1, 1] (float32
        or float64).
    """
    position = torch.arange(seq_len, dtype=torch.float64)
    position = position.unsqueeze(1)  # (L, 1)
    # the even column indices 2i
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)
    # (L, ceil(E/2)), radians
    angle = position / base ** (pair / d_model)
    # (L, ceil(E/2), 2), then (L, 2*ceil(E/2)): sin, cos, sin, ...
    pairs = torch.stack((angle.sin(), angle.cos()), dim=-1)
    table = pairs.flatten(1)
    # (L, E): an odd width drops the last cosine
    return table[:, :d_model]
