"""Load a student's file and report, check by check, what it computes
against the library.

Every message is meant for the student: what input a check used, what it
expected, what came back (shapes, dtypes, the first entry that differs, with
its index and the tolerance). Errors raised by the student's code are shown
at the student's own line; the checker's frames are never shown."""

from __future__ import annotations

import importlib.util
import linecache
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "Check",
    "CheckFailed",
    "FileProblem",
    "Unfinished",
    "call",
    "compare_bool",
    "compare_close",
    "describe",
    "load_functions",
]

# float64 results are compared with torch.testing.assert_close's own float64
# tolerances.
FLOAT64_TOLERANCE = {"rtol": 1e-7, "atol": 1e-7}


class CheckFailed(Exception):
    """One check failed; ``lines`` say what was expected and what came."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class Unfinished(Exception):
    """The student's function still raises NotImplementedError."""


class FileProblem(Exception):
    """The file cannot be loaded or lacks a function the exercise asks for;
    ``lines`` say why."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


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
    """A tensor as ``(2, 3) torch.float64 tensor``; anything else as its
    type and a short repr."""
    if isinstance(x, Tensor):
        return f"{tuple(x.shape)} {x.dtype} tensor"
    text = repr(x)
    return f"{type(x).__name__} {text if len(text) < 60 else text[:57] + '...'}"


def _entry(x: Tensor, index: tuple[int, ...]) -> str:
    value = x[index].item()
    return repr(value) if isinstance(value, bool) else f"{value:.10g}"


def _index(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def _require_tensor(name: str, actual: object, expected: Tensor) -> Tensor:
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


def _student_frames(
    error: BaseException, path: Path
) -> list[traceback.FrameSummary]:
    frames = traceback.extract_tb(error.__traceback__)
    return [
        frame
        for frame in frames
        if frame.filename and Path(frame.filename).resolve() == path
    ]


def where(error: BaseException, path: Path) -> str:
    """``line 12: return x.view(...)`` for the last line of the student's
    file on the error's way, or ''."""
    if (
        isinstance(error, SyntaxError)
        and error.filename
        and Path(error.filename).resolve() == path
    ):
        text = (error.text or "").strip()
        return f"{path.name}, line {error.lineno}: {text}"
    frames = _student_frames(error, path)
    if not frames:
        return ""
    frame = frames[-1]
    text = (
        frame.line or linecache.getline(str(path), frame.lineno or 0)
    ).strip()
    return f"{path.name}, line {frame.lineno}: {text}"


def call(
    function: Callable[..., Any], call_text: str, *args: Any, **kwargs: Any
) -> Any:
    """Call the student's ``function``; an exception becomes a
    :class:`CheckFailed` at the student's line."""
    path = Path(function.__code__.co_filename).resolve()
    try:
        return function(*args, **kwargs)
    except NotImplementedError as error:
        frames = _student_frames(error, path)
        if frames and frames[-1].name == function.__name__:
            raise Unfinished(function.__name__) from None
        raise CheckFailed(
            f"calling {call_text} raised NotImplementedError: {error}",
            f"at {where(error, path)}",
        ) from None
    except Exception as error:
        place = where(error, path)
        raise CheckFailed(
            f"calling {call_text} raised {type(error).__name__}: {error}",
            *([f"at {place}"] if place else []),
        ) from None


def load_functions(
    path: Path, names: tuple[str, ...], module_name: str
) -> dict[str, Callable[..., Any]]:
    """Import the file at ``path`` and return its functions ``names``; a
    :class:`FileProblem` says why not."""
    path = path.resolve()
    if not path.is_file():
        raise FileProblem(f"There is no file {path}.")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise FileProblem(
            f"{path} is not a Python file (its name should end in .py)."
        )
    module: ModuleType = importlib.util.module_from_spec(spec)
    dont_write = sys.dont_write_bytecode
    # leave no __pycache__ beside the student's file
    sys.dont_write_bytecode = True
    try:
        spec.loader.exec_module(module)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        place = where(error, path)
        raise FileProblem(
            f"Could not import {path}:",
            f"  {place}"
            if place
            else "  (the error is not on a line of this file)",
            f"  {type(error).__name__}: {error.msg if isinstance(error, SyntaxError) else error}",
        ) from None
    finally:
        sys.dont_write_bytecode = dont_write
    functions = {}
    for name in names:
        function = getattr(module, name, None)
        if not callable(function) or not hasattr(function, "__code__"):
            raise FileProblem(
                f"{path} does not define a function named {name}; the exercise asks for one."
            )
        functions[name] = function
    return functions
