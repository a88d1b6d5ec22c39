"""Reference solution of coding exercise split-half-shift (chapter 2,
"Positional encoding").

Objective assessed: build the rotation R_k that shifts every
sinusoidal encoding by k positions.

Write the body of the function below, then check it (offline, from
the book's repository):

    nox -s check -- split-half-shift split_half_shift_matrix.py
"""

import math

import torch
from torch import Tensor


def split_half_shift_matrix(
    offset: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """``R_k`` with ``PE[pos + k] = R_k @ PE[pos]`` for the
    split-half table, from the angle-addition identities
    ``sin(w(p+k)) = cos(wk) sin(wp) + sin(wk) cos(wp)`` and
    ``cos(w(p+k)) = -sin(wk) sin(wp) + cos(wk) cos(wp)``
    of each pair, whose sine is row and column ``i`` and
    cosine ``E/2 + i``.

    Args:
        offset: the shift k in tokens (any int, negative allowed).
        d_model: encoding width E, a positive even int.
        base: wavelength constant, > 1.

    Returns:
        float64 ``(E, E)`` orthogonal matrix.
    """
    # 2i for the E/2 pairs
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)
    # (E/2,): w_i * k, radians
    angle = offset / base ** (pair / d_model)
    cos, sin = angle.cos(), angle.sin()
    # row and column i: pair i's sine; E/2 + i: its cosine
    sine = torch.arange(d_model // 2)
    cosine = sine + d_model // 2
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    rotation[sine, sine] = cos  # new sine = cos(wk) * sine ...
    rotation[sine, cosine] = sin  # ... + sin(wk) * cosine
    # new cosine = -sin(wk) * sine ...
    rotation[cosine, sine] = -sin
    rotation[cosine, cosine] = cos  # ... + cos(wk) * cosine
    return rotation  # (E, E)
