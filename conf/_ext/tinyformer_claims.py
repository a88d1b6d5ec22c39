"""The page "How the claims are tested" (docs/claims.md), written from the tests' markers.

A claim lives in one place: a named test marked with the chapter that makes it,
``@pytest.mark.claim("attention")``; a comparison with a peer implementation (PyTorch, Hugging Face) is a test
marked ``@pytest.mark.peer``. When Sphinx reads docs/claims.md, each line ``% claims of every chapter``
becomes one section per chapter (in the table of contents' order) with a section per claim test, labelled
``test-<name without test_, dashes for underscores>`` (the target of a chapter's "tested" badge), showing the
test's source; each line ``% peer tests: tests/FILE.py`` (or ``tests/FILE.py::Class``) becomes the sources of
that file's (that class's) peer tests. The tests are found by reading the files (``ast``), not by running them.
Nothing on the page is an include kept by hand: a test renamed or moved is shown under its new name, and a
badge that points at a test that is gone breaks the build (a missing reference, ``-n -W``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from sphinx.application import Sphinx

PAGE = "claims"
CHAPTERS_LINE = "% claims of every chapter"
PEER_LINE = re.compile(r"^% peer tests: (?P<file>tests/[\w/]+\.py)(?:::(?P<within>\w+))?$", re.M)


@dataclass(frozen=True)
class MarkedTest:
    """A test function or method that carries ``pytest.mark.claim(chapter)`` or ``pytest.mark.peer``."""

    file: str  # relative to the project root, e.g. "tests/test_claims.py"
    qualname: str  # "test_x" or "TestClass.test_x", as literalinclude's :pyobject: takes it
    kind: str  # "claim" or "peer"
    chapter: str | None  # the chapter's document name, for a claim

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def label(self) -> str:
        return "test-" + self.name.removeprefix("test_").replace("_", "-")

    @property
    def title(self) -> str:
        words = self.name.removeprefix("test_").replace("_", " ")
        return words[:1].upper() + words[1:]


def _mark(decorator: ast.expr) -> tuple[str, list[ast.expr]] | None:
    """``("claim", args)`` for ``@pytest.mark.claim(...)``, ``("peer", [])`` for ``@pytest.mark.peer``."""
    call = decorator if isinstance(decorator, ast.Call) else None
    target = call.func if call else decorator
    if (
        isinstance(target, ast.Attribute)
        and target.attr in {"claim", "peer"}
        and isinstance(target.value, ast.Attribute)
        and target.value.attr == "mark"
        and isinstance(target.value.value, ast.Name)
        and target.value.value.id == "pytest"
    ):
        return target.attr, list(call.args) if call else []
    return None


def marked_tests(root: Path) -> list[MarkedTest]:
    """Every marked test of ``root/tests/test_*.py``, in file order, then source order.

    Raises:
        ValueError: naming the file and test, for a claim marker without one chapter name as a string.
    """
    found = []
    for path in sorted((root / "tests").glob("test_*.py")):
        file = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=file)
        functions = [(node, node.name) for node in tree.body if isinstance(node, ast.FunctionDef)]
        for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            functions += [(node, f"{cls.name}.{node.name}") for node in cls.body if isinstance(node, ast.FunctionDef)]
        functions.sort(key=lambda item: item[0].lineno)
        for node, qualname in functions:
            for decorator in node.decorator_list:
                mark = _mark(decorator)
                if mark is None:
                    continue
                kind, args = mark
                chapter = None
                if kind == "claim":
                    if len(args) != 1 or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
                        raise ValueError(f"{file}::{qualname}: pytest.mark.claim takes one chapter name, a string")
                    chapter = args[0].value
                found.append(MarkedTest(file, qualname, kind, chapter))
    return found


def _include(test: MarkedTest) -> str:
    return f"```{{literalinclude}} ../{test.file}\n:language: python\n:pyobject: {test.qualname}\n```\n"


def chapters_section(tests: list[MarkedTest], chapters: dict[str, list]) -> str:
    """MyST: a section per chapter with claims (numbered as the site does, linked by its title), a section per claim.

    Raises:
        ValueError: naming the test, for a claim of a chapter the table of contents does not have.
    """
    claims = [t for t in tests if t.kind == "claim"]
    for test in claims:
        if test.chapter not in chapters:
            raise ValueError(
                f"{test.file}::{test.qualname}: pytest.mark.claim({test.chapter!r}) names no chapter of the book "
                f"(the chapters are {', '.join(chapters)})"
            )
    parts = []
    for chapter, (number, *_title_and_templates) in chapters.items():
        mine = [t for t in claims if t.chapter == chapter]
        if not mine:
            continue
        # the heading is the number alone: the title, a link, would put the page among a search's title hits
        parts.append(
            f"(claims-{chapter})=\n## Chapter {number}\n\nThe claims of {{doc}}`{chapter}`, each with its test.\n"
        )
        for test in mine:
            parts.append(f"({test.label})=\n### {test.title}\n\n{_include(test)}")
    return "\n".join(parts)


def peer_section(tests: list[MarkedTest], file: str, within: str | None) -> str:
    """MyST: the sources of ``file``'s peer tests (those of class ``within`` only, when given).

    Raises:
        ValueError: when there are none (a line on the page that shows nothing).
    """
    mine = [
        t
        for t in tests
        if t.kind == "peer" and t.file == file and (within is None or t.qualname.startswith(f"{within}."))
    ]
    if not mine:
        where = f"{file}::{within}" if within else file
        raise ValueError(f"docs/{PAGE}.md: no test of {where} is marked pytest.mark.peer")
    return "\n".join(_include(t) for t in mine)


def _chapters(root: Path) -> dict[str, list]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tinyformer_claims_authoring", root / "src" / "tinyformer_exercises" / "authoring.py"
    )
    authoring = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(authoring)
    return authoring.read_chapters(root / "docs")


def write_page(app: Sphinx, docname: str, source: list[str]) -> None:
    """``source-read``: replace the marker lines of docs/claims.md with the generated sections."""
    if docname != PAGE:
        return
    root = Path(app.srcdir).parent
    tests = marked_tests(root)
    for path in sorted((root / "tests").glob("test_*.py")):
        app.env.note_dependency(str(path))  # a test edited re-reads the page
    text = source[0]
    if CHAPTERS_LINE in text:
        text = text.replace(CHAPTERS_LINE, chapters_section(tests, _chapters(root)))
    text = PEER_LINE.sub(lambda m: peer_section(tests, m["file"], m["within"]), text)
    source[0] = text


def setup(app: Sphinx) -> dict:
    app.connect("source-read", write_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
