"""Coding exercise online-softmax: compute a softmax with its maximum and
normaliser found in one pass over blocks of a row, a running maximum and a
running sum.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/online_softmax.py``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tinyformer.models.flash import _finite_or_zero, online_softmax
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
from tinyformer_exercises.outcomes import ReadNotAllowed
from tinyformer_exercises.watched import blocked_row

EXERCISE = Exercise(
    id="online-softmax",
    functions=("online_softmax",),
    template="online_softmax.py",
    chapter="flash-attention",
    objective="compute a softmax with its maximum and normaliser found in one pass over blocks of a row, a running maximum and a running sum",
    references=("tinyformer.models.flash.online_softmax",),
)


SOFTMAX_READING = (
    "per block: m' = max(m, max of the block), l' = l exp(m - m') + sum exp(x - m') over the block; "
    "at the end exp(x - m) / l; start from m = -inf, l = 0, and read -inf - (-inf) as 0 (a row of -inf gives zeros)"
)


BLOCKS_MISTAKE = (
    "every max and sum must cover one block at most: a max, sum or softmax over the whole row is the "
    "softmax the online one replaces (the exercise checks how the row is read, not only the result)"
)


def _online_slip(x: Tensor, block_size: int, slip: str) -> Tensor:
    """The online softmax with one known slip, to name it when a student's
    result equals it."""
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype)
    s = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        block = x[..., start : start + block_size]
        new = torch.maximum(m, block.amax(-1))
        safe = _finite_or_zero(new)
        if slip == "no-rescale":
            s = s + torch.exp(block - safe[..., None]).sum(-1)
        m = new
    return torch.exp(x - _finite_or_zero(m)[..., None]) / s[..., None]


def _softmax_hints(got: object, x: Tensor, block_size: int) -> list[str]:
    lines = []
    if (
        not isinstance(got, Tensor)
        or not got.is_floating_point()
        or got.shape != x.shape
    ):
        return lines
    got = got.detach().cpu().to(torch.float64)
    dead = (x == -math.inf).all(
        dim=-1
    )  # rows of -inf: queries that may see no key
    broken = torch.isnan(got).any(dim=-1)
    if broken.any() and not torch.isnan(x).any():
        if dead.any() and torch.equal(broken, dead):
            lines.append(
                "your result is NaN in the rows of -inf, and only there: exp(-inf - (-inf)) is NaN; while a "
                "row's running maximum is -inf, subtract 0 instead, and give such a row zeros"
            )
        else:
            lines.append(
                "your result has NaN: an exp of a score overflowed, or an infinite factor met a zero "
                "(before the first block the running maximum is -inf)"
            )
    # the slip is named only where it changes the result: rows whose maximum grows after the first block
    live = ~dead
    slip = _online_slip(x, block_size, "no-rescale")[live]
    if not matches(
        slip, online_softmax(x, block_size=block_size)[live]
    ) and matches(got[live], slip):
        lines.append(
            "your running sum was not rescaled when the maximum grew"
        )
    return lines


@reseedable
def _softmax_check(
    shape: tuple[int, ...],
    block_size: int,
    note: str,
    *,
    seed: int,
    spread: float = 1.0,
    blocked_rows: tuple[int, ...] = (),
) -> Check:
    text = f"online_softmax(scores {shape}, block_size={block_size})"

    def run(f: Functions) -> None:
        x = seeded_randn(*shape, seed=seed) * spread
        for row in blocked_rows:
            x[row] = -math.inf
        want = online_softmax(x, block_size=block_size)
        try:
            # the row is watched: a max, sum or softmax over more than
            # block_size entries at once fails the check
            got = call(
                f["online_softmax"],
                text,
                blocked_row(x, block_size),
                block_size=block_size,
            )
        except ReadNotAllowed as failed:
            raise failed.adding(
                mistakes=[BLOCKS_MISTAKE], reading=SOFTMAX_READING
            ) from None
        try:
            compare_close("softmax", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}, scores of spread {spread:g}",
                *failed.lines,
                mistakes=_softmax_hints(got, x, block_size),
                reading=SOFTMAX_READING,
            ) from None

    return Check(f"{text}: {note}", run)


CHECKS = [
    _softmax_check((3, 8), 4, "two blocks of 4", seed=1),
    _softmax_check(
        (2, 3, 10), 3, "blocks of 3: the last one shorter", seed=2
    ),
    _softmax_check((4, 7), 1, "one entry at a time, as a stream", seed=3),
    _softmax_check((2, 5), 16, "one block longer than the row", seed=4),
    _softmax_check(
        (3, 12),
        4,
        "scores in the thousands, where exp(x) overflows",
        seed=5,
        spread=1000.0,
    ),
    _softmax_check(
        (3, 6),
        2,
        "a row of -inf (a query that may see no key) gives zeros",
        seed=6,
        blocked_rows=(1,),
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "the running sum not rescaled when the maximum grows",
        [("        norm = norm * torch.exp(m - safe)\n", "")],
        [
            "FAIL  1. online_softmax(scores (3, 8), block_size=4)",
            "your running sum was not rescaled when the maximum grew",
            "pass  4. online_softmax(scores (2, 5), block_size=16)",
        ],
    ),
    (
        "the rescaling factor inverted, exp(m' - m)",
        [("torch.exp(m - safe)", "torch.exp(safe - m)")],
        [
            "FAIL  1. online_softmax(scores (3, 8), block_size=4)",
            "got nan",
            "an infinite factor met a zero (before the first block the running maximum is -inf)",
        ],
    ),
    (
        "no guard for a row of -inf (not the rescaling's fault)",
        [
            (
                'safe = new_m.masked_fill(new_m == float("-inf"), 0.0)',
                "safe = new_m",
            )
        ],
        [
            "pass  1. online_softmax(scores (3, 8), block_size=4)",
            "FAIL  6. online_softmax(scores (3, 6), block_size=2)",
            "your result is NaN in the rows of -inf, and only there",
        ],
    ),
    (
        "the plain softmax, block_size unused",
        [
            (
                "    shape = scores.shape[:-1]\n",
                "    return torch.softmax(scores, dim=-1).nan_to_num(0.0)\n    shape = scores.shape[:-1]\n",
            )
        ],
        [
            "FAIL  1. online_softmax(scores (3, 8), block_size=4)",
            "your code called softmax() over 8 entries at once; read the row in blocks of at most 4 entries",
            "FAIL  3. online_softmax(scores (4, 7), block_size=1)",
            "your code called softmax() over 7 entries at once; read the row in blocks of at most 1 entry",
            "pass  4. online_softmax(scores (2, 5), block_size=16)",
            "every max and sum must cover one block at most",
        ],
    ),
    (
        "the row's maximum found before the blocks (two passes, not one)",
        [
            (
                "new_m = torch.maximum(m, block.amax(dim=-1))",
                "new_m = scores.amax(dim=-1)",
            )
        ],
        [
            "FAIL  1. online_softmax(scores (3, 8), block_size=4)",
            "your code called amax() over 8 entries at once; read the row in blocks of at most 4 entries",
            "pass  4. online_softmax(scores (2, 5), block_size=16)",
        ],
    ),
    (
        "the softmax returned in float32 for float64 scores",
        [
            (
                "    return torch.exp(scores - safe) / norm\n",
                "    return (torch.exp(scores - safe) / norm).float()\n",
            )
        ],
        [
            "FAIL  1. online_softmax(scores (3, 8), block_size=4)",
            "expected: softmax with dtype torch.float64",
            "got:      softmax with dtype torch.float32",
        ],
    ),
]
