"""Timing helpers shared by the benchmark sections (``tests/bench_attention.py``, ``tests/bench_decoding.py``)."""

from __future__ import annotations

import math

import torch
from torch.utils import benchmark

ROUNDS = 3


def seconds(stmt: str, env: dict, min_run_time: float) -> float:
    """The median time of ``stmt`` in seconds (``torch.utils.benchmark``, this process's thread count)."""
    return (
        benchmark.Timer(stmt=stmt, globals=env, num_threads=torch.get_num_threads())
        .blocked_autorange(min_run_time=min_run_time)
        .median
    )


def best_of_rounds(*stmts: str, env: dict, min_run_time: float) -> tuple[float, ...]:
    """Each side's best median over alternating rounds: a burst of load slows one round, not the ratio.

    The statements run in the order given within each of ``ROUNDS`` rounds, each for ``min_run_time / ROUNDS``
    seconds (at least one warm-up run and one timed run). Returns one time per statement, in seconds.
    """
    best = [math.inf] * len(stmts)
    for _ in range(ROUNDS):
        for index, stmt in enumerate(stmts):
            best[index] = min(best[index], seconds(stmt, env, min_run_time / ROUNDS))
    return tuple(best)
