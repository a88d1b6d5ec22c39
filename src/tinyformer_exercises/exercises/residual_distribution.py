"""Coding exercise residual-distribution: the distribution speculative
sampling redraws a rejected draft token from.

Its metadata (``EXERCISE``), its checks (``CHECKS``) and its wrong
solutions (``WRONG_SOLUTIONS``, which ``tests/test_exercises.py`` runs); the
reference solution, from which the template is written, is
``tests/exercise_solutions/residual_distribution.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.speculative import residual_distribution
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    require_floating,
    reseedable,
    seeded_randn,
)

EXERCISE = Exercise(
    id="residual-distribution",
    functions=("residual_distribution",),
    template="residual_distribution.py",
    chapter="serving-attention",
    objective=(
        "derive and compute the distribution a rejected draft token is redrawn from, so that speculative "
        "sampling keeps the model's distribution exactly"
    ),
    references=(
        "tinyformer.models.speculative.residual_distribution",
        "tinyformer.models.speculative.accept_drafts",
    ),
)

READING = (
    "a token comes out kept with probability min(p, q), or redrawn after a rejection, which happens with "
    "probability 1 - sum(min(p, q)); the residual must make the two add up to p, so it is max(0, p - q) "
    "divided by its sum"
)


def _distributions(
    shape: tuple[int, ...], seed: int
) -> tuple[Tensor, Tensor]:
    p = (2 * seeded_randn(*shape, seed=seed)).softmax(-1)
    q = (2 * seeded_randn(*shape, seed=seed + 1)).softmax(-1)
    return p, q


def _hints(got: object, p: Tensor, q: Tensor) -> list[str]:
    if (
        not isinstance(got, Tensor)
        or got.shape != p.shape
        or not got.dtype.is_floating_point
    ):
        return []
    got = got.detach().to(torch.float64)
    if bool(torch.isnan(got).any()):
        return [
            "NaN where p == q: max(0, p - q) is 0 everywhere there and 0 / 0 is NaN; nothing is ever "
            "rejected in such a row, so return p there"
        ]
    flipped = (q - p).clamp(min=0)
    flipped = flipped / flipped.sum(-1, keepdim=True)
    if torch.allclose(got, flipped, **FLOAT64_TOLERANCE):
        return [
            "your result is normalise(max(0, q - p)): the tokens the draft proposes too often; a rejected "
            "draft is replaced by the tokens the model wants more often than the draft gave them, p - q"
        ]
    sums = got.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), **FLOAT64_TOLERANCE):
        return [
            f"your rows sum to {float(sums.min()):.4g} ... {float(sums.max()):.4g}, not 1: divide max(0, p - q) "
            "by its sum over the last dimension"
        ]
    return []


def _residual(title: str, p: Tensor, q: Tensor) -> Check:
    text = f"residual_distribution(p {tuple(p.shape)}, q {tuple(q.shape)})"

    def run(f: Functions) -> None:
        want = residual_distribution(p, q)
        got = call(f["residual_distribution"], text, p.clone(), q.clone())
        try:
            compare_close("residual", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_hints(got, p, q),
                reading=READING,
            ) from None

    return Check(f"{text}: {title}", run)


@reseedable
def _theorem(shape: tuple[int, ...], seed: int) -> Check:
    title = (
        f"for p, q of shape {shape}: min(p, q) + (1 - sum(min(p, q))) * your residual equals p "
        "(the output distribution is the model's)"
    )

    def run(f: Functions) -> None:
        p, q = _distributions(shape, seed)
        text = f"residual_distribution(p {shape}, q {shape})"
        got = call(f["residual_distribution"], text, p.clone(), q.clone())
        residual = require_floating("residual", got, p.shape)
        kept = torch.minimum(p, q)
        output = kept + (
            1 - kept.sum(-1, keepdim=True)
        ) * residual.detach().to(torch.float64)
        try:
            compare_close(
                "output", output, p, **FLOAT64_TOLERANCE, dtype=None
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                "output = min(p, q) + (1 - sum(min(p, q))) * residual_distribution(p, q)",
                *failed.lines,
                mistakes=_hints(got, p, q),
                reading=READING,
            ) from None

    return Check(title, run)


def _equal_rows() -> tuple[Tensor, Tensor]:
    p, q = _distributions((3, 6), seed=7)
    q = q.clone()
    q[1] = p[1]  # row 1: the draft is the model
    return p, q


CHECKS = [
    _residual("one place, 5 tokens", *_distributions((5,), seed=1)),
    _residual(
        "a batch of 4 places, 7 tokens", *_distributions((4, 7), seed=3)
    ),
    _residual(
        "row 1 has q == p: nothing is left to redraw, the residual is p",
        *_equal_rows(),
    ),
    _theorem((2, 3, 9), seed=11),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "max(0, p - q) not normalised",
        [("excess / total, p)", "excess, p)")],
        [
            "FAIL  1. residual_distribution(p (5,), q (5,))",
            "not 1: divide max(0, p - q)",
            "FAIL  4.",
        ],
    ),
    (
        "no guard for p == q (0 / 0)",
        [("torch.where(total > 0, excess / total, p)", "excess / total")],
        [
            "pass  1.",
            "pass  2.",
            "FAIL  3. residual_distribution(p (3, 6), q (3, 6)): row 1 has q == p",
            "NaN where p == q",
        ],
    ),
    (
        "q - p instead of p - q",
        [("(p - q).clamp", "(q - p).clamp")],
        ["FAIL  1.", "your result is normalise(max(0, q - p))", "FAIL  4."],
    ),
]
