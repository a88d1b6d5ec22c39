"""Coding exercise fit-shift-matrix: find the rotation R_k that shifts every
sinusoidal encoding by k positions, from the table alone.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/fit_shift_matrix.py``.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from tinyformer.models.positional import (
    relative_shift_matrix,
    sinusoidal_positional_encoding,
)
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    compare_close,
    matches,
)

EXERCISE = Exercise(
    id="fit-shift-matrix",
    functions=("fit_shift_matrix",),
    template="fit_shift_matrix.py",
    chapter="positional-encoding",
    objective="find the rotation R_k that shifts every sinusoidal encoding by k positions, from the table alone",
    references=(
        "tinyformer.models.positional.fit_shift_matrix",
        "tinyformer.models.positional.relative_shift_matrix",
    ),
    variant_of=("tinyformer.models.positional.relative_shift_matrix",),
    variant_differs=(
        "the chapter lists relative_shift_matrix, which builds R_k from the angle-addition identities and "
        "the encoding's base; the exercise finds the map from the table alone, by least squares, told "
        "neither the base nor the layout"
    ),
)

READING = (
    "M takes each row to the row k further on, table[pos + k] ~ M @ table[pos]; stacked as rows, "
    "table[pos + k] ~ table[pos] @ M.T, a least-squares problem for M.T; for a sinusoidal table with enough "
    "rows the answer is R_k (block diagonal for the paper's layout, one 2x2 rotation per pair)"
)

TRANSPOSED = (
    "your matrix is the transpose of M, R_-k: torch.linalg.lstsq(A, B) solves A @ X ~ B, and with the rows "
    "of the table stacked, X is M.T"
)

REVERSED = "your matrix maps each row to the row k earlier (R_-k): table[pos + k] is the target, table[pos] the input"


def _split_half(d_model: int) -> Tensor:
    """The split-half layout's column order: the sines, then the cosines."""
    return torch.cat(
        (torch.arange(0, d_model, 2), torch.arange(1, d_model, 2))
    )


def _rotation(d_model: int, seed: int) -> Tensor:
    """A random ``(E, E)`` orthogonal matrix (float64)."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(
        torch.randn(d_model, d_model, generator=g, dtype=torch.float64)
    )
    return q


def _fit(
    title: str,
    seq_len: int,
    d_model: int,
    offset: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
) -> Check:
    """Fit on ``seq_len`` rows of a table; ``layout`` is ``interleaved``
    (the paper's), ``split-half`` (the sines first) or ``rotated`` (every
    row times a fixed random orthogonal matrix ``Q``)."""

    def run(f: Functions) -> None:
        table = sinusoidal_positional_encoding(
            seq_len, d_model, base=base, dtype=torch.float64
        )
        want = relative_shift_matrix(offset, d_model, base=base)
        if layout == "split-half":
            order = _split_half(d_model)
            table, want = table[:, order], want[order][:, order]
        elif layout == "rotated":
            q = _rotation(d_model, seed=3)
            table, want = table @ q.T, q @ want @ q.T
        described = {
            "interleaved": "the paper's table",
            "split-half": "the table with its sines first, then its cosines",
            "rotated": "the paper's table times a random orthogonal matrix Q (rows table @ Q.T)",
        }[layout]
        text = (
            f"fit_shift_matrix(table, {offset}), table ({seq_len}, {d_model}) float64: {described}, "
            f"base {base:g}"
        )
        got = call(f["fit_shift_matrix"], text, table, offset)
        try:
            compare_close("M", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            reverse = (
                relative_shift_matrix(-offset, d_model, base=base)
                if layout == "interleaved"
                else None
            )
            mistakes = []
            if reverse is not None and offset and matches(got, reverse):
                mistakes.append(
                    TRANSPOSED if matches(got, want.T) else REVERSED
                )
            raise CheckFailed(
                f"input: {text}",
                f"expected: M with M @ table[pos] == table[pos {'-' if offset < 0 else '+'} {abs(offset)}] for every pos",
                *failed.lines[1:],
                mistakes=mistakes,
                reading=READING,
            ) from None

    return Check(title, run)


def fresh_checks(rng: random.Random) -> list[Check]:
    """Offsets, widths and layouts drawn anew at every run
    (checker.checks.fresh_checks)."""
    drawn = []
    for layout in rng.sample(["interleaved", "split-half", "rotated"], 3):
        offset, d_model = rng.randint(-6, 9), rng.choice([4, 8, 12])
        title = f"64 rows, d_model = {d_model}, base 100, offset {offset}, {layout}"
        drawn.append(
            _fit(title, 64, d_model, offset, base=100.0, layout=layout)
        )
    return as_fresh(drawn)


CHECKS = [
    _fit("64 rows, d_model = 8, base 100, offset 3", 64, 8, 3, base=100.0),
    _fit("offset 0: the identity", 30, 8, 0, base=100.0),
    _fit("offset -2: a shift back", 64, 8, -2, base=100.0),
    _fit(
        "the split-half layout (sines first), offset 5",
        64,
        8,
        5,
        base=100.0,
        layout="split-half",
    ),
    _fit(
        "a table that is not sinusoidal: the rows times a random orthogonal Q, offset 3",
        64,
        8,
        3,
        base=100.0,
        layout="rotated",
    ),
    _fit(
        "1000 rows of the paper's table, d_model = 16, base 10000, offset 7",
        1000,
        16,
        7,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "lstsq's solution taken as M, not as M.T",
        [("return fitted.T  # (E, E)", "return fitted  # (E, E)")],
        [
            "FAIL  1. 64 rows, d_model = 8, base 100, offset 3",
            "your matrix is the transpose of M",
        ],
    ),
    (
        "the rows k apart taken as table[:-k] and table[k:], which is empty for k = 0 and reversed for k < 0",
        [
            (
                "before = table[max(0, -offset) : seq_len - max(0, offset)]",
                "before = table[:-offset]",
            ),
            (
                "after = table[max(0, offset) : seq_len - max(0, -offset)]",
                "after = table[offset:]",
            ),
        ],
        ["pass  1.", "FAIL  2. offset 0: the identity"],
    ),
]
