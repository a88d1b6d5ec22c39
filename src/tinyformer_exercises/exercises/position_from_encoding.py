"""Coding exercise position-from-encoding: read positions back from their
sinusoidal encodings, the slow pairs giving the range and the fast pairs
the precision.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/position_from_encoding.py``.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from tinyformer.models.positional import sinusoidal_positional_encoding
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FRESH_CASES,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    describe,
)

EXERCISE = Exercise(
    id="position-from-encoding",
    functions=("position_from_encoding",),
    template="position_from_encoding.py",
    chapter="positional-encoding",
    objective="read positions back from their sinusoidal encodings, the slow pairs giving the range and the fast pairs the precision",
    references=("tinyformer.models.positional.position_from_encoding",),
)

READING = (
    "pair i of a row is (sin, cos) of pos * w_i with w_i = base^(-2i/d_model): atan2 gives pos * w_i up to whole "
    "turns; the slowest pair has not turned half a turn (so it gives pos, coarsely), and each faster pair keeps "
    "the whole turns the estimate so far implies and adds its own, finer, fraction of a turn"
)

FASTEST_ONLY = (
    "every position you returned is below 2 pi: the fastest pair (one radian a token) comes round every 6.28 "
    "tokens, so it cannot say which turn it is on; the slower pairs can"
)

SLOWEST_ONLY = (
    "your positions are right on the exact table but off by many tokens once the entries carry a small error: "
    "the slowest pair has the range but turns only {speed:.1e} radians a token, so an error of 0.01 radian in its "
    "angle is {error:.0f} tokens; refine the estimate with each faster pair"
)

OFF_BY_ONE = (
    "every position you returned is at most one token off: round the estimate to the nearest whole token "
    "(.to(torch.int64) truncates 4.9999999 to 4)"
)


def _table(
    positions: Tensor, d_model: int, base: float, dtype: torch.dtype
) -> Tensor:
    """The rows of the interleaved table for ``positions``, in ``dtype``."""
    longest = int(positions.max()) + 1 if positions.numel() else 0
    table = sinusoidal_positional_encoding(
        longest, d_model, base=base, dtype=torch.float64
    )
    return table[positions].to(dtype)  # (N, E)


def _positions(
    title: str,
    positions: Tensor,
    d_model: int,
    *,
    base: float = 10000.0,
    error: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> Check:
    def run(f: Functions) -> None:
        rows = _table(positions, d_model, base, dtype)
        if error:
            noise = torch.rand(
                rows.shape,
                generator=torch.Generator().manual_seed(11),
                dtype=torch.float64,
            )
            rows = rows + (2 * noise - 1).to(dtype) * error
        text = (
            f"position_from_encoding(encoding{f', base={base:g}' if base != 10000.0 else ''}), "
            f"encoding the {describe(rows)} rows of positions {_summary(positions)}"
            + (f", every entry moved by up to {error:g}" if error else "")
        )
        got = call(f["position_from_encoding"], text, rows, base=base)
        _compare(
            got, positions, text, d_model=d_model, base=base, error=error
        )

    return Check(title, run)


def _summary(positions: Tensor) -> str:
    shown = ", ".join(str(int(p)) for p in positions[:4])
    more = ", ..." if len(positions) > 4 else ""
    return f"{shown}{more} ({len(positions)} of them, largest {int(positions.max())})"


def _compare(
    got: object,
    want: Tensor,
    text: str,
    *,
    d_model: int,
    base: float,
    error: float,
) -> None:
    n = len(want)
    if not isinstance(got, Tensor) or tuple(got.shape) != (n,):
        raise CheckFailed(
            f"input: {text}",
            f"expected: the positions as a ({n},) torch.int64 tensor",
            f"got:      {describe(got)}",
            reading=READING,
        )
    if got.dtype != torch.int64:
        raise CheckFailed(
            f"input: {text}",
            f"expected: the positions as a ({n},) torch.int64 tensor",
            f"got:      {describe(got)}",
            "positions are whole numbers: round the estimate and return it as int64 (.round().to(torch.int64))",
            reading=READING,
        )
    got = got.detach().cpu()
    wrong = got != want
    if not wrong.any():
        return
    row = int(wrong.nonzero()[0])
    gap = (got - want).abs()
    mistakes = []
    if int(want.max()) > 6 and int(got.max()) <= 6:
        mistakes.append(FASTEST_ONLY)
    elif int(gap.max()) <= 1:
        mistakes.append(OFF_BY_ONE)
    elif error and int(gap.max()) > 5:
        slowest = base ** (-(d_model - 2) / d_model)
        mistakes.append(
            SLOWEST_ONLY.format(speed=slowest, error=0.01 / slowest)
        )
    raise CheckFailed(
        f"input: {text}",
        f"expected: positions {_summary(want)}",
        f"got:      {int(wrong.sum())} of the {n} positions different, the largest difference {int(gap.max())} tokens",
        f"first differing row: {row}: expected position {int(want[row])}, got {int(got[row])}",
        mistakes=mistakes,
        reading=READING,
    )


def _drawn(count: int, high: int, seed: int) -> Tensor:
    """``count`` positions drawn uniformly from ``0 .. high - 1``."""
    return torch.randint(
        high, (count,), generator=torch.Generator().manual_seed(seed)
    )


# Half the slowest pair's wavelength, pi * base^((E-2)/E): 99.3 tokens for
# E = 8 and base 100; about 23,560 for E = 64 and base 10000.


def fresh_checks(rng: random.Random) -> list[Check]:
    """Positions drawn anew at every run (checker.checks.fresh_checks);
    d_model = 64, whose slowest pair turns once in 47,000 tokens, so that
    every position up to 19,999 can be read back."""
    drawn = []
    for _ in range(FRESH_CASES):
        count = rng.randint(20, 300)
        positions = _drawn(count, 20_000, seed=rng.randrange(1_000, 2**31))
        title = f"{count} positions drawn from 0 to 19,999, d_model = 64"
        drawn.append(_positions(title, positions, 64))
    return as_fresh(drawn)


CHECKS = [
    _positions(
        "positions 0 to 49, d_model = 16, the exact table",
        torch.arange(50),
        16,
    ),
    _positions(
        "positions 0 to 99, d_model = 8, base 100: up to half the slowest wavelength, 99.3 tokens",
        torch.arange(100),
        8,
        base=100.0,
    ),
    _positions(
        "200 positions drawn from 0 to 19,999, d_model = 64",
        _drawn(200, 20_000, seed=5),
        64,
    ),
    _positions(
        "the same 200 positions, every entry moved by up to 0.02",
        _drawn(200, 20_000, seed=5),
        64,
        error=0.02,
    ),
    _positions(
        "500 positions drawn from 0 to 19,999, float32 rows",
        _drawn(500, 20_000, seed=6),
        64,
        dtype=torch.float32,
    ),
    _positions(
        "positions 0 to 3, d_model = 2: a single pair, which repeats every 2 pi tokens",
        torch.arange(4),
        2,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "the slowest pair read alone, without the faster pairs' refinement",
        [
            (
                "for i in range(d_model // 2 - 2, -1, -1):",
                "for i in range(0):",
            )
        ],
        [
            "pass  1.",
            "pass  3.",
            "FAIL  4. the same 200 positions, every entry moved by up to 0.02",
            "the slowest pair has the range but turns only 1.3e-04 radians a token",
        ],
    ),
    (
        "the fastest pair read alone",
        [
            (
                "estimate = angle[:, -1] / speed[-1]  # (N,), tokens",
                "estimate = torch.remainder(angle[:, 0], 2 * math.pi)",
            ),
            (
                "for i in range(d_model // 2 - 2, -1, -1):",
                "for i in range(0):",
            ),
        ],
        [
            "FAIL  1. positions 0 to 49",
            "first differing row: 7: expected position 7, got 1",
            "the fastest pair (one radian a token) comes round every 6.28",
        ],
    ),
    (
        "the estimate truncated to an int instead of rounded",
        [
            (
                "return torch.round(estimate).to(torch.int64)",
                "return estimate.to(torch.int64)",
            )
        ],
        ["FAIL  1.", "at most one token off"],
    ),
    (
        "the positions returned as floats",
        [
            (
                "return torch.round(estimate).to(torch.int64)",
                "return torch.round(estimate)",
            )
        ],
        ["FAIL  1.", "return it as int64"],
    ),
]
