"""Build safeguards of the tinyformer book: cache key, provenance, glue checks (a Sphinx extension).

conf.py imports the helpers at the top of this module to name the execution cache and to write the
provenance line; ``setup`` registers the checks that run while the book is built:

- the execution cache is keyed on everything a chapter's output depends on besides its own cells
  (myst-nb's cache keys on the cells alone), and caches made for other keys are pruned;
- a glued value whose plain text is a NumPy or torch repr (``np.float64(0.5)``, ``tensor(0.5000)``)
  fails the build, naming the chapter, the key and the cell that glued it.
"""

from __future__ import annotations

import hashlib
import html
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from sphinx.util import logging

logger = logging.getLogger(__name__)

# The packages whose versions change what a chapter computes or how it is executed; their installed
# versions are part of the cache key (the pins in conf/constraints.txt are too, as a file of conf/).
EXECUTION_PACKAGES = (
    "torch",
    "numpy",
    "matplotlib",
    "ipykernel",
    "ipython",
    "nbclient",
    "jupyter-cache",
    "myst-nb",
)

# A glued value whose text starts like this was glued as a NumPy or torch object, not a Python number.
REPR = re.compile(r"^(?:(?:np|numpy|torch)\.\w|(?:tensor|array|Parameter containing)\b)")
CACHE_NAME = re.compile(r"^[0-9a-f]{16}$")
CODE_CELL = re.compile(r"^```\{code-cell\}")


def _files_hash(digest, base: Path, files) -> None:
    for path in sorted(files):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")


def library_hash(package_dir: Path) -> str:
    """SHA-256 over the ``.py`` files of the tinyformer package at ``package_dir`` (names and contents).

    The coding exercises (``tinyformer/exercises``: checker and templates) are left out: no chapter
    executes them, so a change there must not re-execute the chapters.
    """
    digest = hashlib.sha256()
    files = [p for p in package_dir.rglob("*.py") if p.relative_to(package_dir).parts[0] != "exercises"]
    _files_hash(digest, package_dir, files)
    return digest.hexdigest()


def check_library_is_source(imported_dir: Path, source_dir: Path) -> None:
    """Refuse to build when the imported tinyformer is not the one in ``src/`` (a stale install).

    Raises:
        RuntimeError: naming both folders, if their ``.py`` files differ.
    """
    if source_dir.is_dir() and library_hash(imported_dir) != library_hash(source_dir):
        raise RuntimeError(
            f"the chapters would import tinyformer from {imported_dir}, which differs from {source_dir}: "
            "the pages would show a stale library. Build with nox (it reinstalls the package) or install "
            "this checkout (pip install -e .)."
        )


def build_key(root: Path, conf_dir: Path, library: str) -> str:
    """SHA-256 over what executed chapters depend on besides their cells.

    The library hash, every file of ``conf/`` (Sphinx and kernel configuration, plot style, pinned
    versions, experiment presets), ``pyproject.toml``, the Python version and the installed versions of
    :data:`EXECUTION_PACKAGES`.
    """
    digest = hashlib.sha256(library.encode() + b"\0")
    _files_hash(digest, root, [*conf_dir.rglob("*"), root / "pyproject.toml"])
    digest.update(sys.version.encode() + b"\0")
    for name in EXECUTION_PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\0".encode())
    return digest.hexdigest()


def source_date_epoch(root: Path) -> int:
    """The build's date: ``$SOURCE_DATE_EPOCH`` if set, else the last commit's time, else the newest source file.

    The result is written back to ``os.environ`` so that Sphinx, matplotlib and the chapter kernels (which
    inherit the environment) all use the same date.
    """
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if not value:
        git = shutil.which("git")
        command = [git, "-C", str(root), "log", "-1", "--format=%ct"]
        result = subprocess.run(command, capture_output=True, text=True, check=False) if git else None
        if result is not None and result.returncode == 0 and result.stdout.strip().isdigit():
            value = result.stdout.strip()
        else:
            sources = [p for folder in ("src", "conf", "docs") for p in (root / folder).rglob("*") if p.is_file()]
            value = str(int(max(p.stat().st_mtime for p in sources)))
    os.environ["SOURCE_DATE_EPOCH"] = value
    return int(value)


def provenance(*, version: str, library: str, seed: int, epoch: int) -> dict[str, str]:
    """What produced the pages: versions, the library's source hash, the seed and the build date."""
    return {
        "tinyformer": version,
        "source-hash": library[:12],
        "torch": importlib.metadata.version("torch"),
        "numpy": importlib.metadata.version("numpy"),
        "seed": str(seed),
        "build-date": datetime.fromtimestamp(epoch, tz=UTC).date().isoformat(),
    }


def provenance_html(facts: dict[str, str]) -> str:
    """One line for the footer of every page, with each fact also in a ``data-`` attribute for tests."""
    attributes = " ".join(f'data-{key}="{html.escape(value)}"' for key, value in facts.items())
    return (
        f'<p class="tinyformer-provenance" {attributes}>'
        f"Computed by tinyformer {facts['tinyformer']} (source {facts['source-hash']}) with torch "
        f"{facts['torch']} and numpy {facts['numpy']}, seed {facts['seed']}; built {facts['build-date']}.</p>"
    )


def prune_stale_caches(app, config) -> None:
    """Remove the sibling execution caches made for other build keys; they can never be hit again."""
    if config.nb_execution_mode != "cache" or not config.nb_execution_cache_path:
        return
    current = Path(config.nb_execution_cache_path)
    if not CACHE_NAME.match(current.name) or not current.parent.is_dir():
        return  # a cache folder chosen by hand (-D nb_execution_cache_path=...): leave its neighbours alone
    for entry in current.parent.iterdir():
        if entry.is_dir() and entry != current and CACHE_NAME.match(entry.name):
            shutil.rmtree(entry, ignore_errors=True)


def _defining_cell(source: str, key: str) -> str:
    """``code cell N (line L)`` for the code cell whose text quotes ``key``, or the empty string."""
    number, start, cell = 0, 0, None
    for line_number, line in enumerate(source.splitlines(), start=1):
        if cell is None and CODE_CELL.match(line):
            number, start, cell = number + 1, line_number, []
        elif cell is not None and line.startswith("```"):
            if f'"{key}"' in "\n".join(cell) or f"'{key}'" in "\n".join(cell):
                return f"code cell {number} (line {start})"
            cell = None
        elif cell is not None:
            cell.append(line)
    return ""


def check_glue_reprs(app, doctree) -> None:
    """Fail on glued values whose plain text is a NumPy or torch repr; the page would print it."""
    env = app.env
    keys = env.nb_metadata.get(env.docname, {}).get("glue", []) if hasattr(env, "nb_metadata") else []
    if not keys:
        return
    glue_file = Path(env.mystnb_config.output_folder, *f"{env.docname}.glue.json".split("/"))
    data = json.loads(glue_file.read_text(encoding="utf8"))
    source = Path(env.doc2path(env.docname)).read_text(encoding="utf8")
    for key in keys:
        plain = data.get(key, {}).get("data", {}).get("text/plain", "")
        if REPR.match(plain):
            cell = _defining_cell(source, key)
            logger.error(
                f"glue key {key!r}{' in ' + cell if cell else ''} holds the repr {plain[:40]!r}; glue a plain "
                "Python value (float(x), t.item(), t.tolist())",
                location=env.docname,
                type="tinyformer",
                subtype="glue_repr",
            )


def fix_cell_ids(app, doctree) -> None:
    """Number the cells of the executed notebook (``cell-0``, ``cell-1``, ...) instead of random ids.

    myst-nb reads a MyST notebook into cells with random nbformat ids and writes the executed notebook
    with them to ``jupyter_execute/<chapter>.ipynb``, a file the book may offer for download.
    """
    env = app.env
    if "kernelspec" not in env.metadata.get(env.docname, {}):
        return
    path = Path(env.mystnb_config.output_folder, *f"{env.docname}.ipynb".split("/"))
    if not path.is_file():
        return
    notebook = nbformat.read(path, as_version=4)
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"
    content = nbformat.writes(notebook).encode("utf-8")
    if content != path.read_bytes():
        path.write_bytes(content)


def setup(app):
    app.add_config_value("tinyformer_build_key", "", "env", types=[str])
    app.connect("config-inited", prune_stale_caches)
    app.connect("doctree-read", check_glue_reprs)
    app.connect("doctree-read", fix_cell_ids)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
