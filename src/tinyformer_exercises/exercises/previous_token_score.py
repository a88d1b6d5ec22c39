"""Coding exercise previous-token-score: find a previous-token head from
its attention weights with the previous-token score.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/previous_token_score.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.labs.induction import previous_token_score
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
    reseedable,
    seeded_randn,
)

EXERCISE = Exercise(
    id="previous-token-score",
    functions=("previous_token_score",),
    template="previous_token_score.py",
    chapter="induction-heads",
    objective="find a previous-token head from its attention weights with the previous-token score",
    references=(
        "tinyformer.labs.induction.previous_token_score",
        "tinyformer.labs.induction.head_scores",
    ),
)

READING = (
    "score[h] is the mean of weights[b, h, t, t - 1] over t = 1 .. L - 1 and every row b: query t's "
    "weight on the key just before it"
)


def causal_weights(
    batch_size: int, num_heads: int, seq_len: int, *, seed: int
) -> Tensor:
    """Random float64 causal attention weights ``(N, H, L, L)``: softmax
    rows over the keys each query may see, heads of different sharpness."""
    scores = seeded_randn(
        batch_size, num_heads, seq_len, seq_len, seed=seed
    )
    sharpness = torch.arange(1, num_heads + 1, dtype=torch.float64)
    scores = scores * sharpness[:, None, None]
    future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1)


def _hints(got: object, weights: Tensor) -> list[str]:
    length = weights.size(-1)
    below = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (N, H, L-1)
    hints = []
    if matches(got, below.sum(dim=-1).mean(dim=0) / length):
        hints.append(
            "your mean counts query 0, which has no previous token: average over the L - 1 queries "
            "t = 1 .. L - 1"
        )
    if matches(got, below.mean(dim=-1)):
        hints.append(
            "you averaged over the positions but not over the rows of the batch: the score is one "
            "number per head, (H,)"
        )
    above = weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(dim=(0, 2))
    if matches(got, above):
        hints.append(
            "you read weights[b, h, t, t + 1], the key after the query (the diagonal above the main one), "
            "which a causal head never attends to"
        )
    if matches(got, weights.diagonal(dim1=-2, dim2=-1).mean(dim=(0, 2))):
        hints.append(
            "you read the main diagonal, each query's weight on itself, not on the token before it"
        )
    return hints


@reseedable
def _score(
    title: str, batch_size: int, num_heads: int, seq_len: int, seed: int
) -> Check:
    def run(f: Functions) -> None:
        weights = causal_weights(batch_size, num_heads, seq_len, seed=seed)
        text = f"previous_token_score(weights {tuple(weights.shape)})"
        got = call(f["previous_token_score"], text, weights.clone())
        try:
            compare_close(
                "score",
                got,
                previous_token_score(weights),
                **FLOAT64_TOLERANCE,
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}, random causal weights",
                *failed.lines,
                mistakes=_hints(got, weights),
                reading=READING,
            ) from None

    return Check(title, run)


def _perfect() -> Check:
    def run(f: Functions) -> None:
        seq_len = 6
        # query t attends to t - 1 only; query 0 to itself
        weights = torch.zeros(1, 2, seq_len, seq_len, dtype=torch.float64)
        weights[0, 0, 0, 0] = 1.0
        weights[0, 0, 1:, :-1] = torch.eye(seq_len - 1, dtype=torch.float64)
        weights[0, 1] = torch.eye(seq_len, dtype=torch.float64)
        text = "previous_token_score(weights (1, 2, 6, 6))"
        got = call(f["previous_token_score"], text, weights.clone())
        want = torch.tensor([1.0, 0.0], dtype=torch.float64)
        try:
            compare_close("score", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}; head 0 attends to the previous token only, head 1 to itself only",
                *failed.lines,
                mistakes=_hints(got, weights),
                reading=READING,
            ) from None

    return Check(
        "a perfect previous-token head scores 1, a head that attends to itself 0",
        run,
    )


CHECKS = [
    _perfect(),
    _score(
        "random causal weights: 2 rows, 3 heads, L = 7", 2, 3, 7, seed=1
    ),
    _score("the shortest rows, L = 2, a batch of one", 1, 2, 2, seed=2),
    _score(
        "4 rows, 4 heads of different sharpness, L = 12", 4, 4, 12, seed=3
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "query 0 counted: the sum over t divided by L",
        [
            (
                "return stripe.mean(dim=(0, 2))",
                "return stripe.sum(dim=2).mean(dim=0) / weights.size(-1)",
            )
        ],
        [
            "FAIL  1. a perfect previous-token head",
            "your mean counts query 0",
        ],
    ),
    (
        "the diagonal above the main one (key t + 1)",
        [("offset=-1", "offset=1")],
        ["FAIL  1.", "weights[b, h, t, t + 1], the key after the query"],
    ),
]
