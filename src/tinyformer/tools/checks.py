"""Argument checks shared by the library's modules: each raises
TypeError/ValueError naming the argument and value."""

from __future__ import annotations

import torch
from torch import Tensor


def check_int(
    name: str, value: object, *, minimum: int | None = None
) -> int:
    """``value`` as an int (bools rejected), at least ``minimum`` when
    given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be an int, got {type(value).__name__} {value!r}"
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}")
    return value


def check_number(name: str, value: object, lower: float) -> float:
    """``value`` as a float greater than ``lower`` (bools rejected)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value > lower
    ):
        raise ValueError(
            f"{name}={value!r} must be a number greater than {lower:g}"
        )
    return float(value)


def check_non_negative(name: str, value: object) -> float:
    """``value`` as a float >= 0 (bools rejected)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value >= 0
    ):
        raise ValueError(f"{name}={value!r} must be a number >= 0")
    return float(value)


def check_probability(name: str, p: object) -> float:
    """``p`` as a float in [0, 1): a dropout probability."""
    if (
        isinstance(p, bool)
        or not isinstance(p, (int, float))
        or not 0.0 <= p < 1.0
    ):
        raise ValueError(f"{name}={p!r} must be a probability in [0, 1)")
    return float(p)


def check_floating_tensor(name: str, tensor: object) -> Tensor:
    """``tensor`` if it is a floating-point Tensor."""
    if not isinstance(tensor, Tensor) or not tensor.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point Tensor, got {type(tensor).__name__}"
        )
    return tensor


def check_attn_mask_dtype(attn_mask: object, dtype: torch.dtype) -> None:
    """An ``attn_mask`` is a Tensor, bool (True = may attend) or of the
    inputs' ``dtype`` (added to the scores)."""
    if not isinstance(attn_mask, Tensor):
        raise TypeError(
            f"attn_mask must be a Tensor or None, got {type(attn_mask).__name__}"
        )
    if attn_mask.dtype != torch.bool and attn_mask.dtype != dtype:
        raise TypeError(
            f"attn_mask must be bool (True = may attend) or {dtype} (added to scores), got {attn_mask.dtype}"
        )


def check_query_key_value(
    query: object, key: object, value: object
) -> None:
    """``query`` ``(..., L, D)``, ``key`` ``(..., S, D)`` and ``value``
    ``(..., S, Dv)``: floating tensors of one dtype, each at least 2-d, whose
    widths (query, key) and lengths (key, value) agree. The leading
    dimensions are left to the caller."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        check_floating_tensor(name, tensor)
        if tensor.dim() < 2:
            raise ValueError(
                f"{name} must have shape (..., length, features), got {tuple(tensor.shape)}"
            )
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query width {query.size(-1)} != key width {key.size(-1)} (shapes {tuple(query.shape)}, {tuple(key.shape)})"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"key length {key.size(-2)} != value length {value.size(-2)} (shapes {tuple(key.shape)}, {tuple(value.shape)})"
        )
