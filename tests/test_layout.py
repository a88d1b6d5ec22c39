"""The house: the floors of ``src/tinyformer``, read from the code's own imports (``ast``).

The rule, as the package docstring states it: a module imports from its own floor and the floors
below (tools 0, models 1, bridges 2, labs 3, plotting 4), never from a floor above; no module takes
part in an import circle, whether its imports sit at the top or inside a function; the library
never imports the checker (``tinyformer_exercises``), and uses no edition-0.2.0 path itself. The
old paths keep working for readers (``tinyformer.tools.moved``).
"""

from __future__ import annotations

import ast
import importlib
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import tinyformer
from tinyformer.tools import moved

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

#: The floors, bottom first; the package's own ``__init__`` sits with the tools.
FLOORS = ("tools", "models", "bridges", "labs", "plotting")


def module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor_of(module: str) -> int | None:
    """The floor of a tinyformer module (0 for the package itself), None outside tinyformer."""
    parts = module.split(".")
    if parts[0] != "tinyformer":
        return None
    if len(parts) == 1:
        return 0
    return FLOORS.index(parts[1]) if parts[1] in FLOORS else None


def modules(src: Path) -> dict[str, Path]:
    found = {}
    for package in ("tinyformer", "tinyformer_exercises"):
        for path in sorted((src / package).rglob("*.py")):
            if "templates" in path.parts:
                continue  # a student's starting file, not the checker's code
            found[module_name(path, src)] = path
    return found


def imports(path: Path, name: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, anywhere in it; ``from a import b`` names ``a.b``
    when that is a module, else ``a``."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if sub in known or moved.new_name(sub) else target))
    return found


def violations(src: Path) -> list[str]:
    """Every import that breaks the rule, and every circle, one line each."""
    found = modules(src)
    known = set(found)
    graph: dict[str, set[str]] = {name: set() for name in found}
    problems = []
    for name, path in found.items():
        where = path.relative_to(src)
        for line, target in imports(path, name, known):
            root = target.split(".")[0]
            if root not in ("tinyformer", "tinyformer_exercises"):
                continue
            if moved.new_name(target):
                problems.append(f"{where}:{line} imports {target}, an edition-0.2.0 path: use {moved.new_name(target)}")
                target = moved.new_name(target)
            if name.startswith("tinyformer.") or name == "tinyformer":
                if root == "tinyformer_exercises":
                    problems.append(f"{where}:{line} imports the checker ({target}): the library never does")
                    continue
                mine, theirs = floor_of(name), floor_of(target)
                if mine is None:
                    problems.append(f"{where}: a module on no floor ({name})")
                elif theirs is None:
                    problems.append(f"{where}:{line} imports {target}, on no floor")
                elif theirs > mine:
                    problems.append(
                        f"{where}:{line} imports {target} from floor {theirs} ({FLOORS[theirs]}) above its own, "
                        f"{mine} ({FLOORS[mine]})"
                    )
            if target in graph and target != name:
                graph[name].add(target)
    problems += [f"an import circle: {' -> '.join(circle)}" for circle in circles(graph)]
    return problems


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each as a closed walk."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [[*group, group[0]] for group in groups]


def test_every_import_keeps_to_the_floors_and_no_circle():
    assert violations(SRC) == []


@pytest.mark.parametrize(
    ("planted_in", "line", "expected"),
    [
        ("tinyformer/models/attention.py", "from tinyformer.labs.tasks import word_order", "from floor 3 (labs)"),
        ("tinyformer/tools/checks.py", "import tinyformer.models.flash", "from floor 1 (models)"),
        ("tinyformer/labs/tasks.py", "from tinyformer_exercises import EXERCISES", "imports the checker"),
        ("tinyformer/labs/tasks.py", "from tinyformer.attention import causal_mask", "an edition-0.2.0 path"),
        ("tinyformer_exercises/outcomes.py", "from tinyformer_exercises.checking import Check", "an import circle"),
    ],
)
def test_a_planted_wrong_import_is_found(tmp_path, planted_in, line, expected):
    copy = tmp_path / "src"
    for package in ("tinyformer", "tinyformer_exercises"):
        for path in (SRC / package).rglob("*.py"):
            target = copy / path.relative_to(SRC)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    planted = copy / planted_in
    # inside a function, where an import hides from a glance at the top of the file
    planted.write_text(planted.read_text() + f"\n\ndef _planted():\n    {line}\n")
    found = violations(copy)
    assert any(expected in problem for problem in found), found
    assert any(Path(planted_in).name in problem or "circle" in problem for problem in found), found


def lines_of(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.rglob("*.py"))


def test_the_teaching_models_are_the_largest_folder_and_the_checker_is_outside():
    package = SRC / "tinyformer"
    sizes = {p.name: lines_of(p) for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert set(sizes) == set(FLOORS), sizes
    assert max(sizes, key=sizes.get) == "models", sizes
    assert not (package / "exercises").exists()
    assert (SRC / "tinyformer_exercises" / "__main__.py").is_file()


def test_the_package_docstring_names_every_module_by_floor():
    text = tinyformer.__doc__
    for name in modules(SRC):
        parts = name.split(".")
        if parts[0] != "tinyformer" or len(parts) < 3 or parts[-1].startswith("_"):
            continue
        if parts[1] == "models" and parts[2] == "positional" and len(parts) > 3:
            continue  # the positional package's own docstring names its modules
        if parts[1] == "labs" and parts[2] in ("presets", "data") and len(parts) > 3:
            continue
        assert f"``{parts[2]}``" in text, f"the package docstring does not name {name}"
    for floor in FLOORS:
        assert f":mod:`tinyformer.{floor}`" in text


@pytest.mark.parametrize(("old", "new"), sorted(moved.MOVED.items()))
def test_an_edition_0_2_0_import_path_is_the_moved_module(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)
    assert sys.modules[old].__spec__.name == new  # the module keeps its own spec


def test_old_paths_work_in_every_form_a_notebook_uses():
    code = (
        "import pickle, tinyformer.attention, tinyformer.positional.rotary as rotary\n"
        "from tinyformer.decoder import TinyDecoder, KVCache\n"
        "from tinyformer import positional, transformer\n"
        "from tinyformer.presets import preset\n"
        "import tinyformer.models.positional.rotary as new_rotary\n"
        "assert rotary is new_rotary and positional.apply_rotary is new_rotary.apply_rotary\n"
        "config = transformer.TransformerConfig(vocab_size=8, num_classes=2)\n"
        "assert pickle.loads(pickle.dumps(config)) == config\n"
        "assert preset('word-order').read_text()\n"
        "print(TinyDecoder.__module__, KVCache.__module__)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["tinyformer.models.decoder", "tinyformer.models.cache"]


def test_an_unknown_name_under_an_old_path_still_fails_as_python_says():
    with pytest.raises(ModuleNotFoundError, match=r"tinyformer\.attention\.nothing"):
        importlib.import_module("tinyformer.attention.nothing")
    assert moved.new_name("tinyformer.attentionx") is None


def test_a_moved_class_pickles_under_its_own_name():
    from tinyformer.models.encoder import TransformerConfig

    assert b"tinyformer.models.encoder" in pickle.dumps(TransformerConfig)
