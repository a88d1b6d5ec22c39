"""Coding exercise residual-distribution (chapter 10, "Serving attention: a
smaller cache and fewer passes").

Objective assessed: derive and compute the distribution a rejected draft
token is redrawn from, so that speculative sampling keeps the model's
distribution exactly.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises residual-distribution residual_distribution.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- residual-distribution path/to/residual_distribution.py

You may use torch (``Tensor.clamp``, ``Tensor.sum``, ``torch.where``, ...),
but not tinyformer's own function."""

import torch
from torch import Tensor


def residual_distribution(p: Tensor, q: Tensor) -> Tensor:
    """The distribution a rejected draft token is redrawn from:
    ``max(0, p - q)`` normalised to sum to 1 over the last dimension.

    Where nothing is left (``p <= q`` everywhere, so ``p == q``) no draft
    is ever rejected; return ``p`` there, never NaN.

    Args:
        p: ``(..., V)`` the model's probabilities.
        q: ``(..., V)`` the draft's probabilities, same shape and dtype.

    Returns:
        ``(..., V)`` probabilities, the dtype of ``p``.
    """
    raise NotImplementedError
