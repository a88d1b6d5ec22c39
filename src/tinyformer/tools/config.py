"""Reading the frozen config dataclasses from TOML presets
(:mod:`tinyformer.labs.presets`)."""

from __future__ import annotations

import dataclasses
import tomllib
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

T = TypeVar("T")


def from_mapping(
    cls: type[T], values: dict[str, Any], overrides: dict[str, Any]
) -> T:
    """``cls(**values, **overrides)``, with overrides winning, after
    checking every key is a field of ``cls``.

    Raises:
        ValueError: naming the keys that are not fields.
    """
    merged = {**values, **overrides}
    unknown = sorted(
        set(merged) - {f.name for f in dataclasses.fields(cls)}
    )
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields: {unknown}")
    return cls(**merged)


def from_toml(
    cls: type[T],
    path: str | Path | Traversable,
    table: str,
    overrides: dict[str, Any],
) -> T:
    """``cls`` from the table ``[table]`` of the TOML file at ``path`` (a
    path, or a preset: :func:`tinyformer.labs.presets.preset`), with keyword
    overrides on top.

    Raises:
        TypeError: if ``path`` is neither a path nor a package resource.
        ValueError: if the file has no such table or the table has keys that
            are not fields.
    """
    if isinstance(path, str):
        path = Path(path)
    if not isinstance(path, (Path, Traversable)):
        raise TypeError(
            "path must be a str, a pathlib.Path or a preset "
            f"(tinyformer.labs.presets.preset), got {type(path).__name__} {path!r}"
        )
    with path.open("rb") as file:
        document = tomllib.load(file)
    if table not in document:
        raise ValueError(
            f"{path} has no [{table}] table; it has {sorted(document)}"
        )
    return from_mapping(cls, document[table], overrides)


class TomlConfig:
    """The readers every frozen config dataclass of the library shares:
    :meth:`from_dict`, :meth:`from_toml` and :meth:`replace`.

    A config names the TOML table it reads by default in ``toml_table``
    (``"model"``, ``"training"``, ``"lab"``)."""

    toml_table: ClassVar[str] = "model"

    @classmethod
    def from_dict(cls, values: dict[str, Any], **overrides: Any) -> Self:
        """A config from a mapping (such as a TOML table), with keyword
        overrides on top.

        Raises:
            ValueError: if a key is not a field of this class, naming it.
        """
        return from_mapping(cls, values, overrides)

    @classmethod
    def from_toml(
        cls,
        path: str | Path | Traversable,
        *,
        table: str | None = None,
        **overrides: Any,
    ) -> Self:
        """A config from the table ``[table]`` of a TOML file (by default
        ``toml_table``), with keyword overrides on top; ``path`` may be a
        preset (:func:`tinyformer.labs.presets.preset`).

        Raises:
            TypeError: if ``path`` is neither a path nor a package resource.
            ValueError: if the file has no such table or the table has
                keys that are not fields.
        """
        return from_toml(
            cls, path, cls.toml_table if table is None else table, overrides
        )

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
