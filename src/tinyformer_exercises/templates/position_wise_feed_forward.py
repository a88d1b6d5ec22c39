"""Coding exercise feed-forward (chapter 4, "A miniature Transformer from
scratch").

Objective assessed: write the position-wise feed-forward network from its
two linear layers.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises feed-forward position_wise_feed_forward.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- feed-forward path/to/position_wise_feed_forward.py

Calling ``ffn(x)`` itself is refused by the checker: compute it from the
weights."""

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.models.encoder import PositionwiseFeedForward


def position_wise_feed_forward(
    ffn: PositionwiseFeedForward, x: Tensor
) -> Tensor:
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position
    alone (Vaswani et al., 2017, Sec. 3.3).

    Use the weights of ``ffn``: ``ffn.linear1`` is
    ``nn.Linear(d_model, d_ff)`` (W_1, b_1), ``ffn.linear2`` is
    ``nn.Linear(d_ff, d_model)`` (W_2, b_2), and ``ffn.activation`` is
    ``"relu"`` (the paper's) or ``"gelu"``. An ``nn.Linear`` stores its
    matrix transposed: ``linear(x) == x @ linear.weight.T + linear.bias``.
    Ignore dropout (the checker uses none).

    Args:
        ffn: the network whose weights to use.
        x: ``(..., E)`` input.

    Returns:
        ``(..., E)`` output; positions never mix.
    """
    raise NotImplementedError
