"""Coding exercise online-softmax (chapter 8, "Attention without the matrix:
the online softmax and FlashAttention").

Objective assessed: compute a softmax with its maximum and normaliser
found in one pass over blocks of a row, a running maximum and a running
sum.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises online-softmax online_softmax.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- online-softmax path/to/online_softmax.py

Use only PyTorch; not ``tinyformer.models.flash``."""

import torch
from torch import Tensor


def online_softmax(scores: Tensor, block_size: int) -> Tensor:
    """softmax(scores) along the last dimension, reading the row in blocks
    of ``block_size`` entries (the last block may be shorter) and keeping
    only a running maximum ``m`` and a running sum ``l`` of ``exp(x - m)``
    per row; a second pass divides ``exp(x - m)`` by ``l``. No max, sum or
    softmax may cover more than ``block_size`` entries of a row at once: the
    checker watches how the row is read, not only the result.

    A row of ``-inf`` (a query that may see no key) gives zeros, not NaN.

    Args:
        scores: ``(..., S)`` float tensor.
        block_size: entries per block, >= 1.

    Returns:
        ``(..., S)`` tensor whose rows sum to 1 (0 for rows of ``-inf``).
    """
    raise NotImplementedError
