"""Coding exercise previous-token-score (chapter 9, "What attention learns:
induction heads").

Objective assessed: find a previous-token head from its attention weights
with the previous-token score.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises previous-token-score previous_token_score.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- previous-token-score path/to/previous_token_score.py

You may use torch (``Tensor.diagonal``, indexing, ``Tensor.mean``, ...),
but not tinyformer's own function."""

from torch import Tensor


def previous_token_score(weights: Tensor) -> Tensor:
    """Each head's mean attention from position ``t`` to ``t - 1``, over
    ``t = 1 .. L - 1`` and the batch (Olsson et al., 2022).

    Args:
        weights: ``(N, H, L, L)`` attention weights, ``L >= 2``; row ``t``
            holds query ``t``'s weights over the keys.

    Returns:
        ``(H,)`` scores in [0, 1]: 1 for a head that always attends to
        the token just before the query.
    """
    raise NotImplementedError
