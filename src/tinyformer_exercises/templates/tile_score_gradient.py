"""Coding exercise tile-score-gradient (chapter 8, "Attention without the
matrix: the online softmax and FlashAttention").

Objective assessed: compute the gradient of one tile's scores in
FlashAttention's backward from the tile's recomputed probabilities and the
rows' output and output gradient.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises tile-score-gradient tile_score_gradient.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- tile-score-gradient path/to/tile_score_gradient.py

Use only PyTorch; not ``tinyformer.models.flash``."""

import torch
from torch import Tensor


def tile_score_gradient(
    probs: Tensor, grad_probs: Tensor, out: Tensor, grad_out: Tensor
) -> Tensor:
    """dL/dS for one tile of the score matrix, S = Q K^T * scale.

    The tile covers some of the keys of a block of query rows: ``probs``
    are the attention weights P of those keys (recomputed from S and the
    rows' logsumexp), ``grad_probs`` = dO V^T over the same keys. ``out``
    (O) and ``grad_out`` (dO) are the rows' whole outputs and their
    gradients.

    Args:
        probs: ``(..., Bq, Bk)``.
        grad_probs: ``(..., Bq, Bk)``.
        out: ``(..., Bq, Dv)``.
        grad_out: ``(..., Bq, Dv)``.

    Returns:
        ``(..., Bq, Bk)`` the gradient of the loss with respect to the
        tile's scores.
    """
    raise NotImplementedError
