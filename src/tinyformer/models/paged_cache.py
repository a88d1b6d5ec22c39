"""A key-value cache in fixed-size blocks: PagedAttention's memory layout
(Kwon et al., 2023, §4.1-4.2).

Instead of one contiguous tensor per sequence, reserved for the longest
text it might become, the cache holds a pool of blocks of ``block_size``
tokens and, per sequence, a **block table**: the pool index of its first
block, its second, and so on. Token ``t`` of a sequence lives in block
``table[t // block_size]`` at slot ``t % block_size``
(:func:`physical_slot`). A sequence takes a new block only when its last
one is full, so at most ``block_size - 1`` slots per sequence and layer are
reserved and empty, whatever its final length. Blocks freed by one
sequence serve the next.

Attention itself is unchanged: a layer gathers the sequence's blocks in
table order and reads the same keys and values a contiguous cache holds
(vLLM's kernel reads the blocks in place instead of gathering them).

Shapes: ``N`` batch size, ``H_kv`` key/value heads, ``P`` cached tokens,
``D`` head width, ``B`` = ``block_size``, ``M`` blocks in the pool.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.cache import KVCache
from tinyformer.models.decoder_config import DecoderConfig
from tinyformer.tools.checks import check_int

__all__ = [
    "PagedKVCache",
    "gather_blocks",
    "physical_slot",
]


def physical_slot(
    block_table: Tensor, position: int, block_size: int
) -> tuple[int, int]:
    """Where token ``position`` of a sequence is stored: ``(block,
    slot)``, the pool index of its block and its place in the block.

    Args:
        block_table: ``(num_blocks,)`` int pool indices, the sequence's
            blocks in order.
        position: the token's index in the sequence, >= 0.
        block_size: tokens per block, >= 1.

    Returns:
        ``(block_table[position // block_size], position % block_size)``
        as ints.

    Raises:
        TypeError: if ``position`` or ``block_size`` is not an int.
        ValueError: if ``block_size`` < 1, ``position`` < 0, or the table
            has no block for ``position``.
    """
    check_int("block_size", block_size, minimum=1)
    check_int("position", position, minimum=0)
    index = position // block_size
    if index >= block_table.numel():
        raise ValueError(
            f"position={position} needs block {index} of the table; it has {block_table.numel()}"
        )
    return int(block_table[index]), position % block_size


def gather_blocks(
    pool: Tensor, block_tables: Tensor, num_tokens: int
) -> Tensor:
    """The first ``num_tokens`` keys (or values) of every sequence, read
    from the pool through its block table, as a contiguous cache holds them.

    Args:
        pool: ``(M, H_kv, B, D)`` the blocks of every sequence.
        block_tables: ``(N, n)`` int pool indices, row ``i`` sequence
            ``i``'s blocks in order.
        num_tokens: tokens to read per sequence, ``0 <= num_tokens <= n *
            B``.

    Returns:
        ``(N, H_kv, num_tokens, D)``: token ``t`` of sequence ``i`` is
        ``pool[block_tables[i, t // B], :, t % B]``.

    Raises:
        TypeError: if ``pool`` is not a tensor, ``block_tables`` not an
            integer tensor, or ``num_tokens`` not an int.
        ValueError: if the shapes are not as above or ``num_tokens`` is out
            of range.
    """
    if not isinstance(pool, Tensor) or pool.dim() != 4:
        kind = (
            tuple(pool.shape)
            if isinstance(pool, Tensor)
            else type(pool).__name__
        )
        raise ValueError(
            f"pool must be a (M, H_kv, B, D) tensor, got {kind}"
        )
    if (
        not isinstance(block_tables, Tensor)
        or block_tables.is_floating_point()
        or block_tables.dtype == torch.bool
    ):
        kind = (
            block_tables.dtype
            if isinstance(block_tables, Tensor)
            else type(block_tables).__name__
        )
        raise TypeError(
            f"block_tables must be an integer tensor, got {kind}"
        )
    if block_tables.dim() != 2:
        raise ValueError(
            f"block_tables must have shape (N, n), got {tuple(block_tables.shape)}"
        )
    capacity = block_tables.size(1) * pool.size(2)
    check_int("num_tokens", num_tokens, minimum=0)
    if num_tokens > capacity:
        raise ValueError(
            f"num_tokens={num_tokens} is more than the {capacity} slots of {block_tables.size(1)} blocks"
        )
    blocks = pool[block_tables.to(pool.device)]  # (N, n, H_kv, B, D)
    tokens = blocks.transpose(1, 2).flatten(2, 3)  # (N, H_kv, n * B, D)
    return tokens[:, :, :num_tokens]


class PagedKVCache(KVCache):
    """A :class:`~tinyformer.models.cache.KVCache` whose keys and values
    live in a pool of blocks of ``block_size`` tokens, found through a block
    table per sequence.

    Decoding with it gives the same logits as with a
    :class:`~tinyformer.models.cache.KVCache` (the same numbers are read
    back), and :meth:`crop` frees whole blocks, so speculative decoding can
    use it.

    Args:
        config: the model's config (no ``sliding_window``).
        batch_size: sequences N, >= 1.
        block_size: tokens per block, >= 1 (vLLM's default is 16).

    Attributes:
        block_tables: per sequence, the pool indices of its blocks.
        num_pool_blocks: blocks in the pool, in use or free.

    Raises:
        TypeError: for a config that is not a DecoderConfig, or a size
            that is not an int.
        ValueError: for ``block_size`` < 1 or a config with a
            ``sliding_window``.
    """

    def __init__(
        self,
        config: DecoderConfig,
        batch_size: int,
        *,
        block_size: int = 16,
    ) -> None:
        super().__init__(config, batch_size)
        self.block_size = check_int("block_size", block_size, minimum=1)
        if config.sliding_window is not None:
            raise ValueError(
                f"a PagedKVCache takes no sliding_window (config has {config.sliding_window})"
            )
        self.block_tables: list[list[int]] = [[] for _ in range(batch_size)]
        self._free: list[int] = []
        self._key_pool: list[Tensor | None] = [None] * config.num_layers
        self._value_pool: list[Tensor | None] = [None] * config.num_layers
        self._length = 0

    @property
    def num_cached(self) -> int:
        return self._length

    @property
    def num_pool_blocks(self) -> int:
        pool = self._key_pool[0]
        return 0 if pool is None else pool.size(0)

    @property
    def nbytes(self) -> int:
        """The bytes of the blocks the sequences hold (free blocks
        excluded): their filled slots and the empty ones of each last
        block."""
        used = sum(len(table) for table in self.block_tables)
        total = self.num_pool_blocks
        if total == 0:
            return 0
        pool_bytes = sum(
            t.numel() * t.element_size()
            for t in (*self._key_pool, *self._value_pool)
            if t is not None
        )
        return pool_bytes * used // total

    def block_table(self) -> Tensor:
        """``(N, blocks)`` int64: every sequence's block table (they have
        the same length: the sequences of a batch are equally long)."""
        return torch.tensor(self.block_tables, dtype=torch.long).reshape(
            self.batch_size, -1
        )

    def _gather(self, pool: Tensor) -> Tensor:
        """``(N, H_kv, P, D)``: the sequences' blocks in table order."""
        return gather_blocks(pool, self.block_table(), self._length)

    def update(
        self, layer: int, key: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The layer's cached keys and values gathered from its blocks,
        with the new ones appended; as
        :meth:`~tinyformer.models.cache.KVCache.update`."""
        self._pending[layer] = (key, value)
        if self._length:
            key = torch.cat((self._gather(self._key_pool[layer]), key), 2)
            value = torch.cat(
                (self._gather(self._value_pool[layer]), value), 2
            )
        return key, value

    def _allocate(
        self, count: int, like: list[tuple[Tensor, Tensor]]
    ) -> list[int]:
        """``count`` free block indices, growing every layer's pool (to
        twice its size at least) when too few are free."""
        missing = count - len(self._free)
        if missing > 0:
            grow = max(missing, self.num_pool_blocks)
            start = self.num_pool_blocks
            for layer, (key, value) in enumerate(like):
                for pools, tensor in (
                    (self._key_pool, key),
                    (self._value_pool, value),
                ):
                    shape = (
                        grow,
                        tensor.size(1),
                        self.block_size,
                        tensor.size(3),
                    )
                    new = tensor.new_zeros(shape)
                    old = pools[layer]
                    pools[layer] = (
                        new if old is None else torch.cat((old, new))
                    )
            self._free.extend(range(start, start + grow))
        # the most recently freed block first (a stack): a sequence's
        # blocks need not lie in the pool in its order
        return [self._free.pop() for _ in range(count)]

    def _commit(self, attention_mask: Tensor) -> None:
        self._check_pending()
        staged = [
            self._pending[layer] for layer in range(self.config.num_layers)
        ]
        new = staged[0][0].size(2)
        end = self._length + new
        needed = -(-end // self.block_size) - len(self.block_tables[0])
        if needed > 0:
            fresh = self._allocate(needed * self.batch_size, staged)
            for row, table in enumerate(self.block_tables):
                table.extend(fresh[row * needed : (row + 1) * needed])
        table = self.block_table()  # (N, n)
        position = torch.arange(self._length, end)
        blocks = table[:, position // self.block_size]  # (N, L)
        slots = position % self.block_size  # (L,)
        for layer, (key, value) in enumerate(staged):
            # pool[(N, L) blocks, :, (L,) slots] is (N, L, H_kv, D)
            self._key_pool[layer][blocks, :, slots] = key.transpose(1, 2)
            self._value_pool[layer][blocks, :, slots] = value.transpose(
                1, 2
            )
        self._length = end
        self._pending = {}
        self.attention_mask = attention_mask

    def crop(self, seq_len: int) -> None:
        """Forget every token after the first ``seq_len`` and return the
        blocks no longer needed to the pool; as
        :meth:`~tinyformer.models.cache.KVCache.crop`.

        Raises:
            ValueError: if ``seq_len`` is negative or more than the tokens
                held.
        """
        check_int("seq_len", seq_len, minimum=0)
        if seq_len > self.seq_len:
            raise ValueError(
                f"seq_len={seq_len} is more than the {self.seq_len} tokens the cache holds"
            )
        keep = -(-seq_len // self.block_size)
        for table in self.block_tables:
            self._free.extend(table[keep:])
            del table[keep:]
        self._length = seq_len
        self.attention_mask = (
            None if seq_len == 0 else self.attention_mask[:, :seq_len]
        )

    def __repr__(self) -> str:
        return (
            f"PagedKVCache(block_size={self.block_size}, num_layers={self.config.num_layers}, "
            f"batch_size={self.batch_size}, seq_len={self.seq_len}, num_cached={self.num_cached}, "
            f"blocks={sum(map(len, self.block_tables))} of {self.num_pool_blocks})"
        )
