"""Peak memory of a call on the CPU, measured with PyTorch's profiler.

:func:`peak_memory` runs a function under
``torch.profiler.profile(activities=[ProfilerActivity.CPU],
profile_memory=True)``, which records every allocation and release made by
PyTorch's CPU allocator with its size and time. Replaying these events in
time order gives the bytes held at each moment above what was held at the
start; the largest of them is the peak. Memory that PyTorch does not
allocate (the Python interpreter, NumPy) is not counted.

The profiler's own log lines when it starts and stops (written to the
process's standard error by its C++ side) are discarded, so a notebook cell
that measures stays free of stderr output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from torch.profiler import ProfilerActivity, profile

__all__ = ["PeakMemory", "peak_memory"]


@dataclasses.dataclass(frozen=True)
class PeakMemory:
    """What one call allocated on the CPU.

    Attributes:
        peak_bytes: the largest number of bytes held at once during the
            call, above what was held when it started (bytes, >= 0).
        ops: the names of the PyTorch operators the call ran, such as
            ``"aten::_scaled_dot_product_flash_attention_for_cpu"``, in
            the order they first ran.
        retained_bytes: bytes allocated during the call and still held
            when it returned (its result is dropped first): what the call
            left behind, such as a filled key-value cache.
    """

    peak_bytes: int
    ops: tuple[str, ...]
    retained_bytes: int = 0


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to the null device, then restore it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(
    fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> PeakMemory:
    """Run ``fn(*args, **kwargs)`` once and measure its peak CPU memory.

    Args:
        fn: the function to run; its result is dropped.
        *args: positional arguments for ``fn``.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        :class:`PeakMemory`: the peak bytes allocated by PyTorch's CPU
        allocator above the start, the operators that ran, and the bytes
        still held at the end.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        prof.start()
    try:
        fn(*args, **kwargs)
    finally:
        with _quiet_stderr():
            prof.stop()
    events = []  # (time in ns, bytes: + allocated, - released)
    calls = []  # (time in ns, operator name)
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        size = getattr(event.extra_fields, "alloc_size", None)
        if size is not None:
            events.append((event.start_time_ns, int(size)))
        elif event.name.startswith("aten::"):
            calls.append((event.start_time_ns, event.name))
    held = peak = 0
    for _, size in sorted(events, key=lambda e: e[0]):
        held += size
        peak = max(peak, held)
    ops = dict.fromkeys(name for _, name in sorted(calls))
    return PeakMemory(peak_bytes=peak, ops=tuple(ops), retained_bytes=held)
