"""Floating-point operations of a call, counted by PyTorch's
``torch.utils.flop_counter.FlopCounterMode``.

The counter knows the matrix products and the CUDA attention kernels; this
module also registers PyTorch's CPU attention kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``) with the counter's
own formula for attention (``2 L S D`` multiply-adds for the scores and as
many for the weighted values, per head: 4 L S D operations), so attention
run on the CPU is counted too. The counter's formulas for ``baddbmm`` and
``addmm`` are registered for their in-place forms (``Tensor.baddbmm_``,
``Tensor.addmm_``) as well, which the counter does not know: a product
accumulated into an existing tensor, as a tiled kernel does, is as much
arithmetic as one that allocates its result. A count is exact and the same on every
machine, unlike a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

__all__ = ["count_flops"]


def _cpu_attention_flops(
    query_shape: torch.Size,
    key_shape: torch.Size,
    value_shape: torch.Size,
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _accumulated_bmm_flops(
    self_shape: torch.Size,
    batch1_shape: torch.Size,
    batch2_shape: torch.Size,
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    # self += batch1 @ batch2: (b, m, k) @ (b, k, n), b m n k multiply-adds.
    b, m, k = batch1_shape
    return 2 * b * m * k * batch2_shape[-1]


def _accumulated_mm_flops(
    self_shape: torch.Size,
    mat1_shape: torch.Size,
    mat2_shape: torch.Size,
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    # self += mat1 @ mat2: (m, k) @ (k, n), m n k multiply-adds.
    m, k = mat1_shape
    return 2 * m * k * mat2_shape[-1]


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """The floating-point operations of ``fn(*args, **kwargs)``: two per
    multiply-add of every matrix product and attention kernel.

    Element-wise work (softmax, norms, activations) is not counted; it is
    a small share of a Transformer's operations.

    Args:
        fn: the function to run once; its result is dropped.
        *args: positional arguments for ``fn``.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        The count, an int.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    aten = torch.ops.aten
    counter = FlopCounterMode(
        display=False,
        custom_mapping={
            aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
            aten.baddbmm_: _accumulated_bmm_flops,
            aten.addmm_: _accumulated_mm_flops,
        },
    )
    with counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())
