"""Coding exercise split-half-shift.

Objective assessed: build the rotation R_k that shifts every sinusoidal
encoding by k positions.

Write the body of the function below, then check it, offline: from a
clone of the book's repository, giving the path of this file,

    nox -s check -- split-half-shift path/to/split_half_shift_matrix.py

or from this file's folder, in an environment with tinyformer installed,

    python -m tinyformer_exercises split-half-shift split_half_shift_matrix.py

Calling the library's ``relative_shift_matrix`` is refused by the
checker: build the matrix yourself.
"""

import math

import torch
from torch import Tensor


def split_half_shift_matrix(
    offset: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """The fixed linear map ``R_k`` with ``PE[pos + k] = R_k @ PE[pos]`` for
    every pos, for the split-half table (the previous exercise): column
    ``i`` of the table is the sine of pair ``i`` and column ``E/2 + i`` its
    cosine, with the speed ``w_i = base^(-2i/d_model)``.

    Args:
        offset: the shift k in tokens (any int, negative allowed).
        d_model: encoding width E, a positive even int.
        base: wavelength constant, > 1.

    Returns:
        float64 ``(E, E)`` matrix.
    """
    # BEGIN SOLUTION
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
    # END SOLUTION
