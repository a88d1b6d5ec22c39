"""Coding exercise relative-shift-matrix (chapter 2, "Positional encoding").

Objective assessed: build the rotation R_k that shifts every sinusoidal
encoding by k positions.

Write the body of the function below, then check it, offline: from a
clone of the book's repository, giving the path of this file,

    nox -s check -- relative-shift-matrix path/to/relative_shift_matrix.py

or from this file's folder, in an environment with tinyformer installed,

    python -m tinyformer.exercises relative-shift-matrix relative_shift_matrix.py
"""

import math

import torch
from torch import Tensor


def relative_shift_matrix(
    offset: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """The fixed linear map ``R_k`` with ``PE[pos + k] = R_k @ PE[pos]`` for
    every pos (Vaswani et al., 2017, Sec. 3.5).

    For pair ``i`` with angular frequency ``w_i = base^(-2i/d_model)``, the
    angle-addition identities give
    ``sin(w(p+k)) = cos(wk) sin(wp) + sin(wk) cos(wp)`` and
    ``cos(w(p+k)) = -sin(wk) sin(wp) + cos(wk) cos(wp)``: a rotation by
    ``w_i k`` radians that does not depend on ``p``. ``R_k`` is block
    diagonal with one such 2x2 block per pair, in rows and columns ``2i``
    (the sine) and ``2i+1`` (the cosine). ``R_k`` acts on column vectors;
    to shift every row of a table ``(L, E)`` at once, use
    ``table @ R_k.T``.

    Args:
        offset: the shift k in tokens (any int, negative allowed).
        d_model: encoding width E, a positive even int.
        base: wavelength constant, > 1.

    Returns:
        float64 ``(E, E)`` orthogonal matrix.
    """
    raise NotImplementedError
