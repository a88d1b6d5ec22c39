"""A lab's grid of jobs, run side by side with the same results as in one
process: the labs of the chapters "Position beyond sinusoids" and "Long
context" train their models this way
(:func:`tinyformer.labs.long_context.run_jobs` is the public name).

By default the jobs run in a local pool of spawned processes. Any
:class:`concurrent.futures.Executor` whose workers are processes can run
them instead, an existing cluster's included; with Dask, for example::

    from dask.distributed import Client

    client = Client(n_workers=8, threads_per_worker=1)
    result = run_causal_lab(model, lab, executor=client.get_executor())

Each job seeds torch's global generator, so two jobs must never share a
process at the same time: a :class:`~concurrent.futures.ThreadPoolExecutor`
is refused, and a cluster's workers need one thread each.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import (
    Executor,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
)
from typing import Any

import torch

from tinyformer.tools.checks import check_int

__all__ = ["WORKERS_VARIABLE", "default_workers", "run_jobs"]

#: The environment variable that sets :func:`default_workers`. The book's
#: build sets it to 1 in the kernels of chapters it executes side by side,
#: one chapter per core (conf/_ext/tinyformer_build.py).
WORKERS_VARIABLE = "TINYFORMER_WORKERS"


def default_workers() -> int:
    """How many processes a lab's models train in, for a chapter's
    ``workers``: the environment variable ``TINYFORMER_WORKERS`` when it is
    set, otherwise one per core this process may run on (at least 1). The
    models come out the same for any number
    (:func:`tinyformer.labs.long_context.run_jobs`).

    Raises:
        ValueError: if ``TINYFORMER_WORKERS`` is set to anything but a
            whole number >= 1.
    """
    value = os.environ.get(WORKERS_VARIABLE)
    if value is None:
        # Linux names the cores this process may use; elsewhere, all of them
        if hasattr(os, "sched_getaffinity"):
            return max(1, len(os.sched_getaffinity(0)))
        return os.cpu_count() or 1
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(
            f"{WORKERS_VARIABLE} must be a whole number >= 1, got {value!r}"
        )
    return int(value)


def _worker_start() -> None:
    """A worker trains with one thread (two workers share two cores)."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


class _InWorker:
    """``function`` run as the local pool's workers run it (one thread,
    deterministic algorithms), for an executor whose workers this module
    did not start. Picklable when ``function`` is."""

    def __init__(self, function: Any) -> None:
        self.function = function

    def __call__(self, job: Any) -> Any:
        _worker_start()
        return self.function(job)


def _run_here(function: Any, job: Any) -> Any:
    """``function(job)`` in this process as a worker runs it (one thread,
    deterministic algorithms), leaving this process's torch generator,
    thread count and algorithm setting as they were: the job seeds the
    generator, and the caller's next random numbers must not depend on
    whether its jobs ran here or in a worker."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    with torch.random.fork_rng(devices=[]):
        _worker_start()
        try:
            return function(job)
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(
                deterministic, warn_only=warn_only
            )


def run_jobs(
    function: Any,
    jobs: list[Any],
    workers: int = 1,
    *,
    executor: Executor | None = None,
) -> list[Any]:
    """``[function(job) for job in jobs]``, in ``workers`` processes when
    ``workers > 1``, or on ``executor`` when one is given.

    The local processes are started with ``spawn`` (a fork of a process
    that has run torch can hang in OpenMP), use one thread each and
    deterministic algorithms; on ``executor`` each job sets the same
    before it runs. With one worker (or one job) the jobs run in this
    process under the same settings, and leave its torch generator,
    thread count and algorithm setting as they found them. ``function``
    must be importable (defined in a module, not in a notebook). The results come back in the order of ``jobs``. A
    model's result does not depend on ``workers`` or on the executor
    because each job seeds its own weights and data.

    Args:
        function: called with each job; picklable.
        jobs: the jobs, each picklable.
        workers: local processes, >= 1 (ignored when ``executor`` is
            given).
        executor: a :class:`concurrent.futures.Executor` whose workers are
            processes (a :class:`~concurrent.futures.ProcessPoolExecutor`,
            or a cluster's, such as Dask's ``Client.get_executor()``); it
            is used, not shut down.

    Raises:
        ValueError: if ``workers`` is not an int >= 1.
        TypeError: if ``executor`` is not an Executor, or is a
            ThreadPoolExecutor (its threads share one torch generator).
    """
    check_int("workers", workers, minimum=1)
    if executor is not None:
        if not isinstance(executor, Executor):
            raise TypeError(
                "executor must be a concurrent.futures.Executor, got "
                f"{type(executor).__name__} {executor!r}"
            )
        if isinstance(executor, ThreadPoolExecutor):
            raise TypeError(
                "executor must run each job in a process of its own: a "
                "ThreadPoolExecutor's jobs share torch's global generator, "
                "so their results would depend on the scheduling "
                f"(got {executor!r})"
            )
        return list(executor.map(_InWorker(function), jobs))
    if workers == 1 or len(jobs) < 2:
        return [_run_here(function, job) for job in jobs]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)),
        mp_context=context,
        initializer=_worker_start,
    ) as pool:
        return list(pool.map(function, jobs))
