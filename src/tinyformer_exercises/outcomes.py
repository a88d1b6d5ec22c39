"""What a check and the student's process can end in: the bottom module of the checker.

Both sides use these: the child process (:mod:`tinyformer_exercises._sandbox`) describes what came
back (:class:`Opaque`, :func:`describe_value`) and ends with :class:`StudentExit`; the checks
(:mod:`tinyformer_exercises.checking`) fail with :class:`CheckFailed` or find the student's
function :class:`Unfinished`. It imports nothing of the checker, so neither side imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "CheckFailed",
    "Opaque",
    "ReadNotAllowed",
    "StudentExit",
    "Unfinished",
    "describe_value",
]


@dataclass(frozen=True)
class Opaque:
    """A result that cannot cross to the checker as it is, described: a
    non-tensor object, or a tensor that is not dense or not on a real
    device (``tensor`` is then True)."""

    text: str
    tensor: bool = False


class StudentExit(Exception):
    """The student's code ended or hung the child process; ``line`` says
    how, in one line."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def describe_value(x: object) -> str:
    """A tensor as ``(2, 3) torch.float64 tensor``; anything else as its
    type and a short repr (what the report says came back)."""
    if isinstance(x, torch.Tensor):
        return f"{tuple(x.shape)} {x.dtype} tensor"
    try:
        text = repr(x)
    except BaseException:  # a student's __repr__ may fail
        text = "(no repr)"
    return f"{type(x).__name__} {text if len(text) < 60 else text[:57] + '...'}"


class CheckFailed(Exception):
    """One check failed; ``lines`` say what was expected and what came.

    ``mistakes`` name the common mistakes the result matches (the report
    names each once, after the failing checks); ``reading`` is the rule the
    check tests, printed once at the end of a report with failures."""

    def __init__(
        self,
        *lines: str,
        mistakes: list[str] | tuple[str, ...] = (),
        reading: str = "",
    ) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)
        self.mistakes = list(mistakes)
        self.reading = reading

    def adding(
        self,
        *before: str,
        mistakes: list[str] | tuple[str, ...] = (),
        reading: str = "",
    ) -> CheckFailed:
        """This failure with ``before`` lines in front and more
        ``mistakes`` (and a ``reading`` if it has none)."""
        return CheckFailed(
            *before,
            *self.lines,
            mistakes=[*self.mistakes, *mistakes],
            reading=self.reading or reading,
        )


class ReadNotAllowed(CheckFailed):
    """The student's function read a watched input in a way its exercise
    rules out (:mod:`tinyformer_exercises.watched`); ``lines`` say how."""


class Unfinished(Exception):
    """The student's function still raises NotImplementedError."""
