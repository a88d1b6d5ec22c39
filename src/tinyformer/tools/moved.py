"""The import paths of edition 0.2.0, kept working after the modules moved onto floors.

``import tinyformer.attention`` (or ``from tinyformer.decoder import KVCache``, or
``import tinyformer.positional.rotary``) gives the very module that now lives at the new path,
the same object: a class pickled, patched or compared through either name is one class. The
mapping is :data:`MOVED`; a name under an old package (``tinyformer.positional.rotary``) maps to
the same name under the new one.

Implemented as a :data:`sys.meta_path` finder (:pep:`451`) that imports the new module and
hands it back under the old name: no file is kept at the old path, and each module keeps its
own ``__name__`` and ``__spec__``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

__all__ = ["MOVED", "install", "new_name"]

#: Old dotted name -> the name of the module that holds it now.
MOVED: dict[str, str] = {
    "tinyformer.attention": "tinyformer.models.attention",
    "tinyformer.positional": "tinyformer.models.positional",
    "tinyformer.transformer": "tinyformer.models.encoder",
    "tinyformer.decoder": "tinyformer.models.decoder",
    "tinyformer.flash": "tinyformer.models.flash",
    "tinyformer.hf": "tinyformer.bridges.hf",
    "tinyformer.memory": "tinyformer.bridges.memory",
    "tinyformer.flops": "tinyformer.bridges.flops",
    "tinyformer.tasks": "tinyformer.labs.tasks",
    "tinyformer.training": "tinyformer.labs.training",
    "tinyformer.extrapolation": "tinyformer.labs.extrapolation",
    "tinyformer.long_context": "tinyformer.labs.long_context",
    "tinyformer.language": "tinyformer.labs.language",
    "tinyformer.presets": "tinyformer.labs.presets",
    "tinyformer.data": "tinyformer.labs.data",
}


def new_name(name: str) -> str | None:
    """The module that the 0.2.0 name ``name`` now is, or None if ``name`` did not move.

    ``new_name("tinyformer.positional.rotary") == "tinyformer.models.positional.rotary"``.
    """
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module at its new name."""

    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, self, loader_state=new
        )

    def create_module(self, spec) -> ModuleType:
        module = importlib.import_module(spec.loader_state)
        spec.loader_state = (
            module.__spec__
        )  # its own spec, which the import system overwrites next
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the old name's spec (importlib._bootstrap's
        # _init_module_attrs always sets __spec__); give it back its own.
        module.__spec__ = module.__spec__.loader_state


_FINDER = _MovedModules()


def install() -> None:
    """Put the finder first on :data:`sys.meta_path`, once."""
    if not any(
        isinstance(finder, _MovedModules) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _FINDER)
