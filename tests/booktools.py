"""Helpers for the tests and scripts that build books of their own: notebook sources and project copies; and
the built pages, parsed once."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]

#: The front matter every chapter starts with: a MyST notebook run by the Python 3 kernel.
MYST_NOTEBOOK_HEADER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

"""

#: What a build of the book reads besides ``docs/``: the library, its configuration, the project file,
#: the citation file that ``conf/conf.py`` turns into the "How to cite" page, and the changelog that
#: the errata page includes.
PROJECT_FOLDERS = ("src", "conf")
PROJECT_FILES = ("pyproject.toml", "CITATION.cff", "CHANGELOG.md")
#: What the chapters include from outside ``docs/`` besides the library: the claims page and the
#: solutions show tests and reference solutions from ``tests/``.
DOCS_FOLDERS = ("docs", "tests")


def slow_chapters() -> list[str]:
    """``tinyformer_slow_chapters`` of conf/conf.py: the chapters a build starts first, slowest first."""
    import re

    conf = (ROOT / "conf" / "conf.py").read_text()
    return re.findall(r'"([a-z-]+)"', re.search(r"^tinyformer_slow_chapters = \[(.*?)\]", conf, re.M | re.S)[1])


def myst_notebook(title: str, body: str) -> str:
    """The source of a chapter with ``title`` as its heading and ``body`` (MyST, code cells included) below."""
    return f"{MYST_NOTEBOOK_HEADER}# {title}\n\n{body}"


def copy_project(destination: Path, *, docs: bool = True) -> Path:
    """Copy what a build needs (and ``docs/`` with the ``tests/`` it includes, unless ``docs=False``) into
    ``destination``; return it.

    The installed KaTeX (``build/katex``) is linked, not copied.
    """
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".hypothesis", ".pytest_cache")
    for name in (*PROJECT_FOLDERS, *(DOCS_FOLDERS if docs else ())):
        shutil.copytree(ROOT / name, destination / name, ignore=ignore)
    for name in PROJECT_FILES:
        shutil.copy(ROOT / name, destination)
    # KaTeX, which conf.py needs at build/katex, is installed (by nox), not part of the project: linked.
    katex = ROOT / "build" / "katex"
    if katex.is_dir():
        (destination / "build").mkdir(parents=True, exist_ok=True)
        (destination / "build" / "katex").symlink_to(katex, target_is_directory=True)
    return destination


def fresh_cache(out: Path) -> tuple[str, ...]:
    """The config overrides of a build whose every chapter executes: the cache mode of ``nox -s docs``, with
    an execution cache of its own, ``out/cache``, empty before the first build into ``out``."""
    return ("-D", "nb_execution_mode=cache", "-D", f"nb_execution_cache_path={out / 'cache'}")


def glued_values(book: Path, chapter: str) -> dict[str, str]:
    """The values ``chapter`` glued in the build in ``book`` (the folder holding ``jupyter_execute/``), by key,
    as the text the page shows them from (their ``text/plain``): the numbers the build computed."""
    import json

    data = json.loads((book / "jupyter_execute" / f"{chapter}.glue.json").read_text())
    return {key: value["data"]["text/plain"] for key, value in data.items() if "text/plain" in value["data"]}


@functools.lru_cache(maxsize=64)
def _parse(path: Path, mtime_ns: int) -> BeautifulSoup:
    from bs4 import BeautifulSoup  # the test extra's; tests/buildtime.py runs in the docs environment

    return BeautifulSoup(path.read_text(), "html.parser")


def parsed(path: Path) -> BeautifulSoup:
    """The HTML page at ``path``, parsed once per process while the file is unchanged (the book's 23 pages take
    3.6 s to parse, and its tests read each page many times). Shared: read it, never change it
    (``BeautifulSoup(str(tag), "html.parser")`` gives a copy to change)."""
    return _parse(path, path.stat().st_mtime_ns)


def rendered(book: Path, page: str) -> BeautifulSoup:
    """The built page ``page`` (a document name) of the book in ``book``, parsed once (:func:`parsed`)."""
    return parsed(book / "html" / f"{page}.html")
