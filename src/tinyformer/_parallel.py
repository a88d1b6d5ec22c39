"""Jobs run side by side in spawned worker processes, with the same results
as in one process: the labs of the chapters "Position beyond sinusoids" and
"Long context" train their models this way
(:func:`tinyformer.long_context.run_jobs` is the public name)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch

from tinyformer._checks import check_int

__all__ = ["run_jobs"]


def _worker_start() -> None:
    """A worker trains with one thread (two workers share two cores)."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def run_jobs(function: Any, jobs: list[Any], workers: int = 1) -> list[Any]:
    """``[function(job) for job in jobs]``, in ``workers`` processes when
    ``workers > 1``.

    The processes are started with ``spawn`` (a fork of a process that
    has run torch can hang in OpenMP), use one thread each and
    deterministic algorithms; ``function`` must be importable (defined in
    a module, not in a notebook). The results come back in the order of
    ``jobs``. A model's result does not depend on ``workers`` because
    each job seeds its own weights and data.

    Raises:
        ValueError: if ``workers`` is not an int >= 1.
    """
    check_int("workers", workers, minimum=1)
    if workers == 1 or len(jobs) < 2:
        return [function(job) for job in jobs]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)),
        mp_context=context,
        initializer=_worker_start,
    ) as pool:
        return list(pool.map(function, jobs))
