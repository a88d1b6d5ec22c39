"""What a causal decoder keeps between steps, and the masks it attends with:
the key-value cache (:class:`KVCache`), its size in bytes
(:func:`kv_cache_bytes`), the causal block under a cache
(:func:`causal_block_mask`) and the sliding window
(:func:`sliding_window_mask`).

Shapes: ``N`` batch size, ``L`` new tokens, ``P`` cached positions,
``S = P + L`` keys, ``H_kv`` key/value heads, ``D`` head width.

Under a cache, query ``i`` of the ``L`` new tokens is the ``P + i``-th key:
it may attend to keys ``j <= P + i``. The causal block is aligned at the
bottom right of the ``(L, S)`` score matrix (``torch.ones(L, S).tril(P)``),
not at the top left as ``is_causal`` is.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from tinyformer.models.decoder_config import DecoderConfig
from tinyformer.tools.checks import (
    check_int,
)

__all__ = [
    "KVCache",
    "causal_block_mask",
    "kv_cache_bytes",
    "sliding_window_mask",
]


def kv_cache_bytes(
    config: DecoderConfig,
    batch_size: int,
    seq_len: int,
    dtype: torch.dtype = torch.float32,
) -> int:
    """``2 * layers * H_kv * D * S * bytes`` per sequence, times ``N``: what
    a key-value cache of ``S`` positions holds (keys and values of every
    layer); with multi-head latent attention (``config.kv_lora_rank``),
    ``layers * (d_c + d_h^R) * S * bytes`` per sequence (DeepSeek-V2,
    Table 1).

    Args:
        config: the model's config.
        batch_size: sequences N, >= 0.
        seq_len: cached positions S, >= 0.
        dtype: the dtype of the cached keys and values.

    Returns:
        Bytes, an int.

    Raises:
        TypeError: if ``batch_size`` or ``seq_len`` is not an int.
        ValueError: if one is negative.
    """
    check_int("batch_size", batch_size, minimum=0)
    check_int("seq_len", seq_len, minimum=0)
    element = torch.empty((), dtype=dtype).element_size()
    if config.kv_lora_rank is not None:
        # multi-head latent attention: a latent and one rotary key per token
        per_token = config.kv_lora_rank + config.qk_rope_head_dim
        return (
            config.num_layers * per_token * seq_len * batch_size * element
        )
    return (
        2
        * config.num_layers
        * config.kv_heads
        * config.head_dim
        * seq_len
        * batch_size
        * element
    )


def causal_block_mask(
    seq_len_q: int,
    seq_len_k: int,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Boolean ``(L, S)`` mask, True where new query ``i`` may attend to key
    ``j``: ``j <= (S - L) + i``, the causal rule aligned at the bottom right.

    The ``L`` queries are the last ``L`` of the ``S`` positions (the first
    ``S - L`` are in the cache). With ``L == S`` this is
    :func:`~tinyformer.models.attention.causal_mask`.

    Raises:
        TypeError: if a length is not an int.
        ValueError: if a length is negative or ``seq_len_q > seq_len_k``.
    """
    check_int("seq_len_q", seq_len_q, minimum=0)
    check_int("seq_len_k", seq_len_k, minimum=0)
    if seq_len_q > seq_len_k:
        raise ValueError(
            f"seq_len_q={seq_len_q} new queries cannot outnumber seq_len_k={seq_len_k} keys"
        )
    past = seq_len_k - seq_len_q
    return torch.ones(
        seq_len_q, seq_len_k, dtype=torch.bool, device=device
    ).tril(diagonal=past)


def sliding_window_mask(
    seq_len_q: int,
    seq_len_k: int,
    window: int,
    *,
    num_sink_tokens: int = 0,
    device: torch.device | str | None = None,
) -> Tensor:
    """Boolean ``(L, S)`` mask of causal attention within a sliding window,
    with attention sinks: True where new query ``i`` may attend to key
    ``j``.

    The ``L`` queries are the last ``L`` of ``S`` positions, so query ``i``
    sits at ``p = S - L + i`` (:func:`causal_block_mask`). It sees key ``j``
    if ``j <= p`` and either ``p - j < window`` (the ``window`` newest
    keys, its own included: Mistral's and Hugging Face's convention) or
    ``j < num_sink_tokens`` (StreamingLLM's sinks, the first tokens of the
    text, Xiao et al., 2024). Every query sees at most ``window +
    num_sink_tokens`` keys.

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if a length is negative, ``seq_len_q > seq_len_k``,
            ``window < 1`` or ``num_sink_tokens < 0``.
    """
    check_int("window", window, minimum=1)
    check_int("num_sink_tokens", num_sink_tokens, minimum=0)
    allowed = causal_block_mask(seq_len_q, seq_len_k, device=device)
    past = seq_len_k - seq_len_q
    query = torch.arange(seq_len_q, device=device)[:, None] + past  # (L, 1)
    key = torch.arange(seq_len_k, device=device)[None, :]  # (1, S)
    near = (query - key < window) | (key < num_sink_tokens)
    return allowed & near


class KVCache:
    """The keys and values of every layer for the positions seen so far,
    so that each new token's forward pass computes only its own row.

    Attributes:
        config: the config of the model the cache serves.
        batch_size: sequences N.
        keys: per layer, ``(N, H_kv, P, D)`` keys (rotated already, under
            rotary positions), or None before the first pass.
        values: per layer, ``(N, H_kv, P, D)`` values, or None. With
            multi-head latent attention (``config.kv_lora_rank``) the keys
            are the ``(N, 1, P, d_c)`` latents and the values the ``(N, 1,
            P, d_h^R)`` shared rotary keys.
        attention_mask: ``(N, T)`` bool, True = real token, for every one
            of the ``T`` tokens seen so far, or None.
        key_index: with a ``sliding_window``, ``(N, P)`` the token index
            (column of ``attention_mask``) of each cached key; else None
            (the keys are all the tokens seen, in order).
        key_positions: with a ``sliding_window``, ``(N, P)`` the position
            of each cached key (positions count real tokens); else None.
        key_mask: with a ``sliding_window``, ``(N, P)`` bool, True where a
            cached key is a real token; else None.

    Without a ``sliding_window`` the cache keeps every key (``P = T``).
    With one it keeps, after each pass, the last ``sliding_window - 1``
    tokens (all a later query can see) and the first ``num_sink_tokens``
    real tokens of each row, so ``P <= sliding_window - 1 +
    num_sink_tokens`` however long the text.

    A cache is bound to the first model that fills it; passing it to
    another model raises ``ValueError``.
    """

    def __init__(self, config: DecoderConfig, batch_size: int) -> None:
        if not isinstance(config, DecoderConfig):
            raise TypeError(
                f"config must be a DecoderConfig, got {type(config).__name__}"
            )
        self.config = config
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.keys: list[Tensor | None] = [None] * config.num_layers
        self.values: list[Tensor | None] = [None] * config.num_layers
        self.attention_mask: Tensor | None = None
        self.key_index: Tensor | None = None
        self.key_positions: Tensor | None = None
        self.key_mask: Tensor | None = None
        # the TinyDecoder that filled it
        self._owner: weakref.ref[torch.nn.Module] | None = None
        # a pass's keys and values, per layer, until the pass commits them
        self._pending: dict[int, tuple[Tensor, Tensor]] = {}

    @property
    def seq_len(self) -> int:
        """The number of tokens seen so far, T (padding included)."""
        if self.attention_mask is None:
            return 0
        return self.attention_mask.size(1)

    @property
    def num_cached(self) -> int:
        """The number of cached keys per row and layer, P."""
        key = self.keys[0]
        return 0 if key is None else key.size(2)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values (the masks excluded)."""
        return sum(
            t.numel() * t.element_size()
            for t in (*self.keys, *self.values)
            if t is not None
        )

    def update(
        self, layer: int, key: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor]:
        """A layer's cached keys and values with its new ones appended.

        The cache itself changes only when the decoder's pass has run
        every layer (the decoder then commits the staged keys and values
        with the padding mask): a pass interrupted between layers (an error, or
        Ctrl-C in a notebook) leaves the cache as it was before the pass,
        never with some layers a step ahead of the others.

        Args:
            layer: the layer's index.
            key: ``(N, H_kv, L, D)`` new keys.
            value: ``(N, H_kv, L, D)`` new values.

        Returns:
            ``(keys, values)``, each ``(N, H_kv, P + L, D)``.
        """
        past_key, past_value = self.keys[layer], self.values[layer]
        if past_key is not None and past_value is not None:
            key = torch.cat((past_key, key), dim=2)
            value = torch.cat((past_value, value), dim=2)
        self._pending[layer] = (key, value)
        return key, value

    def crop(self, seq_len: int) -> None:
        """Forget every token after the first ``seq_len``: their keys,
        values and padding, in every layer.

        Speculative decoding (:mod:`tinyformer.models.speculative`) runs
        the drafted tokens through the model in one pass and then keeps
        only the accepted ones; as Hugging Face's ``DynamicCache.crop``.

        Args:
            seq_len: tokens to keep, ``0 <= seq_len <= self.seq_len``.

        Raises:
            ValueError: if ``seq_len`` is out of that range, or the
                config has a ``sliding_window`` (its cache has dropped
                keys that an earlier length would need again).
        """
        check_int("seq_len", seq_len, minimum=0)
        if seq_len > self.seq_len:
            raise ValueError(
                f"seq_len={seq_len} is more than the {self.seq_len} tokens the cache holds"
            )
        if self.config.sliding_window is not None:
            raise ValueError(
                f"a cache with sliding_window={self.config.sliding_window} cannot be cropped: it drops "
                "keys as it goes, and a shorter text may need them again"
            )
        if seq_len == 0:
            self.keys = [None] * self.config.num_layers
            self.values = [None] * self.config.num_layers
            self.attention_mask = None
            return
        self.keys = [
            None if k is None else k[:, :, :seq_len] for k in self.keys
        ]
        self.values = [
            None if v is None else v[:, :, :seq_len] for v in self.values
        ]
        if self.attention_mask is not None:
            self.attention_mask = self.attention_mask[:, :seq_len]

    def _begin(self) -> None:
        """Forget what an interrupted pass left pending."""
        self._pending = {}

    def _check_pending(self) -> None:
        """Refuse to commit a pass that did not run every layer."""
        if sorted(self._pending) != list(range(self.config.num_layers)):
            raise RuntimeError(
                f"a pass updated layers {sorted(self._pending)} of {self.config.num_layers}; the cache is unchanged"
            )

    def _commit(self, attention_mask: Tensor) -> None:
        """Make a finished pass's keys and values the cache's, and record
        the padding of every token seen."""
        self._check_pending()
        for layer, (key, value) in self._pending.items():
            self.keys[layer], self.values[layer] = key, value
        self._pending = {}
        self.attention_mask = attention_mask

    def _evict(self) -> None:
        """Drop the keys no later query can see (sliding window only)."""
        window = self.config.sliding_window
        sinks = self.config.num_sink_tokens
        index, positions, real = (
            self.key_index,
            self.key_positions,
            self.key_mask,
        )
        if window is None or index is None:
            return
        recent = min(window - 1, self.seq_len)
        if index.size(1) <= recent + sinks:
            return
        # the next query is token T: it sees tokens > T - window
        in_window = index > self.seq_len - window  # (N, C)
        sink = real & (positions < sinks) & ~in_window
        column = torch.arange(index.size(1), device=index.device)
        # per row, the sink columns first, then the window, in order
        sink_order = torch.argsort(
            (~sink).long() * index.size(1) + column, dim=1
        )[:, :sinks]
        window_order = torch.argsort(
            (~in_window).long() * index.size(1) + column, dim=1
        )[:, :recent]
        keep = torch.cat((sink_order, window_order), dim=1)  # (N, P')
        valid = torch.cat(
            (sink.gather(1, sink_order), real.gather(1, window_order)), 1
        )
        self.key_index = index.gather(1, keep)
        self.key_positions = positions.gather(1, keep)
        self.key_mask = valid
        gather = keep[:, None, :, None]  # (N, 1, P', 1)
        for layer, (key, value) in enumerate(
            zip(self.keys, self.values, strict=False)
        ):
            if key is None or value is None:
                continue
            # (multi-head latent attention caches keys and values of
            # different widths: the latent and the rotary key)
            for store, tensor in ((self.keys, key), (self.values, value)):
                shape = (*tensor.shape[:2], keep.size(1), tensor.size(3))
                store[layer] = tensor.gather(2, gather.expand(shape))

    def __repr__(self) -> str:
        return (
            f"KVCache(num_layers={self.config.num_layers}, batch_size={self.batch_size}, "
            f"num_kv_heads={self.config.kv_heads}, head_dim={self.config.head_dim}, "
            f"seq_len={self.seq_len}, num_cached={self.num_cached})"
        )
