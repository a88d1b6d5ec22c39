"""Build safeguards of the tinyformer book: cache key, provenance, glue checks (a Sphinx extension).

conf.py imports the helpers at the top of this module to name the execution cache and to write the
provenance line; ``setup`` registers the checks that run while the book is built:

- the execution cache is keyed on everything a chapter's output depends on besides its own cells
  (myst-nb's cache keys on the cells alone), and caches made for other keys are pruned;
- a glued value whose plain text is a NumPy or torch repr (``np.float64(0.5)``, ``tensor(0.5000)``)
  fails the build, naming the chapter, the key and the cell that glued it;
- an object repr where the page would show it (``<Figure size 700x360 with 2 Axes>``,
  ``<matplotlib.lines.Line2D at 0x...>``, ``<tinyformer.x.Y object at 0x...>``: a figure that did not
  become an image, or a forgotten ``;``) in a cell's output or a glued value fails the build, naming
  the chapter and the cell or glue key;
- ``sphinx-build -j N`` with N > 1 is refused with the reason (chapter execution is not parallel-safe);
- the chapters that the cache lacks are executed before Sphinx reads them, in
  ``tinyformer_execution_workers`` processes side by side (jupyter-cache's executor,
  ``single_nb_execution``, the function myst-nb itself calls), and cached; myst-nb then finds them
  there. Only the parent writes to the cache. A chapter that fails there is left to myst-nb, which
  executes it again and reports the failure as it always does;
- a damaged execution-cache database is moved aside, with one line saying so, and the chapters
  re-execute into a fresh cache.
"""

from __future__ import annotations

import hashlib
import html
import importlib.metadata
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from myst_nb.core.utils import coalesce_streams
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
# An object's default repr where a reader would see it: a Figure with no image formatter, an object
# with an address (a forgotten ``;`` after ``ax.plot(...)``), an Axes.
OBJECT_REPR = re.compile(
    r"<(?:Figure size [\d.]+x[\d.]+ with \d+ Axes"
    r"|[A-Za-z_][\w.]*(?: object)? at 0x[0-9a-fA-F]+"
    r"|(?:[\w.]*Axes(?:Subplot)?): [^<>\n]*)>"
)
# An output bundle with any of these shows it instead of its text/plain.
RICH_MIME = re.compile(r"^(?:image/|text/html|text/markdown|text/latex|application/)")
CACHE_NAME = re.compile(r"^[0-9a-f]{16}$")
CODE_CELL = re.compile(r"^```\{code-cell\}")


def _files_hash(digest, base: Path, files) -> None:
    for path in sorted(files):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")


#: The kinds of file of the package that the library hash covers.
LIBRARY_SUFFIXES = (".py", ".toml", ".txt")


def library_hash(package_dir: Path) -> str:
    """SHA-256 over the files of the tinyformer package at ``package_dir`` that chapters run or read:
    its ``.py`` files, the experiment presets (``labs/presets/*.toml``) and the corpus
    (``labs/data/*.txt``); names and contents.

    The coding exercises are a package of their own (``tinyformer_exercises``: checker and templates),
    outside it: no chapter executes them, so a change there does not re-execute the chapters.
    """
    digest = hashlib.sha256()
    files = [p for p in package_dir.rglob("*") if p.suffix in LIBRARY_SUFFIXES and p.is_file()]
    _files_hash(digest, package_dir, files)
    return digest.hexdigest()


def check_library_is_source(imported_dir: Path, source_dir: Path) -> None:
    """Refuse to build when the imported tinyformer is not the one in ``src/`` (a stale install).

    Raises:
        RuntimeError: naming both folders, if their code, presets or corpus differ.
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


def refuse_parallel_execution(app, config) -> None:
    """Refuse ``sphinx-build -j N`` (N > 1) while chapters execute.

    Parallel reading would execute chapters at the same time: jupyter-cache keeps its records in one
    SQLite database, which is not safe for concurrent writers ("database is locked"), and kernels started
    at once can race for the same port ("Address already in use", then "Kernel died before replying").

    The refusal is one line on stderr and exit status 2 (``SystemExit``: any exception would make Sphinx
    print its crash report and ask for a bug report).
    """
    if app.parallel > 1 and config.nb_execution_mode != "off":
        print(
            f"tinyformer: -j {app.parallel} (parallel build) is not supported: chapters execute through "
            "jupyter-cache, whose SQLite database is not safe for concurrent writers, and kernels started at "
            "once can race for the same port ('Address already in use', 'Kernel died before replying'). "
            "Build without -j.",
            file=sys.stderr,
        )
        raise SystemExit(2)


def cell_seconds(notebook) -> list[float | None]:
    """The seconds each code cell of ``notebook`` ran, from the timestamps nbclient records (``record_timing``)
    in ``metadata.execution``, which this removes (a second build would differ in them); None for a cell
    with no timestamps (not run)."""
    from datetime import datetime

    seconds = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        stamps = cell.metadata.pop("execution", None) or {}
        start, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if start and end:
            elapsed = datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(
                start.replace("Z", "+00:00")
            )
            seconds.append(round(elapsed.total_seconds(), 3))
        else:
            seconds.append(None)
    return seconds


def _execute_notebook(job: tuple) -> tuple:
    """Execute one notebook in a worker process, as myst-nb's cache mode does (``meta_override``).

    Returns the executed notebook, the seconds it took, whether a cell failed, and each code cell's seconds
    (:func:`cell_seconds`).
    """
    from jupyter_cache.executors.utils import single_nb_execution

    notebook, cwd, timeout, allow_errors, lab_workers = job
    # the kernel (started from this process) trains a lab's models in this many processes
    # (tinyformer.tools.jobs.default_workers): its share of the cores, as chapters execute side by side
    from tinyformer.tools.jobs import WORKERS_VARIABLE

    os.environ[WORKERS_VARIABLE] = str(lab_workers)
    result = single_nb_execution(
        notebook, cwd=cwd, timeout=timeout, allow_errors=allow_errors, meta_override=True, record_timing=True
    )
    return result.nb, result.time, result.err is not None, cell_seconds(result.nb)


#: Where a build records how long each chapter and each of its code cells ran, in its doctrees folder
#: (build state, not output: two builds differ in it). Written for the chapters the build's workers
#: executed (execute_in_parallel), kept for the others; tests/test_build.py reads it.
EXECUTION_TIMES = "execution-times.json"


def record_execution_times(doctreedir: Path, times: dict[str, dict], forget: tuple[str, ...] = ()) -> None:
    """Merge ``{docname: {"seconds": total, "cells": [seconds or None, ...]}}`` into the doctrees' record, and
    drop the chapters in ``forget`` (executed again, but not timed: by myst-nb itself), so that the record
    never holds the times of an execution that the pages no longer show."""
    path = Path(doctreedir) / EXECUTION_TIMES
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    recorded = {name: record for name, record in recorded.items() if name not in forget}
    recorded.update(times)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


def _uncached_notebooks(app, env, docnames) -> list[tuple[str, Path, object, object]]:
    """``(docname, path, notebook, read_fmt)`` of each document to be read that is a notebook with code
    cells, which myst-nb would execute (not excluded, no notebook-level execution settings) and whose
    cells the execution cache does not hold."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import create_nb_reader

    config = env.mystnb_config
    cache = get_cache(app.config.nb_execution_cache_path)
    pending = []
    for docname in sorted(docnames):
        path = Path(env.doc2path(docname))
        if not path.is_file() or any(path.match(p) for p in config.execution_excludepatterns):
            continue
        text = path.read_text(encoding="utf8")
        reader = create_nb_reader(str(path), env.myst_config, config, text)
        if reader is None:
            continue
        notebook = reader.read(text)
        if config.metadata_key in notebook.metadata:
            continue
        if not any(cell.cell_type == "code" and cell.source.strip() for cell in notebook.cells):
            continue
        try:
            cache.match_cache_notebook(notebook)
        except KeyError:
            pending.append((docname, path, notebook, reader.read_fmt))
    return pending


def execute_in_parallel(app, env, docnames) -> None:
    """Execute the chapters the cache lacks in ``tinyformer_execution_workers`` processes, and cache them.

    Two kernels run at a time on a 2-core machine: the clean build's execution takes about the longest
    chapter's time instead of every chapter's in turn. Workers are started with ``spawn`` and a second
    apart, so that two kernels do not pick their ports in the same instant.
    """
    workers = app.config.tinyformer_execution_workers
    if workers < 2 or app.config.nb_execution_mode != "cache" or not app.config.nb_execution_cache_path:
        return
    pending = _uncached_notebooks(app, env, docnames)
    if len(pending) < 2:
        # one chapter: myst-nb executes it as usual, untimed
        record_execution_times(Path(app.doctreedir), {}, forget=tuple(name for name, *_ in pending))
        return
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.cache.db import NbProjectRecord

    cache = get_cache(app.config.nb_execution_cache_path)
    timeout = app.config.nb_execution_timeout
    allow_errors = app.config.nb_execution_allow_errors
    # the slowest chapters first (tinyformer_slow_chapters, in that order), then the rest, so that the
    # short ones fill in at the end and neither process waits long for the other
    slow = list(app.config.tinyformer_slow_chapters)
    pending.sort(key=lambda item: (slow.index(item[0]) if item[0] in slow else len(slow), item[0]))
    logger.info(f"tinyformer: executing {len(pending)} chapters in {workers} processes")
    # how busy the machine was before the chapters started (1-minute load average, cores): the times measure
    # the chapters only on a machine that was not busy already
    load_before, cpus = round(os.getloadavg()[0], 2), os.cpu_count() or 1
    # each chapter's kernel has its share of the cores for a lab's processes: one each on two cores, where
    # two labs of two processes each would make four processes share two cores
    lab_workers = max(1, cpus // workers)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=context) as pool:
        futures = []
        for index, (_, path, notebook, _) in enumerate(pending):
            job = (notebook, str(path.parent), timeout, allow_errors, lab_workers)
            futures.append(pool.submit(_execute_notebook, job))
            if index < workers - 1:
                time.sleep(1.0)
        times, untimed = {}, []
        for (docname, path, _, read_fmt), future in zip(pending, futures, strict=True):
            try:
                executed, seconds, failed, cells = future.result()
            except Exception as err:  # a worker that died: myst-nb executes the chapter itself
                logger.info(f"tinyformer: {docname} not executed in a worker ({type(err).__name__}: {err})")
                untimed.append(docname)
                continue
            if failed:
                untimed.append(docname)
                continue  # myst-nb executes it again and reports the error with its traceback
            stage = cache.add_nb_to_project(str(path), read_data=read_fmt) if read_fmt else None
            if stage is not None:
                NbProjectRecord.remove_tracebacks([stage.pk], cache.db)
            cache.cache_notebook_bundle(
                CacheBundleIn(executed, str(path), data={"execution_seconds": seconds}),
                check_validity=False,
                overwrite=True,
            )
            logger.info(f"tinyformer: executed {docname} in {seconds:.1f} s")
            times[docname] = {"seconds": round(seconds, 3), "cells": cells, "load_before": load_before, "cpus": cpus}
        record_execution_times(Path(app.doctreedir), times, forget=tuple(untimed))


def _database_problem(database: Path) -> str:
    """Why the SQLite file ``database`` cannot be used, or the empty string if it can."""
    try:
        connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as err:
        return str(err)
    try:
        result = connection.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.Error as err:
        return str(err)
    finally:
        connection.close()
    return "" if result == [("ok",)] else "; ".join(str(row[0]) for row in result[:3])


def set_aside_damaged_cache(app, config) -> None:
    """Move an execution cache whose database is damaged to ``<cache>.damaged``; say so in one line.

    Left in place, jupyter-cache would fail on it with a database traceback. Moved aside, every chapter
    re-executes into a fresh cache, and the damaged one stays for inspection (until the next damage).
    """
    if config.nb_execution_mode != "cache" or not config.nb_execution_cache_path:
        return
    cache = Path(config.nb_execution_cache_path)
    database = cache / "global.db"
    if not database.is_file():
        return
    problem = _database_problem(database)
    if not problem:
        return
    aside = cache.with_name(cache.name + ".damaged")
    shutil.rmtree(aside, ignore_errors=True)
    cache.rename(aside)
    print(
        f"tinyformer: the execution cache {cache} is damaged ({problem}); moved it to {aside} and "
        "re-executing every chapter into a fresh cache.",
        file=sys.stderr,
    )


def _code_cell_lines(source: str) -> list[int]:
    """The 1-based line of each ``{code-cell}`` fence of a MyST notebook, in order."""
    return [number for number, line in enumerate(source.splitlines(), start=1) if CODE_CELL.match(line)]


def _shown_text(bundle: dict) -> str:
    """The text/plain of a mime bundle when that is what the page shows (no richer type), else ''."""
    if any(RICH_MIME.match(mime) for mime in bundle):
        return ""
    text = bundle.get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def check_output_reprs(app, doctree) -> None:
    """Fail on an object repr in a cell's shown output: a figure that did not become an image, say."""
    env = app.env
    if "kernelspec" not in env.metadata.get(env.docname, {}):
        return
    path = Path(env.mystnb_config.output_folder, *f"{env.docname}.ipynb".split("/"))
    if not path.is_file():
        return
    # a chapter executed by execute_in_parallel (every chapter of a clean build) is a cache hit, written
    # there without its outputs: they are the cache's
    notebook, _ = _with_cached_outputs(app, nbformat.read(path, as_version=4))
    starts = _code_cell_lines(Path(env.doc2path(env.docname)).read_text(encoding="utf8"))
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code_cells, start=1):
        tags = cell.get("metadata", {}).get("tags", [])
        if "remove-output" in tags or "remove-cell" in tags:
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                text = output.get("text", "")
            elif output.get("output_type") in ("execute_result", "display_data"):
                text = _shown_text(output.get("data", {}))
            else:
                continue
            found = OBJECT_REPR.search(text)
            if found:
                line = f" (line {starts[number - 1]})" if number <= len(starts) else ""
                logger.error(
                    f"code cell {number}{line} shows the object repr {found.group(0)!r}; show an image "
                    "(a figure needs an image formatter: %matplotlib inline) or end the line with ';'",
                    location=env.docname,
                    type="tinyformer",
                    subtype="output_repr",
                )


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
        bundle = data.get(key, {}).get("data", {})
        plain = bundle.get("text/plain", "")
        if REPR.match(plain):
            cell = _defining_cell(source, key)
            logger.error(
                f"glue key {key!r}{' in ' + cell if cell else ''} holds the repr {plain[:40]!r}; glue a plain "
                "Python value (float(x), t.item(), t.tolist())",
                location=env.docname,
                type="tinyformer",
                subtype="glue_repr",
            )
        found = OBJECT_REPR.search(_shown_text(bundle))
        if found:
            cell = _defining_cell(source, key)
            logger.error(
                f"glue key {key!r}{' in ' + cell if cell else ''} holds the object repr {found.group(0)!r}, "
                "which the page would print instead of an image; glue a figure only where the inline "
                "backend is active (%matplotlib inline)",
                location=env.docname,
                type="tinyformer",
                subtype="glue_repr",
            )


def _with_cached_outputs(app, notebook):
    """``notebook`` with the outputs the execution cache holds for its cells, as they came from the
    kernel, and whether they came from the cache.

    When myst-nb finds a chapter in the cache it renders the page from the cached outputs but writes
    ``jupyter_execute/<chapter>.ipynb`` from the notebook it read, which has none (myst-nb 1.4,
    ``sphinx_.py``: it writes its local ``notebook``, not the client's merged one). Every chapter that
    :func:`execute_in_parallel` executed is such a cache hit. When myst-nb executed the chapter itself,
    its renderer has merged each cell's streams into the first stream output in place and left the
    others, so those outputs are replaced by the cache's too.
    """
    if app.config.nb_execution_mode != "cache" or not app.config.nb_execution_cache_path:
        return notebook, False
    from jupyter_cache import get_cache

    try:
        _, merged = get_cache(app.config.nb_execution_cache_path).merge_match_into_notebook(notebook)
    except KeyError:
        return notebook, False
    return merged, True


def fix_cell_ids(app, doctree) -> None:
    """Number the cells of the executed notebook (``cell-0``, ``cell-1``, ...) instead of random ids,
    give it its outputs where myst-nb wrote it without them (:func:`_with_cached_outputs`), and merge
    each cell's stream outputs as the page does (``nb_merge_streams``).

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
    notebook, from_cache = _with_cached_outputs(app, notebook)
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"
        if from_cache and app.config.nb_merge_streams and cell.cell_type == "code":
            # one stdout and one stderr output per cell, as on the page: how the kernel split its
            # prints into messages depends on timing, and two builds would otherwise differ
            cell.outputs = coalesce_streams(cell.get("outputs", []))
    content = nbformat.writes(notebook).encode("utf-8")
    if content != path.read_bytes():
        path.write_bytes(content)


def setup(app):
    app.add_config_value("tinyformer_build_key", "", "env", types=[str])
    # Processes that execute uncached chapters side by side before Sphinx reads them (1: myst-nb alone).
    app.add_config_value("tinyformer_execution_workers", 1, "", types=[int])
    # The chapters that take longest to execute, slowest first: they start first.
    app.add_config_value("tinyformer_slow_chapters", [], "", types=[list, tuple])
    app.connect("env-before-read-docs", execute_in_parallel)
    app.connect("config-inited", refuse_parallel_execution)
    app.connect("config-inited", prune_stale_caches)
    app.connect("config-inited", set_aside_damaged_cache)
    app.connect("doctree-read", check_glue_reprs)
    app.connect("doctree-read", check_output_reprs)
    app.connect("doctree-read", fix_cell_ids)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
