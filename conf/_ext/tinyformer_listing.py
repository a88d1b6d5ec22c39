"""The ``{listing}`` directive: a function or method of the library as a chapter shows it (a Sphinx extension).

A listing always shows the object's ``def`` (its decorators and signature), then only the lines that
carry the chapter's idea, with ``...`` (Python's Ellipsis, at the code's indentation) where lines are
left out: the docstring and argument checks before ``:show-from:``, a branch for a later chapter
between ``:omit-from:`` and ``:omit-before:``, the rest after ``:show-before:``. So a reader always
knows which function the lines belong to and that something was left out, which ``literalinclude``
with ``:start-at:`` does not say. The chapters show the reference solutions of their exercises this way
too (the docstring, which the template gives, as ``...``; the solution markers left out)::

    ```{listing} ../src/tinyformer/models/attention.py
    :pyobject: MultiHeadAttention.forward
    :show-from: q = self.split_heads
    :omit-from: "# Rotary positions"
    :omit-before: weights = None
    ```

A value that starts with ``#`` is quoted: MyST reads the options as YAML, where it starts a comment.

Each option is a piece of text, found in the first line that contains it after the place the previous
option found (``:omit-from:`` and ``:omit-before:`` may hold several pieces, separated by ``;;`` and
taken in pairs); one that is not found is an error naming it, so a listing cannot silently drift from
the source. The
text is read by :func:`listing_text`, which the tests use as well (tests/test_assignable.py).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.directives.code import LiteralIncludeReader
from sphinx.util.docutils import SphinxDirective

OPTIONS = ("show-from", "show-before", "omit-from", "omit-before")
SOLUTION_MARKERS = ("# BEGIN SOLUTION", "# END SOLUTION")
SEPARATOR = ";;"  # between the pieces of :omit-from: and of :omit-before:, taken in pairs


def _find(lines: list[str], text: str, start: int, option: str, where: str) -> int:
    for index in range(start, len(lines)):
        if text in lines[index]:
            return index
    raise ValueError(f"{where}: :{option}: {text!r} is not in the listed lines")


def listing_text(filename: str | Path, options: dict[str, str]) -> str:
    """The text a ``{listing}`` shows: ``options["pyobject"]`` of ``filename``, dedented, with its
    signature and the selected lines (keys of :data:`OPTIONS`), ``...`` where lines are left out.

    Raises:
        ValueError: if ``pyobject`` is missing or not a function or method, or an option's text is not
            found (after the signature; ``:omit-before:`` after ``:omit-from:``).
    """
    where = f"{Path(filename).name}: {options.get('pyobject')}"
    if not options.get("pyobject"):
        raise ValueError(f"{where}: a listing needs :pyobject:")
    for name in OPTIONS:
        if name in options and not str(options[name]).strip():
            # MyST reads a value that starts with "#" as a comment: quote it
            raise ValueError(f'{where}: :{name}: is empty (a value that starts with "#" must be quoted)')
    text, _ = LiteralIncludeReader(
        str(filename), {"pyobject": options["pyobject"]}, SimpleNamespace(source_encoding="utf-8")
    ).read()
    # A reference solution marks its answer for the template (tinyformer_exercises.authoring): the
    # listing shows the answer without the markers.
    text = "".join(line for line in text.splitlines(keepends=True) if line.strip() not in SOLUTION_MARKERS)
    text = textwrap.dedent(text)
    lines = text.splitlines()
    function = ast.parse(text).body[0]
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        raise ValueError(f"{where}: :pyobject: must name a function or method")
    body = function.body
    first = body[0].lineno - 1  # the first line after the signature
    after_docstring = (
        body[1].lineno - 1
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        else first
    )
    indent = " " * (len(lines[first]) - len(lines[first].lstrip()))
    begin = (
        _find(lines, options["show-from"], after_docstring, "show-from", where)
        if options.get("show-from")
        else after_docstring
    )
    cuts = [text for text in options.get("omit-from", "").split(SEPARATOR) if text.strip()]
    resumes = [text for text in options.get("omit-before", "").split(SEPARATOR) if text.strip()]
    if len(cuts) != len(resumes):
        raise ValueError(f"{where}: :omit-from: and :omit-before: need as many pieces ({len(cuts)} and {len(resumes)})")
    shown: list[str] = []
    at = begin
    for cut_text, resume_text in zip(cuts, resumes, strict=True):
        cut = _find(lines, cut_text.strip(), at, "omit-from", where)
        resume = _find(lines, resume_text.strip(), cut + 1, "omit-before", where)
        gap = " " * (len(lines[cut]) - len(lines[cut].lstrip()))
        shown += [*lines[at:cut], gap + "..."]
        at = resume
    end = _find(lines, options["show-before"], at, "show-before", where) if options.get("show-before") else len(lines)
    shown += lines[at:end]
    while shown and not shown[-1].strip():
        shown.pop()
    out = lines[:first]
    if begin > first:  # the docstring, argument checks, or more
        out.append(indent + "...")
    for line in shown:  # one "..." for gaps that touch
        if not (line.strip() == "..." and out and out[-1].strip() == "..."):
            out.append(line)
    if end < len(lines) and any(line.strip() for line in lines[end:]) and out[-1].strip() != "...":
        out.append(indent + "...")
    return "\n".join(out) + "\n"


class Listing(SphinxDirective):
    """``{listing} path`` with ``:pyobject:`` and the options of :data:`OPTIONS`."""

    required_arguments = 1
    option_spec: ClassVar[dict] = {
        "pyobject": directives.unchanged_required,
        **dict.fromkeys(OPTIONS, directives.unchanged),
    }

    def run(self) -> list[nodes.Node]:
        rel_filename, filename = self.env.relfn2path(self.arguments[0])
        self.env.note_dependency(rel_filename)
        try:
            text = listing_text(filename, self.options)
        except (ValueError, OSError) as err:
            raise self.error(str(err)) from err
        block = nodes.literal_block(text, text, source=filename)
        block["language"] = "python"
        block["highlight_args"] = {}
        self.set_source_info(block)
        return [block]


def setup(app):
    app.add_directive("listing", Listing)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
