"""What the length labs of chapters 5 and 7 share: the settings of training
short and testing long (:class:`LengthLabConfig`), and the mean and spread
over seeds of a result's accuracies (:func:`seed_mean`,
:func:`seed_spread`). The grid of jobs runs on
:func:`tinyformer.tools.jobs.run_jobs`.

Each lab (:mod:`tinyformer.labs.extrapolation`, encoders;
:mod:`tinyformer.labs.long_context`, causal decoders) keeps its own tasks,
models and fields; a lab's config is a frozen dataclass that inherits these
methods and calls :meth:`LengthLabConfig.check_schedule` from its
``__post_init__``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from tinyformer.tools.checks import check_int
from tinyformer.tools.config import TomlConfig

__all__ = [
    "LengthLabConfig",
    "check_positive_number",
    "seed_mean",
    "seed_spread",
]


def check_positive_number(name: str, value: object) -> float:
    """``value`` if it is an int or float > 0 (not a bool).

    Raises:
        ValueError: ``"{name}={value!r} must be a number > 0"``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value > 0
    ):
        raise ValueError(f"{name}={value!r} must be a number > 0")
    return value


class LengthLabConfig(TomlConfig):
    """The settings a length lab shares, read from the ``[lab]`` table:
    ``train_len`` (L_train, the longest training sequence, tokens),
    ``min_train_len``, ``steps``, ``batch_size``, ``learning_rate``,
    ``seeds`` (one model per seed and scheme), ``length_factors`` (test at
    ``factor * train_len`` tokens), ``eval_size`` and ``eval_seed``.

    A lab sets the smallest ``train_len`` and ``min_train_len`` its tasks
    allow in ``train_len_minimum`` and ``min_train_len_minimum``."""

    toml_table: ClassVar[str] = "lab"
    train_len_minimum: ClassVar[int] = 3
    min_train_len_minimum: ClassVar[int] = 2

    def check_schedule(self) -> None:
        """Check the shared fields (called by ``__post_init__``); a TOML
        list becomes a tuple, so the config stays hashable.

        Raises:
            TypeError, ValueError: for a field of the wrong type or out of
                range, naming it and its value.
        """
        check_int(
            "train_len", self.train_len, minimum=self.train_len_minimum
        )
        check_int(
            "min_train_len",
            self.min_train_len,
            minimum=self.min_train_len_minimum,
        )
        if self.min_train_len > self.train_len:
            raise ValueError(
                f"min_train_len={self.min_train_len} exceeds train_len={self.train_len}"
            )
        for name in ("steps", "batch_size", "eval_size"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("eval_seed", self.eval_seed, minimum=0)
        check_positive_number("learning_rate", self.learning_rate)
        for name, minimum in (("seeds", 0), ("length_factors", 1)):
            values = tuple(getattr(self, name))
            if not values:
                raise ValueError(f"{name} is empty")
            for value in values:
                check_int(name, value, minimum=minimum)
            object.__setattr__(self, name, values)

    @property
    def eval_lengths(self) -> tuple[int, ...]:
        """The evaluation lengths ``factor * train_len``, in tokens."""
        return tuple(f * self.train_len for f in self.length_factors)


def seed_mean(accuracy: Tensor) -> Tensor:
    """Mean over seeds of a ``(num_seeds, num_lengths)`` tensor of
    accuracies: ``(num_lengths,)``."""
    return accuracy.mean(dim=0)


def seed_spread(accuracy: Tensor) -> Tensor:
    """Sample standard deviation over seeds of a ``(num_seeds,
    num_lengths)`` tensor, ``(num_lengths,)``: zero for a single seed
    (where the sample deviation is undefined)."""
    if accuracy.size(0) < 2:
        return torch.zeros(accuracy.size(1), dtype=accuracy.dtype)
    return accuracy.std(dim=0)
