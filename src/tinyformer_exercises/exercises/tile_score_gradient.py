"""Coding exercise tile-score-gradient: compute the gradient of one tile's
scores in FlashAttention's backward from the tile's recomputed probabilities
and the rows' output and output gradient.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/tile_score_gradient.py``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

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
    id="tile-score-gradient",
    functions=("tile_score_gradient",),
    template="tile_score_gradient.py",
    chapter="flash-attention",
    objective="compute the gradient of one tile's scores in FlashAttention's backward from the tile's recomputed probabilities and the rows' output and output gradient",
    references=("tinyformer.models.flash._FlashAttention.backward",),
)


GRADIENT_READING = (
    "dS = P * (dP - delta) with delta = rowsum(dO * O) (the papers' D), one number per query row, from the "
    "whole row's output and its gradient: a tile sees only some of the keys, so rowsum(P * dP) over the "
    "tile is not delta"
)


def _gradient_hints(
    got: object, probs: Tensor, grad_probs: Tensor, want: Tensor
) -> list[str]:
    lines = []
    if matches(
        got,
        probs * (grad_probs - (probs * grad_probs).sum(-1, keepdim=True)),
    ):
        lines.append(
            "you computed delta from this tile alone, rowsum(P * dP) over its keys: that is delta only when "
            "the tile holds every key of the row"
        )
    if matches(got, probs * grad_probs):
        lines.append("you left out delta")
    if matches(got, -want):
        lines.append("your sign is reversed")
    return lines


@reseedable
def _gradient_check(
    seq_len_k: int, k_start: int, k_stop: int, note: str, *, seed: int
) -> Check:
    text = (
        f"tile_score_gradient for keys {k_start}:{k_stop} of {seq_len_k} "
        f"(probs (2, 4, {k_stop - k_start}), out (2, 4, 3))"
    )

    def run(f: Functions) -> None:
        query = seeded_randn(2, 4, 5, seed=seed)
        key = seeded_randn(2, seq_len_k, 5, seed=seed + 1)
        value = seeded_randn(2, seq_len_k, 3, seed=seed + 2)
        grad_out = seeded_randn(2, 4, 3, seed=seed + 3)
        scores = (
            query @ key.transpose(-2, -1) / math.sqrt(5)
        ).requires_grad_()
        out = torch.softmax(scores, dim=-1) @ value
        (grad_scores,) = torch.autograd.grad(out, scores, grad_out)  # exact
        with torch.no_grad():
            probs = torch.softmax(scores, dim=-1)[..., k_start:k_stop]
            grad_probs = grad_out @ value[:, k_start:k_stop].transpose(
                -2, -1
            )
            out = out.detach()
        want = grad_scores[..., k_start:k_stop]
        got = call(
            f["tile_score_gradient"],
            text,
            probs.clone(),
            grad_probs.clone(),
            out.clone(),
            grad_out.clone(),
        )
        try:
            compare_close("dS", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}; expected is autograd's gradient of the scores",
                *failed.lines,
                mistakes=_gradient_hints(got, probs, grad_probs, want),
                reading=GRADIENT_READING,
            ) from None

    return Check(f"{text}: {note}", run)


CHECKS = [
    _gradient_check(6, 0, 6, "one tile that holds every key", seed=1),
    _gradient_check(
        10, 3, 7, "keys 3 to 6 of 10: a tile in the middle", seed=2
    ),
    _gradient_check(9, 8, 9, "the last key alone", seed=3),
    _gradient_check(12, 0, 4, "the first of three tiles", seed=4),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "delta from the tile's own keys",
        [
            (
                "(grad_out * out).sum(dim=-1, keepdim=True)",
                "(probs * grad_probs).sum(dim=-1, keepdim=True)",
            )
        ],
        [
            "pass  1. tile_score_gradient for keys 0:6 of 6",
            "FAIL  2. tile_score_gradient for keys 3:7 of 10",
            "you computed delta from this tile alone",
        ],
    ),
    (
        "delta left out",
        [
            (
                "return probs * (grad_probs - delta)",
                "return probs * grad_probs",
            )
        ],
        [
            "FAIL  1. tile_score_gradient for keys 0:6 of 6",
            "you left out delta",
        ],
    ),
]
