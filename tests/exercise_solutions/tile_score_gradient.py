"""Reference solution of coding exercise tile-score-gradient (chapter 8,
"Attention without the matrix: the online softmax and FlashAttention").

Objective assessed: compute the gradient of one tile's scores in
FlashAttention's backward from the tile's recomputed probabilities
and the rows' output and output gradient."""

from torch import Tensor


def tile_score_gradient(
    probs: Tensor, grad_probs: Tensor, out: Tensor, grad_out: Tensor
) -> Tensor:
    """dL/dS for one tile: P * (dP - delta)."""
    # one number per query row, from the whole row: (..., Bq, 1)
    delta = (grad_out * out).sum(dim=-1, keepdim=True)
    return probs * (grad_probs - delta)
