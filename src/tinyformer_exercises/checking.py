"""Load a student's file and report, check by check, what it computes
against the library.

Every message is meant for the student: what input a check used, what it
expected, what came back (shapes, dtypes, the first entry that differs, with
its index and the tolerance). The student's code runs in a child process
(:mod:`tinyformer_exercises._sandbox`); its errors are shown at the
student's own line, and the checker's frames are never shown."""

from __future__ import annotations

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
    "Check",
    "CheckFailed",
    "Unfinished",
    "call",
    "compare_bool",
    "compare_close",
    "describe",
    "matches",
]

# float64 results are compared with torch.testing.assert_close's own float64
# tolerances.
FLOAT64_TOLERANCE = {"rtol": 1e-7, "atol": 1e-7}


@dataclass(frozen=True)
class Check:
    """One check: a short title in the student's words and the function that
    runs it.

    ``run`` receives the student's functions by name and raises
    :class:`CheckFailed` on a mismatch."""

    title: str
    run: Callable[[dict[str, Callable[..., Any]]], None]


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


def compare_close(
    name: str, actual: object, expected: Tensor, *, rtol: float, atol: float
) -> None:
    """Raise :class:`CheckFailed` unless ``actual`` is a floating tensor
    close to ``expected``.

    The comparison is ``torch.testing.assert_close`` (after casting both to
    float64); its summary of the mismatch is kept and the first differing
    entry, in row-major order, is added."""
    actual = _require_tensor(name, actual, expected)
    if not actual.dtype.is_floating_point:
        raise CheckFailed(
            f"expected: {name} with a floating dtype",
            f"got:      {describe(actual)}",
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
