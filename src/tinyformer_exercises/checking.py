"""Load a student's file and report, check by check, what it computes
against the library.

Every message is meant for the student: what input a check used, what it
expected, what came back (shapes, dtypes, the first entry that differs, with
its index and the tolerance). The student's code runs in a child process
(:mod:`tinyformer_exercises._sandbox`); its errors are shown at the
student's own line, and the checker's frames are never shown."""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tinyformer_exercises.outcomes import (
    CheckFailed,
    Opaque,
    Unfinished,
    describe_value,
)

__all__ = [
    "FLOAT32_TOLERANCE",
    "FLOAT64_TOLERANCE",
    "FRESH_CASES",
    "Check",
    "CheckFailed",
    "Functions",
    "Unfinished",
    "as_fresh",
    "call",
    "compare_bool",
    "compare_close",
    "describe",
    "fresh_cases",
    "fresh_title",
    "matches",
    "precision_hint",
    "random_bool_mask",
    "require_floating",
    "reseedable",
    "seeded_randn",
    "shapes",
]

#: The student's functions by name, as a check's ``run`` receives them.
Functions = dict[str, Callable[..., Any]]

# float64 results are compared with torch.testing.assert_close's own float64
# tolerances.
FLOAT64_TOLERANCE = {"rtol": 1e-7, "atol": 1e-7}


#: How many cases each run of the checker draws anew, beside the printed ones.
FRESH_CASES = 3


@dataclass(frozen=True)
class Check:
    """One check: a short title in the student's words and the function that
    runs it.

    ``run`` receives the student's functions by name and raises
    :class:`CheckFailed` on a mismatch. ``reseed``, for a check whose inputs
    come from a seed (:func:`reseedable`), makes the same check on the
    inputs of another seed."""

    title: str
    run: Callable[[dict[str, Callable[..., Any]]], None]
    reseed: Callable[[int], Check] | None = None


def reseedable(factory: Callable[..., Check]) -> Callable[..., Check]:
    """Mark a check factory whose ``seed`` keyword makes the check's inputs:
    each check it makes with a ``seed`` can be made again from another
    (:func:`fresh_cases`)."""

    @functools.wraps(factory)
    def make(*args: Any, **kwargs: Any) -> Check:
        check = factory(*args, **kwargs)
        if "seed" not in kwargs:
            return check
        return dataclasses.replace(
            check,
            reseed=lambda seed: make(*args, **{**kwargs, "seed": seed}),
        )

    return make


def fresh_title(title: str) -> str:
    """A fresh case's title: ``fresh inputs: `` and the printed case's."""
    return f"fresh inputs: {title}"


def as_fresh(checks: list[Check]) -> list[Check]:
    """``checks``, made from inputs drawn at this run, titled as fresh cases
    (an exercise module's ``fresh_checks`` returns them)."""
    return [
        dataclasses.replace(
            check, title=fresh_title(check.title), reseed=None
        )
        for check in checks
    ]


def fresh_cases(
    checks: list[Check], rng: random.Random, count: int = FRESH_CASES
) -> list[Check]:
    """``count`` of ``checks`` made again on inputs from seeds that ``rng``
    draws (those with ``reseed``; none when no check has one), so that a
    solution that looks the printed cases up in a table fails them."""
    seeded = [check for check in checks if check.reseed is not None]
    if not seeded:
        return []
    picked = [rng.choice(seeded) for _ in range(count)]
    return as_fresh(
        [check.reseed(rng.randrange(1_000, 2**31)) for check in picked]
    )


def seeded_randn(*shape: int, seed: int) -> Tensor:
    """A float64 standard-normal tensor of ``shape`` from its own
    generator seeded with ``seed``: a check's input, the same every run."""
    return torch.randn(
        *shape,
        generator=torch.Generator().manual_seed(seed),
        dtype=torch.float64,
    )


def describe(x: object) -> str:
    """A tensor as ``(2, 3) torch.float64 tensor``; a result the child
    could only describe as its description; anything else as its type and a
    short repr."""
    if isinstance(x, Opaque):
        return x.text
    return describe_value(x)


def _entry(x: Tensor, index: tuple[int, ...]) -> str:
    value = x[index].item()
    return repr(value) if isinstance(value, bool) else f"{value:.10g}"


def _index(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def _require_tensor(name: str, actual: object, expected: Tensor) -> Tensor:
    if isinstance(actual, Opaque) and actual.tensor:
        raise CheckFailed(
            f"expected: {name} as a dense {describe(expected)} on the CPU or a GPU",
            f"got:      {actual.text}",
        )
    if not isinstance(actual, Tensor):
        raise CheckFailed(
            f"expected: {name} as a {describe(expected)}",
            f"got:      {describe(actual)}",
        )
    if actual.shape != expected.shape:
        raise CheckFailed(
            f"expected: {name} of shape {tuple(expected.shape)}",
            f"got:      {name} of shape {tuple(actual.shape)}",
        )
    return actual


_SAME_DTYPE = object()


def compare_close(
    name: str,
    actual: object,
    expected: Tensor,
    *,
    rtol: float,
    atol: float,
    dtype: torch.dtype | object | None = _SAME_DTYPE,
) -> None:
    """Raise :class:`CheckFailed` unless ``actual`` is a floating tensor
    of the dtype the exercise fixes, close to ``expected``.

    The dtype is checked first: ``expected``'s unless ``dtype`` names
    another, or None where the exercise leaves it free (a float32 answer
    would otherwise pass a float64 check within rounding: casting it back
    to float64 hides what was lost). The values are compared with
    ``torch.testing.assert_close`` after casting both to float64; its
    summary of the mismatch is kept and the first differing entry, in
    row-major order, is added."""
    actual = _require_tensor(name, actual, expected)
    if not actual.dtype.is_floating_point:
        raise CheckFailed(
            f"expected: {name} with a floating dtype",
            f"got:      {describe(actual)}",
        )
    want_dtype = expected.dtype if dtype is _SAME_DTYPE else dtype
    if want_dtype is not None and actual.dtype != want_dtype:
        raise CheckFailed(
            f"expected: {name} with dtype {want_dtype}, the dtype the library returns for these inputs",
            f"got:      {name} with dtype {actual.dtype}",
            "keep the dtype of the inputs (or the one the docstring names): casting the result back to float64 "
            "would not restore the digits a lower precision lost",
        )
    got, want = (
        actual.detach().to(torch.float64).cpu(),
        expected.detach().to(torch.float64).cpu(),
    )
    try:
        torch.testing.assert_close(
            got, want, rtol=rtol, atol=atol, equal_nan=False
        )
    except AssertionError as error:
        bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
        index = tuple(int(i) for i in bad.nonzero()[0])
        summary = [
            line.strip() for line in str(error).splitlines() if line.strip()
        ]
        raise CheckFailed(
            f"expected: {name} {describe(expected)} (computed by the library in float64)",
            f"got:      {name} {describe(actual)} with different values",
            f"first differing entry: {name}{_index(index)}: expected {_entry(want, index)}, got {_entry(got, index)}",
            f"tolerance: |got - expected| <= {atol:g} + {rtol:g} * |expected|",
            *(
                f"torch.testing: {line}"
                for line in summary
                if line.startswith("Mismatched elements")
            ),
        ) from None


def matches(
    got: object,
    want: Tensor,
    tolerance: dict[str, float] = FLOAT64_TOLERANCE,
) -> bool:
    """Whether ``got`` is a tensor of ``want``'s shape and values: bools
    exactly, floats within ``tolerance`` after casting to float64 (equal
    infinities and NaNs match). The test for a known slip, never a check."""
    if not isinstance(got, Tensor) or got.shape != want.shape:
        return False
    if want.dtype == torch.bool:
        return got.dtype == torch.bool and torch.equal(
            got.cpu(), want.cpu()
        )
    if not got.dtype.is_floating_point:
        return False
    return torch.allclose(
        got.detach().to(torch.float64).cpu(),
        want.detach().to(torch.float64).cpu(),
        equal_nan=True,
        **tolerance,
    )


def compare_bool(name: str, actual: object, expected: Tensor) -> None:
    """Raise :class:`CheckFailed` unless ``actual`` is a bool tensor equal
    to ``expected``."""
    actual = _require_tensor(name, actual, expected)
    if actual.dtype != torch.bool:
        raise CheckFailed(
            f"expected: {name} with dtype torch.bool",
            f"got:      {describe(actual)}",
        )
    bad = actual.cpu() != expected.cpu()
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise CheckFailed(
            f"expected: {name} {describe(expected)} (computed by the library)",
            f"got:      {name} with {int(bad.sum())} of {bad.numel()} entries different",
            f"first differing entry: {name}{_index(index)}: expected {_entry(expected, index)}, got {_entry(actual, index)}",
        )


def call(function: Any, call_text: str, *args: Any, **kwargs: Any) -> Any:
    """Call the student's ``function`` (a
    :class:`~tinyformer_exercises._sandbox.Remote`: it runs in the child
    process) with ``args``; ``call_text`` is the call as the report shows
    it. An error of the student's code becomes a :class:`CheckFailed` at
    the student's line, an unfinished function :class:`Unfinished`."""
    return function.run(call_text, *args, **kwargs)


# A float32 result (the encoding table, a rotated float32 input, the ALiBi
# slopes and biases) passes the float64 comparison with this tolerance.
FLOAT32_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def precision_hint(got: object, want: Tensor) -> list[str]:
    """A line for a result that is right but for rounding: float32 angles
    lose about 1e-7 of every radian."""
    if (
        not isinstance(got, Tensor)
        or got.shape != want.shape
        or not got.dtype.is_floating_point
    ):
        return []
    gap = (got.detach().to(torch.float64).cpu() - want).abs().max().item()
    if 0 < gap < 1e-3:
        return [
            f"the largest difference is only {gap:.1e}: compute the angles in float64, as the library does "
            "(a float32 angle loses about 1e-7 of every radian; torch.arange(n) / d and .float() give float32)"
        ]
    return []


def random_bool_mask(seq_len_q: int, seq_len_k: int) -> Tensor:
    """A boolean ``attn_mask`` ``(seq_len_q, seq_len_k)`` drawn from a fixed
    seed (True = may attend, 60 % of the pairs), in which every query may
    attend to key 0."""
    allowed = (
        torch.rand(
            seq_len_q, seq_len_k, generator=torch.Generator().manual_seed(7)
        )
        < 0.6
    )
    allowed[:, 0] = True  # every query may attend to something
    return allowed


def shapes(**tensors: Tensor) -> str:
    """``"query (2, 3, 4), key (2, 5, 4)"``: the tensors' names and shapes,
    for a check's title."""
    return ", ".join(
        f"{name} {tuple(t.shape)}" for name, t in tensors.items()
    )


def require_floating(
    name: str, got: object, shape: tuple[int, ...]
) -> Tensor:
    """``got`` if it is a floating tensor of ``shape``; a
    :class:`CheckFailed` says what came instead."""
    if (
        not isinstance(got, Tensor)
        or tuple(got.shape) != shape
        or not got.dtype.is_floating_point
    ):
        raise CheckFailed(
            f"expected: {name} as a floating tensor of shape {shape}",
            f"got:      {describe(got)}",
        )
    return got
