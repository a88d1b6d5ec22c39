"""A key-value cache stored in a few bits per number: keys quantised per
channel and values per token, as KIVI (Liu et al., 2024, §3-4) found they
must be, dequantised when a layer reads them.

Asymmetric min-max quantisation with ``b`` bits maps each number ``x`` of a
group to the code ``round((x - min) / s)``, ``s = (max - min) / (2^b - 1)``,
and back to ``code * s + min``: an error of at most ``s / 2``. A group is
the set of numbers that share one ``(s, min)`` pair:

- **keys, per channel**: for each channel of each head, a group is
  ``group_size`` consecutive tokens. KIVI's reason: a few key channels hold
  outliers far larger than the rest, so a per-token scale would be set by
  them and crush the other channels to a handful of levels. The newest
  tokens that do not yet fill a group stay in full precision (KIVI's
  residual), fewer than ``group_size`` per head.
- **values, per token**: each token's ``D`` numbers of a head form a group,
  quantised as soon as the token is cached. Values have no outlier
  channels, and attention mixes them per token.

With ``nbits = 4`` or ``2`` two or four codes share one byte. Each group
also stores its scale and minimum, in the model's dtype.

Shapes: ``N`` batch size, ``H_kv`` key/value heads, ``P`` cached tokens,
``D`` head width, ``G`` = ``group_size``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.cache import KVCache
from tinyformer.models.decoder_config import DecoderConfig
from tinyformer.tools.checks import check_int

__all__ = [
    "QuantizedKVCache",
    "dequantize",
    "quantize",
]

#: the bit widths a code may have: 8, 4 or 2 bits, packed into bytes
SUPPORTED_NBITS = (2, 4, 8)


def quantize(
    x: Tensor, dim: int, nbits: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Asymmetric min-max quantisation of ``x`` with one scale and minimum
    per slice along ``dim``.

    Args:
        x: a floating-point tensor.
        dim: the dimension a group runs along (its numbers share a scale).
        nbits: bits per code, 2, 4 or 8.

    Returns:
        ``(codes, scale, minimum)``: ``codes`` uint8 of ``x``'s shape with
        values in ``[0, 2^nbits - 1]`` (not yet packed), ``scale`` and
        ``minimum`` of ``x``'s shape with ``dim`` reduced to 1. A constant
        group gets the scale 1, so that it dequantises exactly.

    Raises:
        TypeError: if ``x`` is not a floating-point tensor or ``nbits`` not
            an int.
        ValueError: if ``nbits`` is not 2, 4 or 8.
    """
    if not isinstance(x, Tensor) or not x.is_floating_point():
        kind = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating-point Tensor, got {kind}")
    _check_nbits(nbits)
    levels = 2**nbits - 1
    low = x.amin(dim=dim, keepdim=True)
    high = x.amax(dim=dim, keepdim=True)
    span = high - low
    scale = torch.where(span > 0, span / levels, torch.ones_like(span))
    codes = ((x - low) / scale).round_().clamp_(0, levels).to(torch.uint8)
    return codes, scale, low


def dequantize(codes: Tensor, scale: Tensor, minimum: Tensor) -> Tensor:
    """``codes * scale + minimum``, in the dtype of ``scale``: the inverse
    of :func:`quantize` up to half a step per number."""
    return codes.to(scale.dtype) * scale + minimum


def _check_nbits(nbits: object) -> int:
    check_int("nbits", nbits)
    if nbits not in SUPPORTED_NBITS:
        raise ValueError(
            f"nbits must be one of {SUPPORTED_NBITS}, got {nbits}"
        )
    return nbits


def _pack(codes: Tensor, nbits: int) -> Tensor:
    """``8 // nbits`` codes of the last dimension per byte."""
    per_byte = 8 // nbits
    if per_byte == 1:
        return codes
    grouped = codes.unflatten(-1, (-1, per_byte)).to(torch.int32)
    shifts = torch.arange(per_byte, device=codes.device) * nbits
    return (grouped << shifts).sum(-1).to(torch.uint8)


def _unpack(packed: Tensor, nbits: int) -> Tensor:
    """The inverse of :func:`_pack`."""
    per_byte = 8 // nbits
    if per_byte == 1:
        return packed
    shifts = torch.arange(per_byte, device=packed.device) * nbits
    codes = (packed[..., None].to(torch.int32) >> shifts) & (2**nbits - 1)
    return codes.flatten(-2).to(torch.uint8)


class _Layer:
    """One layer's quantised keys and values, and the full-precision keys
    of the group still filling."""

    def __init__(self) -> None:
        self.key_codes: Tensor | None = None  # (N, H_kv, P_q, D / per byte)
        self.key_scale: Tensor | None = None  # (N, H_kv, P_q / G, D)
        self.key_min: Tensor | None = None  # (N, H_kv, P_q / G, D)
        self.key_residual: Tensor | None = None  # (N, H_kv, P - P_q, D)
        self.value_codes: Tensor | None = None  # (N, H_kv, P, D / per byte)
        self.value_scale: Tensor | None = None  # (N, H_kv, P, 1)
        self.value_min: Tensor | None = None  # (N, H_kv, P, 1)

    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(
            t
            for t in (
                self.key_codes,
                self.key_scale,
                self.key_min,
                self.key_residual,
                self.value_codes,
                self.value_scale,
                self.value_min,
            )
            if t is not None
        )


def _cat(old: Tensor | None, new: Tensor, dim: int) -> Tensor:
    return new if old is None else torch.cat((old, new), dim=dim)


class QuantizedKVCache(KVCache):
    """A :class:`~tinyformer.models.cache.KVCache` that stores keys per
    channel and values per token in ``nbits`` bits (KIVI, Liu et al.,
    2024), for :meth:`~tinyformer.models.decoder.TinyDecoder.generate`'s
    ``cache`` argument or a forward pass's.

    A layer reads back ``dequantize(codes)`` for every quantised token and
    the exact keys of the newest, not yet grouped, tokens; the new tokens
    of a pass are exact in that pass and quantised when it commits.

    Args:
        config: the model's config (no ``sliding_window``).
        batch_size: sequences N, >= 1.
        nbits: bits per cached number, 8, 4 or 2.
        group_size: tokens per key group (KIVI's G), >= 1. The cached
            widths must be multiples of ``8 // nbits``, the codes packed
            per byte.

    Raises:
        TypeError: for a config that is not a DecoderConfig, or a size
            that is not an int.
        ValueError: for ``nbits`` not 2, 4 or 8, ``group_size`` < 1, a
            config with a ``sliding_window`` (its eviction would need to
            split key groups) or a head width the codes do not pack into.
    """

    def __init__(
        self,
        config: DecoderConfig,
        batch_size: int,
        *,
        nbits: int = 8,
        group_size: int = 32,
    ) -> None:
        super().__init__(config, batch_size)
        self.nbits = _check_nbits(nbits)
        self.group_size = check_int("group_size", group_size, minimum=1)
        if config.sliding_window is not None:
            raise ValueError(
                f"a QuantizedKVCache takes no sliding_window (config has {config.sliding_window}): "
                "evicting single tokens would split the key groups"
            )
        per_byte = 8 // nbits
        widths = (
            (config.kv_lora_rank, config.qk_rope_head_dim)
            if config.kv_lora_rank is not None
            else (config.head_dim,)
        )
        for width in widths:
            if width % per_byte:
                raise ValueError(
                    f"nbits={nbits} packs {per_byte} codes per byte; a cached width of {width} is not a "
                    "multiple of it"
                )
        self._layers = [_Layer() for _ in range(config.num_layers)]
        self._length = 0  # cached tokens P

    @property
    def num_cached(self) -> int:
        return self._length

    @property
    def nbytes(self) -> int:
        """The bytes of the codes, scales, minimums and full-precision
        residual keys (the masks excluded)."""
        return sum(
            t.numel() * t.element_size()
            for layer in self._layers
            for t in layer.tensors()
        )

    def _read(self, layer: int) -> tuple[Tensor | None, Tensor | None]:
        """A layer's cached keys and values, dequantised."""
        state = self._layers[layer]
        keys = values = None
        if state.key_codes is not None:
            codes = _unpack(state.key_codes, self.nbits)
            groups = codes.unflatten(2, (-1, self.group_size))
            keys = dequantize(
                groups,
                state.key_scale[:, :, :, None],
                state.key_min[:, :, :, None],
            ).flatten(2, 3)
        if state.key_residual is not None:
            keys = _cat(keys, state.key_residual, 2)
        if state.value_codes is not None:
            values = dequantize(
                _unpack(state.value_codes, self.nbits),
                state.value_scale,
                state.value_min,
            )
        return keys, values

    def update(
        self, layer: int, key: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The layer's cached keys and values, dequantised, with the new
        ones (exact) appended; as
        :meth:`~tinyformer.models.cache.KVCache.update`."""
        past_key, past_value = self._read(layer)
        self._pending[layer] = (key, value)
        if past_key is not None and past_value is not None:
            key = torch.cat((past_key, key), dim=2)
            value = torch.cat((past_value, value), dim=2)
        return key, value

    def _commit(self, attention_mask: Tensor) -> None:
        self._check_pending()
        size = self.group_size
        for layer, (key, value) in self._pending.items():
            state = self._layers[layer]
            # keys: whole groups of G tokens, per channel; the rest waits
            residual = _cat(state.key_residual, key, 2)
            whole = residual.size(2) // size * size
            if whole:
                groups = residual[:, :, :whole].unflatten(2, (-1, size))
                codes, scale, low = quantize(
                    groups, dim=3, nbits=self.nbits
                )
                state.key_codes = _cat(
                    state.key_codes,
                    _pack(codes.flatten(2, 3), self.nbits),
                    2,
                )
                state.key_scale = _cat(
                    state.key_scale, scale[:, :, :, 0], 2
                )
                state.key_min = _cat(state.key_min, low[:, :, :, 0], 2)
            rest = residual[:, :, whole:]
            state.key_residual = rest.clone() if rest.size(2) else None
            # values: every token at once, over its channels
            codes, scale, low = quantize(value, dim=-1, nbits=self.nbits)
            state.value_codes = _cat(
                state.value_codes, _pack(codes, self.nbits), 2
            )
            state.value_scale = _cat(state.value_scale, scale, 2)
            state.value_min = _cat(state.value_min, low, 2)
        self._length += next(iter(self._pending.values()))[0].size(2)
        self._pending = {}
        self.attention_mask = attention_mask

    def crop(self, seq_len: int) -> None:
        """Refused: a quantised key group cannot be cut back exactly.

        Raises:
            ValueError: always.
        """
        raise ValueError(
            f"a QuantizedKVCache cannot be cropped to seq_len={seq_len}: its key groups are quantised "
            "together; speculative decoding needs a KVCache"
        )

    def __repr__(self) -> str:
        return (
            f"QuantizedKVCache(nbits={self.nbits}, group_size={self.group_size}, "
            f"num_layers={self.config.num_layers}, batch_size={self.batch_size}, "
            f"seq_len={self.seq_len}, num_cached={self.num_cached})"
        )
