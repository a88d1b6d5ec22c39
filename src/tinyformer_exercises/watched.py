"""Inputs that watch how the student's code reads them.

A check whose exercise fixes *how* a result is computed, not only what it is, hands the student a
watched tensor. :class:`BlockedRow` is a row (the last dimension) that must be read in blocks of at
most ``block_size`` entries: the online softmax's rule. Every tensor computed from it is watched
too (PyTorch's ``__torch_function__`` passes the class on), and each reduction that covers more
than ``block_size`` entries at once (a ``max``, ``sum``, ``softmax``, ``logsumexp``, a cumulative
scan, a sort, a matrix product over the row, or a copy out of PyTorch) is noted.

The child process (:mod:`tinyformer_exercises._sandbox`) starts a watch before it calls the
student's function (:func:`begin`) and sends back what was noted (:func:`end`); the parent fails the
check with those lines. Both sides import this module; it imports nothing of the checker.

The watch is a teacher's check, not a lock: code written to hide from it (turning the watch off,
or PyTorch's own switches for subclasses) can; the plain and the two-pass softmax cannot.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["BlockedRow", "begin", "blocked_row", "end"]

#: Reductions, by PyTorch's name, and where their ``dim`` argument sits when it is positional.
_REDUCTIONS = {
    **dict.fromkeys(
        (
            "amax",
            "amin",
            "max",
            "min",
            "aminmax",
            "argmax",
            "argmin",
            "sum",
            "nansum",
            "mean",
            "nanmean",
            "prod",
            "logsumexp",
            "softmax",
            "log_softmax",
            "_softmax",
            "_log_softmax",
            "cumsum",
            "cumprod",
            "cummax",
            "cummin",
            "logcumsumexp",
            "sort",
            "argsort",
            "median",
            "nanmedian",
            "std",
            "var",
            "std_mean",
            "var_mean",
        ),
        1,
    ),
    "norm": 2,
    "topk": 2,
    "kthvalue": 2,
}
#: These read the row's last dimension whatever their arguments.
_ALONG_THE_ROW = frozenset(
    {
        "matmul",
        "__matmul__",
        "mm",
        "bmm",
        "mv",
        "dot",
        "inner",
        "numpy",
        "__array__",
        "tolist",
    }
)
#: Reductions that work along the last dimension when no ``dim`` is given.
_LAST_BY_DEFAULT = frozenset({"sort", "argsort", "topk", "kthvalue"})


class _State:
    block_size: int | None = None
    seen: list[str] = []  # noqa: RUF012 (one list, replaced by begin)


_STATE = _State()


class BlockedRow(torch.Tensor):
    """A float tensor whose last dimension is a row to be read in blocks of at most
    ``block_size`` entries (made with :func:`blocked_row`); it computes as the plain tensor does."""

    block_size: int

    @classmethod
    def __torch_function__(
        cls,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Any = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if _STATE.block_size is not None and (
            name in _REDUCTIONS or name in _ALONG_THE_ROW
        ):
            with torch._C.DisableTorchFunctionSubclass():
                _note(name, args, kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def blocked_row(x: torch.Tensor, block_size: int) -> BlockedRow:
    """``x`` (a plain tensor, left as it is) as a :class:`BlockedRow` read in blocks of
    ``block_size`` entries."""
    if type(x) is not torch.Tensor:
        raise TypeError(
            f"x must be a plain torch.Tensor, got {type(x).__qualname__}"
        )
    if (
        isinstance(block_size, bool)
        or not isinstance(block_size, int)
        or block_size < 1
    ):
        raise ValueError(
            f"block_size must be an int >= 1, got {block_size!r}"
        )
    row = x.detach().clone().as_subclass(BlockedRow)
    row.block_size = block_size
    return row


def _dims(value: object) -> tuple[int, ...] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (tuple, list, torch.Size)) and all(
        isinstance(d, int) and not isinstance(d, bool) for d in value
    ):
        return tuple(value)
    return None


def _extent(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[int, str] | None:
    """How many entries one result of ``name`` reads at once, and the words for the read
    (``softmax() over 8 entries``); None for an operation that is not a reduction (an elementwise one,
    the two-tensor ``max``)."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    shape = tuple(args[0].shape)
    length = shape[-1] if shape else 1
    if name in _ALONG_THE_ROW:
        return length, f"{name}() along a row of {length} entries"
    where = _REDUCTIONS.get(name)
    if where is None:
        return None
    if name in ("max", "min") and (
        isinstance(kwargs.get("other"), torch.Tensor)
        or (len(args) > 1 and isinstance(args[1], torch.Tensor))
    ):
        return None  # torch.max(a, b) is elementwise
    dims = _dims(kwargs.get("dim", kwargs.get("axis")))
    if dims is None and len(args) > where:
        dims = _dims(args[where])
    if dims is None and name in _LAST_BY_DEFAULT:
        dims = (-1,)
    if not dims:  # no dim, or dim=(): the whole tensor
        entries = math.prod(shape)
        return entries, f"{name}() of all {entries} entries"
    entries = math.prod(shape[d] for d in dims)
    return entries, f"{name}() over {entries} entries"


def _note(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    found = _extent(name, args, kwargs)
    size = _STATE.block_size
    if found is None or size is None or found[0] <= size:
        return
    entries = "1 entry" if size == 1 else f"{size} entries"
    line = f"your code called {found[1]} at once; read the row in blocks of at most {entries}"
    if line not in _STATE.seen and len(_STATE.seen) < 3:
        _STATE.seen.append(line)


def _watched(values: Iterable[object]) -> list[BlockedRow]:
    return [value for value in values if isinstance(value, BlockedRow)]


def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Start watching the :class:`BlockedRow` among a call's arguments (nothing when there is none)."""
    rows = _watched([*args, *kwargs.values()])
    _STATE.seen = []
    _STATE.block_size = min((row.block_size for row in rows), default=None)


def end() -> list[str]:
    """Stop watching; one line for each kind of read that covered too many entries at once."""
    _STATE.block_size = None
    seen, _STATE.seen = _STATE.seen, []
    return seen


def plain(x: torch.Tensor) -> torch.Tensor:
    """A watched tensor as a plain one (what the child sends back)."""
    with torch._C.DisableTorchFunctionSubclass():
        return x.as_subclass(torch.Tensor)
