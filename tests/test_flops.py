"""count_flops: two operations per multiply-add, whether a product allocates
its result or accumulates into an existing tensor."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tinyformer.bridges.flops import count_flops
from tinyformer.models.flash import flash_attention


def test_matrix_product_counts_two_per_multiply_add() -> None:
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 11)
    assert count_flops(torch.bmm, a, b) == 2 * 3 * 5 * 7 * 11


def test_in_place_accumulation_counts_as_the_product() -> None:
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 11)
    acc = torch.zeros(3, 5, 11)
    assert count_flops(acc.baddbmm_, a, b) == count_flops(torch.baddbmm, acc, a, b)
    assert count_flops(acc.baddbmm_, a, b) == 2 * 3 * 5 * 7 * 11
    m, n = torch.randn(5, 7), torch.randn(7, 11)
    acc2 = torch.zeros(5, 11)
    assert count_flops(acc2.addmm_, m, n) == 2 * 5 * 7 * 11


def test_cpu_attention_kernel_is_counted() -> None:
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in "qkv")
    assert count_flops(F.scaled_dot_product_attention, q, k, v) == 4 * 2 * 16 * 16 * 8


def test_tiled_forward_does_the_exact_forms_arithmetic() -> None:
    q, k, v = (torch.randn(1, 2, 256, 16) for _ in "qkv")
    with torch.no_grad():
        assert count_flops(flash_attention, q, k, v) == 4 * 2 * 256 * 256 * 16


def test_rejects_a_non_callable() -> None:
    with pytest.raises(TypeError, match="fn="):
        count_flops(3)
