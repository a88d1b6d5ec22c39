"""Coding exercise split-half-shift: build the rotation R_k that shifts
every sinusoidal encoding by k positions.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/split_half_shift_matrix.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.positional import relative_shift_matrix
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    describe,
    matches,
    precision_hint,
)
from tinyformer_exercises.exercises.split_half_encoding import (
    split_half_order,
    split_half_table,
)

EXERCISE = Exercise(
    id="split-half-shift",
    functions=("split_half_shift_matrix",),
    template="split_half_shift_matrix.py",
    chapter="positional-encoding",
    objective="build the rotation R_k that shifts every sinusoidal encoding by k positions",
    references=(
        "tinyformer.models.positional.relative_shift_matrix",
        "tinyformer.models.positional.sinusoidal.pair_wavelengths",
    ),
    variant_of=("tinyformer.models.positional.relative_shift_matrix",),
    variant_differs="the chapter lists R_k of the interleaved table, block diagonal; the exercise asks for R_k of the split-half table, where each pair's rows and columns are E/2 apart",
)


def split_half_shift(
    offset: int, d_model: int, base: float = 10000.0
) -> Tensor:
    """``R_k`` for the split-half table: the library's ``R_k`` with its rows
    and columns reordered as the table's columns are."""
    order = split_half_order(d_model)
    return relative_shift_matrix(offset, d_model, base=base)[order][
        :, order
    ]


SHIFT_READING = (
    "R_k takes each pair i's (sin, cos) at pos to its (sin, cos) at pos + k; in the split-half layout pair i "
    "sits in rows and columns i (the sine) and E/2 + i (the cosine): R_k @ PE[pos] == PE[pos + k] for every pos"
)

INTERLEAVED_SHIFT = (
    "your matrix is R_k of the interleaved table, block diagonal with 2x2 blocks in rows 2i and 2i+1; "
    "in the split-half table pair i is in rows i and E/2 + i"
)


def _shift(
    offset: int, d_model: int, base: float | None = None, *, note: str = ""
) -> Check:
    def run(f: Functions) -> None:
        kwargs = {} if base is None else {"base": base}
        text = f"split_half_shift_matrix({offset}, {d_model}{f', base={base:g}' if base else ''})"
        want = split_half_shift(offset, d_model, **kwargs)
        got = call(
            f["split_half_shift_matrix"], text, offset, d_model, **kwargs
        )
        try:
            compare_close("R", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            interleaved = relative_shift_matrix(offset, d_model, **kwargs)
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=[
                    *(
                        [INTERLEAVED_SHIFT]
                        if d_model > 2 and matches(got, interleaved)
                        else []
                    ),
                    *precision_hint(got, want),
                ],
                reading=SHIFT_READING,
            ) from None

    return Check(
        f"offset {offset}, d_model = {d_model}, base {base or 10000.0:g}{note}",
        run,
    )


def _shift_property(offset: int, d_model: int, seq_len: int) -> Check:
    def run(f: Functions) -> None:
        text = f"split_half_shift_matrix({offset}, {d_model})"
        got = call(f["split_half_shift_matrix"], text, offset, d_model)
        if (
            not isinstance(got, Tensor)
            or got.shape != (d_model, d_model)
            or not got.dtype.is_floating_point
        ):
            raise CheckFailed(
                f"input: {text}",
                f"expected: a floating ({d_model}, {d_model}) tensor",
                f"got:      {describe(got)}",
            )
        table = split_half_table(seq_len + offset, d_model)  # (L + k, E)
        # row pos: R_k @ PE[pos]
        shifted = table[:seq_len] @ got.detach().to(torch.float64).T
        try:
            compare_close(
                "shifted", shifted, table[offset:], **FLOAT64_TOLERANCE
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}, applied to PE[pos] for pos = 0, ..., {seq_len - 1} (the split-half table, float64)",
                f"shifted[pos] = R_{offset} @ PE[pos] must equal PE[pos + {offset}], whatever pos",
                *failed.lines[2:],
            ) from None

    return Check(
        f"R_{offset} @ PE[pos] == PE[pos + {offset}] for pos = 0, ..., {seq_len - 1} (d_model = {d_model})",
        run,
    )


CHECKS = [
    _shift(0, 8, note=": R_0 is the identity"),
    _shift(3, 16),
    _shift(-5, 8, note=" (a negative offset: a shift back)"),
    _shift(1, 2, note=" (a single pair)"),
    _shift(7, 12, base=100.0),
    _shift(1000, 64, note=" (a long shift)"),
    _shift_property(4, 10, 50),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "rotation the wrong way round (the block transposed)",
        [("= sin  #", "= -sin  #"), ("= -sin\n", "= sin\n")],
        [
            "pass  1.",
            "FAIL  2. offset 3",
            "first differing entry: R[0, 8]",
            "R_k @ PE[pos] == PE[pos + k]",
        ],
    ),
    (
        "the interleaved layout's R_k (pairs in rows 2i, 2i+1)",
        [
            (
                "sine = torch.arange(d_model // 2)\n",
                "sine = torch.arange(0, d_model, 2)\n",
            ),
            ("cosine = sine + d_model // 2\n", "cosine = sine + 1\n"),
        ],
        [
            "pass  1.",
            "FAIL  2. offset 3",
            "your matrix is R_k of the interleaved table",
        ],
    ),
    (
        "frequency base^(+2i/d_model): the angle multiplied instead of divided",
        [("offset / base **", "offset * base **")],
        [
            "FAIL  7. R_4 @ PE[pos] == PE[pos + 4]",
            "shifted[pos] = R_4 @ PE[pos] must equal PE[pos + 4]",
        ],
    ),
]
