"""Coding exercise quantize (chapter 10, "Serving attention: a smaller cache
and fewer passes").

Objective assessed: quantise a cache's keys per channel and its values per
token with asymmetric min-max codes of a few bits.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises quantize quantize.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- quantize path/to/quantize.py

You may use torch (``Tensor.amin``, ``Tensor.round``, ``Tensor.clamp``,
``torch.where``, ...), but not tinyformer's own function."""

import torch
from torch import Tensor


def quantize(
    x: Tensor, dim: int, nbits: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Asymmetric min-max quantisation with one scale and one minimum per
    group, a group being the numbers of ``x`` along ``dim``.

    A number maps to ``round((x - minimum) / scale)`` with ``scale = (max -
    min) / (2^nbits - 1)`` over its group, and back to ``code * scale +
    minimum``. A constant group gets the scale 1.

    Args:
        x: a floating-point tensor.
        dim: the dimension a group runs along.
        nbits: bits per code, 2, 4 or 8.

    Returns:
        ``(codes, scale, minimum)``: ``codes`` torch.uint8 of ``x``'s shape,
        ``scale`` and ``minimum`` of ``x``'s shape and dtype with ``dim``
        of size 1.
    """
    raise NotImplementedError
