"""Templates made from reference solutions: one file per exercise, the
reference solution with its answer between solution markers, as
otter-grader marks them::

    def causal_mask(seq_len: int) -> Tensor:
        \"\"\"...\"\"\"
        # BEGIN SOLUTION
        return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
        # END SOLUTION

:func:`template_from_solution` gives the student's template: a marked
block inside a function becomes ``raise NotImplementedError`` (at the
block's indentation), and a marked block at the top level (an import or a
helper only the answer needs) goes. The reference solutions live in the
repository's ``tests/exercise_solutions/`` (the book shows them, folded);
the templates in ``templates/`` are written from them by ``nox -s
templates``, and a test fails when one is not what its solution gives.

A solution's docstring opens with ``\"\"\"Coding exercise ID.``; its template
names the chapter there as the site numbers and titles it, from
``chapters.json``, which :func:`write_chapters` writes from the book's table
of contents (``docs/index.md``) and the chapters' headings: the number and
the title are written nowhere else by hand.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

__all__ = [
    "BEGIN",
    "CHAPTERS_FILE",
    "END",
    "read_chapters",
    "template_from_solution",
    "write_chapters",
    "write_exercise_files",
    "write_templates",
]

#: The chapters' numbers and titles, by document name, in the exercises package.
CHAPTERS_FILE = "chapters.json"
_EXERCISE = re.compile(r"^(?:`{3,}|:{3,})\{exercise\}", re.M)
_HEADER = re.compile(r'\A"""Coding exercise (?P<id>[a-z0-9-]+)\.\n')

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
_MARKER = re.compile(
    r"^(?P<indent>[ ]*)# (?P<kind>BEGIN|END) SOLUTION[ ]*$"
)


def template_from_solution(
    text: str, *, name: str = "<solution>", chapter: str | None = None
) -> str:
    """The template of the reference solution ``text``.

    ``chapter`` (``'chapter 4, "A miniature Transformer from scratch"'``), when
    given, goes into the opening line ``\"\"\"Coding exercise ID.``, which
    then reads ``\"\"\"Coding exercise ID (chapter 4, "...").``, wrapped at 79
    columns.

    Raises:
        ValueError: naming ``name`` and the line, for a marker without its
            pair, nested markers, an ``END`` at another indentation than
            its ``BEGIN``, or a file with no marked block at all.
    """
    out: list[str] = []
    opened: tuple[int, str] | None = None  # (line number, indentation)
    blocks = 0
    gaps: list[int] = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        marker = _MARKER.match(line.rstrip("\n"))
        if marker is None:
            if opened is None:
                out.append(line)
            continue
        indent = marker["indent"]
        if marker["kind"] == "BEGIN":
            if opened is not None:
                raise ValueError(
                    f"{name}:{number}: {BEGIN} inside the block opened at line {opened[0]}"
                )
            opened = (number, indent)
            continue
        if opened is None:
            raise ValueError(f"{name}:{number}: {END} without a {BEGIN}")
        if indent != opened[1]:
            raise ValueError(
                f"{name}:{number}: {END} is not indented as its {BEGIN} (line {opened[0]})"
            )
        if indent:  # inside a function: the student writes it
            out.append(f"{indent}raise NotImplementedError\n")
        else:
            gaps.append(len(out))  # where a top-level block was
        opened = None
        blocks += 1
    if opened is not None:
        raise ValueError(f"{name}:{opened[0]}: {BEGIN} is never closed")
    if blocks == 0:
        raise ValueError(
            f"{name}: no {BEGIN} ... {END} block: nothing for a student to write"
        )
    for at in reversed(gaps):  # two blank lines where the block stood
        start, stop = at, at
        while start > 0 and not out[start - 1].strip():
            start -= 1
        while stop < len(out) and not out[stop].strip():
            stop += 1
        if stop - start > 2:
            out[start:stop] = ["\n", "\n"]
    made = "".join(out)
    if chapter is not None:
        header = _HEADER.match(made)
        if header is None:
            raise ValueError(
                f"{name}:1: the docstring does not open with "
                + '"""Coding exercise ID.'
            )
        opening = f'"""Coding exercise {header["id"]} ({chapter}).'
        made = (
            textwrap.fill(opening, width=79) + "\n" + made[header.end() :]
        )
    return made


def write_templates(
    solutions: Path, templates: Path, chapters: dict[str, str]
) -> list[str]:
    """Write ``templates/NAME`` from ``solutions/NAME`` for each file name of
    ``chapters`` (file name: the chapter's name, as
    :func:`template_from_solution` takes it); the names whose template
    changed."""
    changed = []
    for file_name, chapter in chapters.items():
        made = template_from_solution(
            (solutions / file_name).read_text(),
            name=file_name,
            chapter=chapter,
        )
        target = templates / file_name
        if not target.exists() or target.read_text() != made:
            target.write_text(made)
            changed.append(file_name)
    return changed


def read_chapters(docs: Path) -> dict[str, list]:
    """The book's chapters, by document name: ``[number, title, templates]``,
    in order, ``templates`` mapping each coding exercise's template to the
    exercise's number on the page (``"6.7"``).

    The numbers are the places in ``docs/index.md``'s ``:numbered:`` toctree
    (the site's and the PDF's chapter numbers), the titles each page's first
    ``# `` heading, and the templates the file names of the coding
    exercises' templates that the page links (``templates/NAME.py``), in the
    order the page sets them: the checker lists and numbers the exercises in
    that order.

    Raises:
        ValueError: naming the file, when the index has no numbered toctree or
            a chapter has no ``# `` heading.
    """
    index = (docs / "index.md").read_text()
    blocks = re.finditer(
        r"^```\{toctree\}\n(?P<body>(?:(?!```).*\n)*?)```", index, re.M
    )
    numbered = [
        b["body"]
        for b in blocks
        if re.search(r"^:numbered:", b["body"], re.M)
    ]
    if len(numbered) != 1:
        raise ValueError(
            f"{docs / 'index.md'}: no single :numbered: toctree"
        )
    names = [
        line.strip()
        for line in numbered[0].splitlines()
        if line.strip() and not line.startswith(":")
    ]
    chapters: dict[str, list] = {}
    for number, name in enumerate(names, 1):
        page = docs / f"{name}.md"
        text = page.read_text()
        # the first "# " line after the front matter (where "# " is a
        # YAML comment)
        body = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
        heading = next(
            (line for line in body.splitlines() if line.startswith("# ")),
            None,
        )
        if heading is None:
            raise ValueError(f"{page}: no '# ' heading")
        # sphinx-exercise numbers a chapter's exercises in page order
        # (Exercise 6.1, 6.2, ...); a coding exercise is the one whose body
        # links its template
        templates: dict[str, str] = {}
        parts = _EXERCISE.split(text)
        for place, body in enumerate(parts[1:], 1):
            for template in re.findall(
                r"tinyformer_exercises/templates/([a-z0-9_]+\.py)>", body
            ):
                templates.setdefault(template, f"{number}.{place}")
        chapters[name] = [number, heading[2:].strip(), templates]
    return chapters


def write_chapters(docs: Path, target: Path) -> bool:
    """Write :func:`read_chapters` of ``docs`` to ``target`` as JSON; whether
    the file changed."""
    made = (
        json.dumps(read_chapters(docs), indent=2, ensure_ascii=False) + "\n"
    )
    if target.exists() and target.read_text() == made:
        return False
    target.write_text(made)
    return True


def write_exercise_files(root: Path) -> tuple[bool, list[str], int]:
    """Write what the exercises package of the project at ``root`` holds from
    the book's sources: ``chapters.json`` from ``docs/`` (:func:`write_chapters`),
    then every template from its reference solution in
    ``tests/exercise_solutions/`` (:func:`write_templates`), each naming its
    chapter. Returns whether chapters.json changed, the templates written
    anew, and how many templates there are.

    Loads the registry (the package's ``__init__.py``) by path, so it runs
    without tinyformer or torch installed (``nox -s templates``).
    """
    import importlib.util
    import sys

    package = root / "src" / "tinyformer_exercises"
    chapters_changed = write_chapters(
        root / "docs", package / CHAPTERS_FILE
    )
    name = "tinyformer_exercises_registry"
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py"
    )
    registry = importlib.util.module_from_spec(spec)
    sys.modules[name] = registry  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(registry)
    finally:
        del sys.modules[name]
    chapters = {
        e.template: e.chapter_name for e in registry.EXERCISES.values()
    }
    changed = write_templates(
        root / "tests" / "exercise_solutions",
        package / "templates",
        chapters,
    )
    return chapters_changed, changed, len(chapters)
