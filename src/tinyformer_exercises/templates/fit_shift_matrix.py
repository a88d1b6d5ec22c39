"""Coding exercise fit-shift-matrix (chapter 2, "Positional encoding").

Objective assessed: find the rotation R_k that shifts every sinusoidal
encoding by k positions, from the table alone.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises fit-shift-matrix fit_shift_matrix.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- fit-shift-matrix path/to/fit_shift_matrix.py

Calling the library's ``fit_shift_matrix`` or ``relative_shift_matrix`` is
refused by the checker: fit the matrix yourself.
"""

import torch
from torch import Tensor


def fit_shift_matrix(table: Tensor, offset: int) -> Tensor:
    """The matrix ``M`` with ``table[pos + offset] ~ M @ table[pos]`` for
    every pair of rows ``offset`` apart, fitted by least squares.

    The function is not told how the table was made (its base, its layout,
    whether it is a sinusoidal table at all): it finds the map from the rows.

    Args:
        table: ``(L, E)`` float64 tensor, one row per position.
        offset: the shift k in positions, any int with enough rows left
            (``L - |k| >= E``); a negative k shifts back.

    Returns:
        float64 ``(E, E)`` matrix.
    """
    raise NotImplementedError
