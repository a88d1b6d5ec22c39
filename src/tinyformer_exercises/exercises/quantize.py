"""Coding exercise quantize: asymmetric min-max codes with one scale and
minimum per group, the quantiser of a KIVI cache (keys per channel, values
per token).

Its metadata (``EXERCISE``), its checks (``CHECKS``) and its wrong
solutions (``WRONG_SOLUTIONS``, which ``tests/test_exercises.py`` runs); the
reference solution, from which the template is written, is
``tests/exercise_solutions/quantize.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.quantized_cache import dequantize, quantize
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    describe,
    reseedable,
    seeded_randn,
)

EXERCISE = Exercise(
    id="quantize",
    functions=("quantize",),
    template="quantize.py",
    chapter="serving-attention",
    objective="quantise a cache's keys per channel and its values per token with asymmetric min-max codes of a few bits",
    references=("tinyformer.models.quantized_cache.quantize",),
)

READING = (
    "over each group (the numbers of x along dim): minimum = min, scale = (max - min) / (2^nbits - 1), "
    "codes = round((x - minimum) / scale) in 0 ... 2^nbits - 1, so that the smallest number gets code 0, "
    "the largest the top code, and codes * scale + minimum is within scale / 2 of x"
)


def _hints(got: object, x: Tensor, dim: int, nbits: int) -> list[str]:
    if not (
        isinstance(got, tuple)
        and len(got) == 3
        and all(isinstance(t, Tensor) for t in got)
    ):
        return []
    codes, scale, _minimum = got
    _want_codes, want_scale, _want_min = quantize(x, dim, nbits)
    if scale.shape == want_scale.shape and torch.allclose(
        scale.double(),
        want_scale * (2**nbits - 1) / 2**nbits,
        **FLOAT64_TOLERANCE,
    ):
        return [
            f"your scale is (max - min) / 2^{nbits}: {nbits} bits give 2^{nbits} codes, 0 ... 2^{nbits} - 1, "
            f"so {2**nbits - 1} steps from the minimum to the maximum"
        ]
    if scale.shape != want_scale.shape:
        return [
            f"scale has shape {tuple(scale.shape)}: one scale per group, x's shape with dim={dim} of size 1 "
            "(keepdim=True)"
        ]
    if not bool(torch.isfinite(scale.double()).all()) or bool(
        (scale == 0).any()
    ):
        return [
            "a constant group has max == min: its scale 0 makes (x - minimum) / scale 0 / 0; give it the "
            "scale 1 (its codes are then 0 and it dequantises exactly)"
        ]
    if codes.shape == x.shape and torch.equal(
        codes.to(torch.int64),
        (x / want_scale).round().clamp(0, 2**nbits - 1).to(torch.int64),
    ):
        return [
            "your codes are round(x / scale): subtract the group's minimum first, so that it maps to code 0"
        ]
    return []


@reseedable
def _quantize(
    title: str,
    shape: tuple[int, ...],
    dim: int,
    nbits: int,
    seed: int,
    constant_row: bool = False,
) -> Check:
    text = f"quantize(x {shape}, dim={dim}, nbits={nbits})"

    def run(f: Functions) -> None:
        x = seeded_randn(*shape, seed=seed)
        if constant_row:
            # one group constant: a channel (dim 0) or a token (dim -1)
            if dim == 0:
                x[:, 1] = 0.25
            else:
                x[1] = 0.25
        want_codes, want_scale, want_min = quantize(x, dim, nbits)
        got = call(f["quantize"], text, x.clone(), dim, nbits)
        try:
            if not (isinstance(got, tuple) and len(got) == 3):
                raise CheckFailed(
                    "expected: a tuple (codes, scale, minimum)",
                    f"got:      {describe(got)}",
                )
            codes, scale, minimum = got
            compare_close("scale", scale, want_scale, **FLOAT64_TOLERANCE)
            compare_close("minimum", minimum, want_min, **FLOAT64_TOLERANCE)
            if (
                not isinstance(codes, Tensor)
                or codes.dtype != torch.uint8
                or codes.shape != want_codes.shape
            ):
                raise CheckFailed(
                    f"expected: codes as a {describe(want_codes)}",
                    f"got:      {describe(codes)}",
                )
            if not torch.equal(codes, want_codes):
                index = tuple(
                    int(i) for i in (codes != want_codes).nonzero()[0]
                )
                raise CheckFailed(
                    "expected: codes (computed by the library)",
                    f"first differing code: codes{list(index)}: expected {int(want_codes[index])}, "
                    f"got {int(codes[index])}",
                )
            error = (
                dequantize(codes, scale.double(), minimum.double()) - x
            ).abs()
            if not bool((error <= want_scale / 2 + 1e-12).all()):
                raise CheckFailed(
                    "codes * scale + minimum is more than scale / 2 from x"
                )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_hints(got, x, dim, nbits),
                reading=READING,
            ) from None

    return Check(f"{text}: {title}", run)


CHECKS = [
    _quantize(
        "values per token: 5 tokens of width 8, one group per token",
        (5, 8),
        -1,
        8,
        seed=1,
    ),
    _quantize(
        "keys per channel: a group of 6 tokens per channel",
        (6, 4),
        0,
        8,
        seed=2,
    ),
    _quantize(
        "4 bits, 16 codes; heads and a batch in front",
        (2, 3, 4, 8),
        -1,
        4,
        seed=3,
    ),
    _quantize(
        "keys per channel, one channel constant across the tokens",
        (4, 6),
        0,
        8,
        seed=4,
        constant_row=True,
    ),
    _quantize(
        "2 bits, 4 codes, one token constant",
        (3, 5),
        -1,
        2,
        seed=5,
        constant_row=True,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "2^nbits levels instead of 2^nbits - 1",
        [("levels = 2**nbits - 1", "levels = 2**nbits")],
        ["FAIL  1.", "your scale is (max - min) / 2^8", "FAIL  3."],
    ),
    (
        "no guard for a constant group",
        [
            (
                "torch.where(\n        span > 0, span / levels, torch.ones_like(span)\n    )",
                "span / levels",
            )
        ],
        [
            "pass  1.",
            "pass  3.",
            "FAIL  4.",
            "a constant group has max == min",
            "FAIL  5.",
        ],
    ),
    (
        "codes without the minimum subtracted",
        [("((x - minimum) / scale)", "(x / scale)")],
        ["FAIL  1.", "subtract the group's minimum first"],
    ),
]
