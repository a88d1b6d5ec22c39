"""Coding exercise induction-score: find an induction head from its
attention weights on repeated random tokens with the induction score.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/induction_score.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.labs.induction import induction_score
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
)
from tinyformer_exercises.exercises.previous_token_score import (
    causal_weights,
)

EXERCISE = Exercise(
    id="induction-score",
    functions=("induction_score",),
    template="induction_score.py",
    chapter="induction-heads",
    objective="find an induction head from its attention weights on repeated random tokens with the induction score",
    references=(
        "tinyformer.labs.induction.induction_score",
        "tinyformer.labs.induction.head_scores",
    ),
)

READING = (
    "rows are [BOS, x_1 .. x_n, x_1 .. x_n]: query n + j holds the second x_j, and its weight on key "
    "j + 1 (the token after the first x_j) counts, for j = 1 .. n - 1; score[h] is their mean over j and "
    "the batch"
)


def _stripe(weights: Tensor, n: int, query: range, shift: int) -> Tensor:
    """The mean over the batch and ``j`` in ``query`` of the weight of
    query ``n + j`` on key ``j + shift``: ``(H,)``."""
    j = torch.tensor(list(query))
    return weights[:, :, n + j, j + shift].mean(dim=(0, 2))


def _hints(got: object, weights: Tensor, n: int) -> list[str]:
    hints = []
    if matches(got, _stripe(weights, n, range(1, n), 0)):
        hints.append(
            "your head reads key j, the earlier occurrence of the current token itself; an induction head "
            "attends to the token after it, j + 1, whose value it copies"
        )
    for wrong in (range(n - 1), range(1, n + 1), range(n)):
        if matches(got, _stripe(weights, n, wrong, 1)):
            hints.append(
                f"you averaged over j = {wrong.start} .. {wrong.stop - 1}; the queries with an earlier "
                f"occurrence and a token after it are j = 1 .. n - 1 (positions n + 1 .. 2n - 1)"
            )
    return hints


@reseedable
def _score(
    title: str, batch_size: int, num_heads: int, n: int, seed: int
) -> Check:
    def run(f: Functions) -> None:
        weights = causal_weights(
            batch_size, num_heads, 2 * n + 1, seed=seed
        )
        text = f"induction_score(weights {tuple(weights.shape)}, n={n})"
        got = call(f["induction_score"], text, weights.clone(), n)
        try:
            compare_close(
                "score",
                got,
                induction_score(weights, n),
                **FLOAT64_TOLERANCE,
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}, random causal weights",
                *failed.lines,
                mistakes=_hints(got, weights, n),
                reading=READING,
            ) from None

    return Check(title, run)


def _perfect() -> Check:
    def run(f: Functions) -> None:
        n = 5
        size = 2 * n + 1
        weights = torch.zeros(1, 2, size, size, dtype=torch.float64)
        weights[0, :, 0, 0] = 1.0
        for t in range(1, size):
            weights[0, 0, t, t - 1] = 1.0  # head 0: the previous token
            weights[0, 1, t, t - 1] = 1.0  # head 1 too, but ...
        for j in range(1, n):
            weights[0, 1, n + j] = 0.0  # ... the second copy looks back
            weights[0, 1, n + j, j + 1] = 1.0
        text = "induction_score(weights (1, 2, 11, 11), n=5)"
        got = call(f["induction_score"], text, weights.clone(), n)
        want = torch.tensor([0.0, 1.0], dtype=torch.float64)
        try:
            compare_close("score", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}; head 0 attends to the previous token, head 1 is a perfect induction head",
                *failed.lines,
                mistakes=_hints(got, weights, n),
                reading=READING,
            ) from None

    return Check(
        "a perfect induction head scores 1, a previous-token head 0", run
    )


CHECKS = [
    _perfect(),
    _score(
        "random causal weights: 2 rows, 3 heads, n = 4", 2, 3, 4, seed=1
    ),
    _score("the shortest copies, n = 2, a batch of one", 1, 2, 2, seed=2),
    _score("3 rows, 2 heads, n = 9", 3, 2, 9, seed=3),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "the earlier occurrence itself (key j) instead of the token after it",
        [("weights[:, :, n + j, j + 1]", "weights[:, :, n + j, j]")],
        [
            "FAIL  1. a perfect induction head",
            "your head reads key j, the earlier occurrence",
        ],
    ),
    (
        "j from 1 to n (the last query has no token after its first occurrence in the first copy)",
        [("torch.arange(1, n)", "torch.arange(1, n + 1)")],
        ["FAIL  1.", "you averaged over j = 1 .. 5"],
    ),
]
