"""The experiment presets the chapters train from, shipped with the package.

Each preset is a TOML file in this package (``word-order.toml``, ...), read through
:mod:`importlib.resources`, so a chapter's notebook finds it from any install of tinyformer (a wheel,
a clone installed with pip, or the book's own build), not only beside the book's sources. Pass what
:func:`preset` returns to a config's ``from_toml``::

    from tinyformer.labs.presets import preset
    from tinyformer.labs.training import TrainingConfig

    training = TrainingConfig.from_toml(preset("word-order"))
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

__all__ = ["PRESETS", "preset"]

#: The name of every preset (its file name without ``.toml``).
PRESETS = (
    "extrapolation",
    "induction",
    "long-context",
    "paper-base",
    "word-order",
)


def preset(name: str) -> Traversable:
    """The TOML file of the preset ``name``, e.g. ``preset("word-order")``.

    Returns:
        A :class:`~importlib.resources.abc.Traversable` (a :class:`pathlib.Path` for an ordinary
        install), which every config's ``from_toml`` accepts, and whose ``read_text()`` gives the TOML.

    Raises:
        TypeError: if ``name`` is not a string.
        ValueError: if no preset has that name; the message lists those that exist.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"name must be a preset's name (str), got {type(name).__name__} {name!r}"
        )
    if name not in PRESETS:
        raise ValueError(
            f"no preset is named {name!r}; the presets are {list(PRESETS)}"
        )
    return files(__name__) / f"{name}.toml"
