"""Coding exercise gather-blocks: a paged cache's keys read back through a
block table.

Its metadata (``EXERCISE``), its checks (``CHECKS``) and its wrong
solutions (``WRONG_SOLUTIONS``, which ``tests/test_exercises.py`` runs); the
reference solution, from which the template is written, is
``tests/exercise_solutions/gather_blocks.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.paged_cache import gather_blocks
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
    reseedable,
    seeded_randn,
)

EXERCISE = Exercise(
    id="gather-blocks",
    functions=("gather_blocks",),
    template="gather_blocks.py",
    chapter="serving-attention",
    objective="read a sequence's keys or values out of a paged cache through its block table",
    references=("tinyformer.models.paged_cache.gather_blocks",),
)

READING = (
    "token t of sequence i lives in block block_tables[i, t // B] at slot t % B: pool[block_tables] puts "
    "each sequence's blocks in table order, (N, n, H_kv, B, D); the heads come before the tokens, then "
    "n blocks of B slots make n * B tokens, of which the first num_tokens are filled"
)


def _hints(
    got: object, pool: Tensor, tables: Tensor, num_tokens: int
) -> list[str]:
    if not isinstance(got, Tensor):
        return []
    want = gather_blocks(pool, tables, num_tokens)
    if (
        got.dim() == 4
        and got.shape[2] == tables.size(1) * pool.size(2) > num_tokens
    ):
        return [
            f"you returned all {got.shape[2]} slots of the sequence's blocks: only the first "
            f"num_tokens={num_tokens} hold tokens, the rest of the last block is empty"
        ]
    if matches(
        got, gather_blocks(pool, tables.sort(dim=1).values, num_tokens)
    ) and not matches(got, want):
        return [
            "your tokens come from the blocks in the order of the pool (sorted indices), not of the table: "
            "a sequence's second block may sit anywhere in the pool, before its first"
        ]
    return []


@reseedable
def _gather(
    title: str,
    pool_shape: tuple[int, int, int, int],
    tables: list[list[int]],
    num_tokens: int,
    seed: int,
) -> Check:
    table = torch.tensor(tables, dtype=torch.long)
    text = f"gather_blocks(pool {pool_shape}, block_tables {tables}, num_tokens={num_tokens})"

    def run(f: Functions) -> None:
        pool = seeded_randn(*pool_shape, seed=seed)
        want = gather_blocks(pool, table, num_tokens)
        got = call(
            f["gather_blocks"],
            text,
            pool.clone(),
            table.clone(),
            num_tokens,
        )
        try:
            compare_close("keys", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_hints(got, pool, table, num_tokens),
                reading=READING,
            ) from None

    return Check(f"{text}: {title}", run)


@reseedable
def _round_trip(seed: int) -> Check:
    title = "keys (2, 3, 11, 4) written into a shuffled pool of blocks of 4 slots and read back equal the keys"

    def run(f: Functions) -> None:
        keys = seeded_randn(2, 3, 11, 4, seed=seed)
        order = torch.randperm(
            8, generator=torch.Generator().manual_seed(seed)
        )
        tables = order[:6].view(2, 3)
        pool = torch.zeros(8, 3, 4, 4, dtype=torch.float64)
        for row in range(2):
            for t in range(11):
                pool[tables[row, t // 4], :, t % 4] = keys[row, :, t]
        text = f"gather_blocks(pool (8, 3, 4, 4), block_tables {tables.tolist()}, num_tokens=11)"
        got = call(
            f["gather_blocks"], text, pool.clone(), tables.clone(), 11
        )
        try:
            compare_close("keys", got, keys, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_hints(got, pool, tables, 11),
                reading=READING,
            ) from None

    return Check(title, run)


CHECKS = [
    _gather(
        "one sequence, its blocks out of order, the last block part-filled",
        (6, 2, 4, 3),
        [[3, 0, 5]],
        10,
        seed=1,
    ),
    _gather(
        "two sequences of 7 tokens in blocks of 4",
        (5, 1, 4, 2),
        [[1, 4], [0, 2]],
        7,
        seed=2,
    ),
    _gather(
        "every slot filled: 2 blocks of 3, 6 tokens",
        (4, 2, 3, 2),
        [[2, 1]],
        6,
        seed=3,
    ),
    _round_trip(seed=4),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "every slot returned, the empty ones of the last block too",
        [("return tokens[:, :, :num_tokens]", "return tokens")],
        [
            "FAIL  1. gather_blocks(pool (6, 2, 4, 3)",
            "got:      keys of shape (1, 2, 12, 3)",
            "only the first num_tokens=10 hold tokens",
            "pass  3.",
        ],
    ),
    (
        "blocks read in pool order instead of table order",
        [("pool[block_tables]", "pool[block_tables.sort(dim=1).values]")],
        ["FAIL  1.", "not of the table", "pass  2.", "FAIL  4."],
    ),
]
