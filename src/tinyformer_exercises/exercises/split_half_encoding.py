"""Coding exercise split-half-encoding: write down the sinusoidal encoding
and compute it for any width and base.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/split_half_encoding.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.positional import sinusoidal_positional_encoding
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT32_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
)

EXERCISE = Exercise(
    id="split-half-encoding",
    functions=("split_half_encoding",),
    template="split_half_encoding.py",
    chapter="positional-encoding",
    objective="write down the sinusoidal encoding and compute it for any width and base",
    references=(
        "tinyformer.models.positional.sinusoidal_positional_encoding",
        "tinyformer.models.positional.sinusoidal.pair_wavelengths",
    ),
    variant_of=(
        "tinyformer.models.positional.sinusoidal_positional_encoding",
    ),
    variant_differs="the chapter lists the paper's interleaved table; the exercise asks for the split-half layout, all the sines and then all the cosines, as Hugging Face's Marian stores it",
)


def split_half_order(d_model: int) -> Tensor:
    """Column ``j`` of the split-half table is column ``order[j]`` of the
    interleaved one: the sines (even columns), then the cosines (odd)."""
    return torch.cat(
        (torch.arange(0, d_model, 2), torch.arange(1, d_model, 2))
    )


def split_half_table(
    seq_len: int, d_model: int, base: float = 10000.0
) -> Tensor:
    """The sinusoidal encoding with the sines of all pairs in the first
    ``ceil(E/2)`` columns and their cosines in the rest (float64), the
    library's interleaved table with its columns reordered."""
    table = sinusoidal_positional_encoding(
        seq_len, d_model, base=base, dtype=torch.float64
    )
    return table[:, split_half_order(d_model)]


INTERLEAVED = (
    "your table interleaves sines and cosines (sin, cos, sin, ...), the paper's layout; this one puts the "
    "sines of all pairs first and their cosines after them"
)

SPLIT_HALF_READING = (
    "column i < ceil(E/2) is sin(pos * w_i) and column ceil(E/2) + i is cos(pos * w_i), with "
    "w_i = base^(-2i/d_model), the paper's speeds"
)


def _encoding(
    seq_len: int, d_model: int, base: float | None = None
) -> Check:
    def run(f: Functions) -> None:
        kwargs = {} if base is None else {"base": base}
        text = f"split_half_encoding({seq_len}, {d_model}{f', base={base:g}' if base else ''})"
        got = call(
            f["split_half_encoding"], text, seq_len, d_model, **kwargs
        )
        want = split_half_table(seq_len, d_model, **kwargs)
        try:
            compare_close("PE", got, want, **FLOAT32_TOLERANCE, dtype=None)
        except CheckFailed as failed:
            interleaved = sinusoidal_positional_encoding(
                seq_len, d_model, dtype=torch.float64, **kwargs
            )
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=[INTERLEAVED]
                if d_model > 2 and matches(got, interleaved)
                else [],
                reading=SPLIT_HALF_READING,
            ) from None

    note = " (odd width: one more sine than cosines)" if d_model % 2 else ""
    return Check(
        f"{seq_len} positions, d_model = {d_model}, base {base or 10000.0:g}{note}",
        run,
    )


CHECKS = [
    _encoding(50, 16),
    _encoding(10, 7),
    _encoding(20, 8, base=100.0),
    _encoding(1, 2),
    _encoding(0, 4),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "sines and cosines interleaved (the paper's layout) instead of in two halves",
        [
            (
                "torch.cat((angle.sin(), cosines), dim=1)",
                "torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1)[:, :d_model]",
            )
        ],
        [
            "FAIL  1.",
            "first differing entry: PE[0, 1]: expected 0, got 1",
            "your table interleaves sines and cosines",
        ],
    ),
    (
        "exponent i/d_model instead of 2i/d_model",
        [("pair / d_model", "pair / 2 / d_model")],
        ["FAIL  1.", "first differing entry: PE[1, 1]"],
    ),
    (
        "an odd width gets as many cosines as sines",
        [("angle[:, : d_model // 2].cos()", "angle.cos()")],
        [
            "pass  1.",
            "FAIL  2. 10 positions, d_model = 7",
            "expected: PE of shape (10, 7)",
            "got:      PE of shape (10, 8)",
        ],
    ),
]
