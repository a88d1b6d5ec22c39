"""Coding exercise gather-blocks (chapter 10, "Serving attention: a smaller
cache and fewer passes").

Objective assessed: read a sequence's keys or values out of a paged cache
through its block table.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises gather-blocks gather_blocks.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- gather-blocks path/to/gather_blocks.py

You may use torch (indexing with a tensor, ``Tensor.transpose``,
``Tensor.flatten``, ...), but not tinyformer's own function."""

from torch import Tensor


def gather_blocks(
    pool: Tensor, block_tables: Tensor, num_tokens: int
) -> Tensor:
    """The first ``num_tokens`` keys of every sequence, read from a pool
    of blocks through the sequences' block tables.

    Args:
        pool: ``(M, H_kv, B, D)`` M blocks of B tokens each.
        block_tables: ``(N, n)`` int64: row ``i`` holds the pool indices of
            sequence ``i``'s blocks, in the order of its tokens.
        num_tokens: tokens to read per sequence, at most ``n * B``.

    Returns:
        ``(N, H_kv, num_tokens, D)``: token ``t`` of sequence ``i`` is
        ``pool[block_tables[i, t // B], :, t % B]``.
    """
    raise NotImplementedError
