"""Every chapter can be assigned unchanged: no coding exercise is answered by a listing above it, and no
build plumbing is on the page (issue 24, items 1 and 2).

These read the chapters' sources as Sphinx does (myst-nb's notebook reader for cells, Sphinx's
``literalinclude`` reader and ``conf/_ext/tinyformer_listing.py`` for listings); they need no built book.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from myst_nb.core.read import read_myst_markdown_notebook
from myst_parser.parsers.options import options_to_items
from sphinx.directives.code import LiteralIncludeReader

from tinyformer_exercises import CHAPTERS, EXERCISES, Exercise

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_spec = importlib.util.spec_from_file_location("tinyformer_listing", ROOT / "conf" / "_ext" / "tinyformer_listing.py")
listing_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(listing_module)

# A listing above a coding exercise that shows at least this share of the lines that compute the
# answer (the library's function, its docstring and argument checks left out) gives it away.
GIVEAWAY_SHARE = 0.5
FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<directive>literalinclude|listing)\}\s+(?P<path>\S+)\s*$")
OPTION = re.compile(r"^:(?P<name>[\w-]+):\s*(?P<value>.*)$")
HIDDEN = {"remove-cell", "remove-input"}


@dataclass(frozen=True)
class Listing:
    line: int  # 1-based line of the directive in the chapter
    directive: str
    path: str
    options: dict[str, str]

    def text(self) -> str:
        """What the page shows, read as Sphinx reads it."""
        filename = (DOCS / self.path).resolve()
        if self.directive == "listing":
            return listing_module.listing_text(filename, self.options)
        keep = {"pyobject", "start-at", "start-after", "end-before", "end-at", "lines", "dedent"}
        options = {k: (int(v) if k == "dedent" else v) for k, v in self.options.items() if k in keep}
        text, _ = LiteralIncludeReader(str(filename), options, SimpleNamespace(source_encoding="utf-8")).read()
        return text


def listings(text: str) -> list[Listing]:
    """Every ``literalinclude`` and ``listing`` of a chapter, with its options."""
    found: list[Listing] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index].strip())
        if match:
            start, block = index, []
            index += 1
            while not lines[index].strip().startswith(match["fence"]):
                if OPTION.match(lines[index].strip()):
                    block.append(lines[index].strip()[1:])
                index += 1
            # the options as MyST reads them (YAML: a value that starts with "#" is a comment)
            options = dict(options_to_items("\n".join(block))[0])
            found.append(Listing(start + 1, match["directive"], match["path"], options))
        index += 1
    return found


def resolve(dotted: str):
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:split]))
            break
        except ImportError:
            continue
    for part in parts[split:]:
        target = getattr(target, part)
    return target


def _is_argument_check(statement: ast.stmt) -> bool:
    """``raise``, ``if ...: raise``, ``try: ... except: raise ...`` and calls of a ``check...`` helper."""
    if isinstance(statement, ast.Raise):
        return True
    if isinstance(statement, ast.If) and not statement.orelse and all(isinstance(s, ast.Raise) for s in statement.body):
        return True
    if isinstance(statement, ast.Try):
        return any(isinstance(s, ast.Raise) for handler in statement.handlers for s in handler.body)
    call = getattr(statement, "value", None)
    if isinstance(call, ast.Call):
        name = getattr(call.func, "id", getattr(call.func, "attr", ""))
        return "check" in name
    return False


def computing_lines(function) -> set[str]:
    """The stripped source lines of ``function``'s body that compute: no docstring, comment, blank line
    or argument check."""
    source = textwrap.dedent(inspect.getsource(function))
    lines = source.splitlines()
    body = ast.parse(source).body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    kept: set[str] = set()
    for statement in body:
        if _is_argument_check(statement):
            continue
        for number in range(statement.lineno, statement.end_lineno + 1):
            line = lines[number - 1].strip()
            if line and not line.startswith("#"):
                kept.add(line)
    return kept


def shown_before(exercise: Exercise) -> list[tuple[Listing, set[str]]]:
    """The listings of the exercise's chapter above its statement, each with its stripped lines (the
    solutions of earlier exercises, folded until a reader opens them, are not counted)."""
    text = (DOCS / f"{exercise.chapter}.md").read_text()
    statement = text.index(f"nox -s check -- {exercise.id} ")
    line = text[:statement].count("\n") + 1
    return [
        (listing, {row.strip() for row in listing.text().splitlines() if row.strip()})
        for listing in listings(text)
        if listing.line < line and "exercise_solutions/" not in listing.path
    ]


def giveaways(exercise: Exercise) -> list[str]:
    found = []
    for listing, shown in shown_before(exercise):
        for reference in exercise.references:
            if reference in exercise.variant_of:
                continue
            computing = computing_lines(resolve(reference))
            share = len(computing & shown) / len(computing)
            if share >= GIVEAWAY_SHARE:
                found.append(
                    f"{exercise.chapter}.md:{listing.line} lists {share:.0%} of {reference}, which "
                    f"exercise {exercise.id} asks for"
                )
    return found


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=lambda e: e.id)
def test_no_listing_above_a_coding_exercise_gives_its_function_away(exercise):
    """Above a coding exercise, the page lists at most a part of the function it asks for (the lines that
    carry the idea); an exercise that follows a full listing asks for another form of it and says so
    (``Exercise.variant_of``)."""
    assert giveaways(exercise) == []


def test_the_giveaway_check_sees_a_listing_of_the_function(monkeypatch, tmp_path):
    """Seen to fail: a chapter that lists the exercise's function just above it."""
    (tmp_path / "attention.md").write_text(
        f"# A\n\n```{{literalinclude}} {ROOT}/src/tinyformer/models/attention.py\n"
        ":pyobject: scaled_dot_product_attention\n```\n\n"
        "$ nox -s check -- scaled-dot-product-attention sdpa.py\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "DOCS", tmp_path)
    found = giveaways(EXERCISES["scaled-dot-product-attention"])
    assert len(found) == 1
    assert "tinyformer.models.attention.scaled_dot_product_attention" in found[0]


def test_a_variant_names_what_it_follows_and_says_how_it_differs():
    for exercise in EXERCISES.values():
        assert set(exercise.variant_of) <= set(exercise.references), exercise.id
        if exercise.variant_of:
            assert exercise.variant_differs, f"{exercise.id}: a variant says how it differs from the listing"


def chapter_sources() -> list[Path]:
    return [DOCS / f"{name}.md" for name in CHAPTERS]


@pytest.mark.parametrize("path", chapter_sources(), ids=lambda p: p.stem)
def test_every_listing_of_a_function_shows_its_def(path):
    """A listing of part of a function is a ``{listing}``, which shows the ``def`` and ``...`` where lines
    are left out; a ``literalinclude`` of a Python object shows all of it."""
    partial = [
        f"{path.name}:{listing.line}"
        for listing in listings(path.read_text())
        if listing.directive == "literalinclude"
        and "pyobject" in listing.options
        and {"start-at", "start-after", "end-before", "end-at", "lines"} & set(listing.options)
    ]
    assert partial == []
    for listing in listings(path.read_text()):
        if listing.directive == "listing":
            assert re.match(r"(@.*\n)*(async )?def ", listing.text()), f"{path.name}:{listing.line}"


def visible_code_cells(path: Path) -> list[str]:
    notebook = read_myst_markdown_notebook(path.read_text())
    return [
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code" and not HIDDEN & set(cell.metadata.get("tags", []))
    ]


@pytest.mark.parametrize("path", chapter_sources(), ids=lambda p: p.stem)
def test_no_visible_code_cell_calls_glue_or_checks_a_claim(path):
    """``glue`` calls and claim checks (``assert``) sit in hidden cells: a reader who copies the visible
    cells into a notebook gets no NameError, and sees only what teaches. (``torch.testing.assert_close``
    against the library, the house style's check of a from-scratch version, is teaching.)"""
    for source in visible_code_cells(path):
        calls = {
            getattr(node.func, "id", getattr(node.func, "attr", None))
            for node in ast.walk(ast.parse(_python(source)))
            if isinstance(node, ast.Call)
        }
        asserts = [node for node in ast.walk(ast.parse(_python(source))) if isinstance(node, ast.Assert)]
        assert "glue" not in calls, f"{path.name}: a visible cell calls glue:\n{source}"
        assert not asserts, f"{path.name}: a visible cell checks a claim with assert:\n{source}"


def _python(source: str) -> str:
    """A cell's source without IPython's magics (``%matplotlib inline``)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


TEST_NAMES = re.compile(r"\btests/|\btest_\w+\.py\b|::test_\w+")


@pytest.mark.parametrize("path", chapter_sources(), ids=lambda p: p.stem)
def test_no_chapter_names_a_test_file(path):
    """The text and the visible code never name a file under ``tests/`` or a pytest node id (the claims
    page and its badges do); a listing's path, which the page does not show, may."""
    shown = [line for line in path.read_text().splitlines() if not FENCE.match(line.strip())]
    named = [line for line in shown if TEST_NAMES.search(line)]
    assert named == []


FRONT_MATTER = "---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n---\n"


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("```{code-cell} ipython3\nglue('x', 1, display=False)\n```\n", "calls glue"),
        ("```{code-cell} ipython3\nx = 1\nassert x == 1\n```\n", "checks a claim"),
    ],
    ids=["glue", "assert"],
)
def test_the_plumbing_check_sees_a_visible_glue_or_assert(tmp_path, body, complaint):
    """Seen to fail: a visible cell that glues, and one that asserts; hidden, both pass."""
    page = tmp_path / "page.md"
    page.write_text(FRONT_MATTER + "# P\n\n" + body)
    with pytest.raises(AssertionError, match=complaint):
        test_no_visible_code_cell_calls_glue_or_checks_a_claim(page)
    page.write_text(FRONT_MATTER + "# P\n\n" + body.replace("ipython3\n", "ipython3\n:tags: [remove-cell]\n\n", 1))
    test_no_visible_code_cell_calls_glue_or_checks_a_claim(page)


def test_the_test_name_check_sees_a_test_file_but_not_a_listing_path(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# P\n\n```{literalinclude} ../tests/exercise_solutions/causal_mask.py\n```\n")
    test_no_chapter_names_a_test_file(page)
    page.write_text("# P\n\nThe claim is checked by `tests/test_claims.py::test_x`.\n")
    with pytest.raises(AssertionError):
        test_no_chapter_names_a_test_file(page)
