"""tinyformer.bridges.memory.peak_memory, checked on allocations of known size."""

import pytest
import torch

from tinyformer.bridges.memory import PeakMemory, peak_memory

MB = 1000 * 1000


def test_one_known_allocation_is_measured_to_the_byte():
    result = peak_memory(torch.empty, 1000, 1000)  # float32: 4 bytes each
    assert isinstance(result, PeakMemory)
    assert result.peak_bytes == 4 * MB
    assert "aten::empty" in result.ops


def test_peak_is_the_most_held_at_once_not_the_sum():
    def allocate_and_release():
        a = torch.empty(MB, dtype=torch.uint8)
        b = torch.empty(2 * MB, dtype=torch.uint8)  # 3 MB held here
        del a
        c = torch.empty(MB // 2, dtype=torch.uint8)  # 2.5 MB held here
        return b, c

    assert peak_memory(allocate_and_release).peak_bytes == 3 * MB


def test_memory_held_before_the_call_is_not_counted():
    held = torch.empty(5 * MB, dtype=torch.uint8)
    assert peak_memory(held.zero_).peak_bytes == 0  # in place: no copy
    assert peak_memory(torch.neg, held).peak_bytes == 5 * MB


def test_arguments_are_passed_through():
    shape = {"size": (250, 1000), "dtype": torch.float64}
    assert peak_memory(torch.zeros, **shape).peak_bytes == 2 * MB


def test_not_callable_raises_type_error_naming_it():
    with pytest.raises(TypeError, match="fn="):
        peak_memory(42)
