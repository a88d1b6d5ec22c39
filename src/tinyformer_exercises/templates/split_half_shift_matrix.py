"""Coding exercise split-half-shift (chapter 2, "Positional encoding").

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
    raise NotImplementedError
