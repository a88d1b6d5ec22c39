"""Coding exercise position-from-encoding (chapter 2, "Positional encoding").

Objective assessed: read positions back from their sinusoidal encodings,
the slow pairs giving the range and the fast pairs the precision.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises position-from-encoding position_from_encoding.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- position-from-encoding path/to/position_from_encoding.py

Calling the library's ``position_from_encoding`` is refused by the checker:
read the positions yourself.
"""

import math

import torch
from torch import Tensor


def position_from_encoding(
    encoding: Tensor, *, base: float = 10000.0
) -> Tensor:
    """The positions whose sinusoidal encodings are the rows of ``encoding``.

    Each row is a row of the paper's interleaved table (chapter 2's
    ``sinusoidal_positional_encoding``): column ``2i`` holds
    ``sin(pos * w_i)`` and column ``2i + 1`` holds ``cos(pos * w_i)``, with
    ``w_i = base^(-2i/d_model)``, possibly with every entry moved by a small
    error (up to 0.02). The positions are whole numbers with
    ``0 <= pos < pi * base^((E-2)/E)``, half the slowest pair's wavelength.

    Args:
        encoding: ``(N, E)`` floating tensor, ``E`` even, >= 2.
        base: wavelength constant the table was made with, > 1.

    Returns:
        ``(N,)`` int64 tensor of positions.
    """
    raise NotImplementedError
