"""The PDF edition (``nox -s pdf``), checked against the site it is built beside.

The ``pdf`` fixture runs Sphinx's LaTeX builder on the ``book`` fixture's build (its doctrees, its
executed notebooks, the same configuration overrides), then ``make all-pdf`` (latexmk and XeLaTeX), the
way ``nox -s pdf`` does after ``nox -s docs``. Each chapter's pages are found through the PDF's own
outline anchors (the ``.toc`` file names them, ``pdfinfo -dests`` gives their pages) and read with
``pdftotext``; the numbers, figures, equations and exercises of each chapter are compared with the
chapter's HTML page.

Without TeX Live (xelatex, latexmk, xindy) or poppler-utils (pdftotext, pdfinfo) the tests skip on a
developer's machine and fail under CI (``CI`` set), like the browser tests; ``.ci/run`` installs them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from booktools import fresh_cache
from bs4 import BeautifulSoup
from conftest import OFFLINE, STAMP
from myst_nb.core.variables import format_plain_text

import tinyformer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TOOLS = ("xelatex", "latexmk", "xindy", "make", "pdftotext", "pdfinfo")
GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")
TOC_CHAPTER = re.compile(r"\\contentsline \{chapter\}\{(.*)\}\{([^{}]*)\}\{([^{}]+)\}%?$")
DEST = re.compile(r'^\s*(\d+)\s+\[.*\]\s+"(.+)"\s*$')
# Sphinx colours its messages when the environment asks for it (CI's FORCE_COLOR, a terminal): the colour
# codes split "updating environment: " from its counts, so the saved output is stripped of them.
ANSI = re.compile(r"\x1b\[[0-9;]*m")
OVERFULL = re.compile(r"^Overfull \\hbox \((\d+(?:\.\d+)?)pt too wide\) (.*)$", re.MULTILINE)
# Wider than this (in TeX points, 1/72.27 in) and a line visibly runs into the margin.
OVERFULL_LIMIT_PT = 5.0

pytestmark = pytest.mark.book


def numbered_chapters() -> list[str]:
    """The chapters in the order of docs/index.md's numbered toctree (chapter 1 first)."""
    index = (DOCS / "index.md").read_text()
    block = re.search(r"```\{toctree\}\n((?::[^\n]*\n)*)\n?(.*?)```", index, re.DOTALL)
    assert ":numbered:" in block.group(1)
    return [line.strip() for line in block.group(2).splitlines() if line.strip()]


CHAPTERS = numbered_chapters()


def require_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        message = f"{', '.join(missing)} not installed (TeX Live and poppler-utils, see README); no PDF tests"
        if os.environ.get("CI"):
            pytest.fail(message + " and CI must run them")
        pytest.skip(message)


def source_date_epoch() -> str:
    """The date conf.py gives the build: $SOURCE_DATE_EPOCH, else the last commit's time."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return os.environ["SOURCE_DATE_EPOCH"]
    result = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    return result.stdout.strip()


def sphinx(book: Path, builder: str, outdir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sphinx", "-b", builder, "-c", str(ROOT / "conf"), str(DOCS), str(outdir)]
    # the `book` fixture's overrides (tests/conftest.py): equal overrides, so Sphinx reuses that build's
    # environment and re-reads (and so re-executes) nothing
    command += ["-d", str(book / "doctrees"), "-W", "--keep-going", "-n", *fresh_cache(book), *extra]
    return subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=os.environ | OFFLINE, check=False, timeout=1800
    )


def latex_to_pdf(latex: Path) -> subprocess.CompletedProcess:
    """``make all-pdf`` in a LaTeX folder Sphinx wrote, exactly as ``nox -s pdf`` runs it."""
    env = os.environ | {"SOURCE_DATE_EPOCH": source_date_epoch(), "FORCE_SOURCE_DATE": "1"}
    env["LATEXOPTS"] = "-interaction=nonstopmode -halt-on-error"
    command = ["make", "-C", str(latex), "all-pdf", "LATEXMKOPTS=-silent"]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, check=False, timeout=1800
    )


#: The file beside a kept build (``TINYFORMER_BOOK_DIR``, tests/conftest.py) that names the sources its PDF was
#: compiled from: ``nox -s release`` reads the PDF ``nox -s tests`` compiled from scratch, and compiles it once more.
PDF_STAMP = "pdf-sources.sha256"


@pytest.fixture(scope="session")
def pdf(book):
    """The book's PDF edition, built from the ``book`` fixture's build: the folder holding ``latex/``.

    Built once per build of the book: a kept build whose PDF was compiled from the same sources (``PDF_STAMP``
    equal to the book's ``STAMP``) is read as it is."""
    require_tools()
    built_from = book / STAMP
    if (
        built_from.is_file()
        and (book / PDF_STAMP).is_file()
        and (book / PDF_STAMP).read_text() == built_from.read_text()
        and (book / "latex" / "tinyformer.pdf").is_file()
    ):
        return book
    (book / PDF_STAMP).unlink(missing_ok=True)
    written = sphinx(book, "latex", book / "latex")
    assert written.returncode == 0, f"the LaTeX builder failed:\n{written.stdout}\n{written.stderr}"
    compiled = latex_to_pdf(book / "latex")
    log = book / "latex" / "tinyformer.log"
    assert compiled.returncode == 0, f"latexmk failed:\n{compiled.stdout[-3000:]}\n{log.read_text()[-3000:]}"
    book.joinpath("latex-build.txt").write_text(ANSI.sub("", written.stdout + written.stderr))
    if built_from.is_file():
        (book / PDF_STAMP).write_text(built_from.read_text())
    return book


def pdf_text(pdf_file: Path, first: int | None = None, last: int | None = None) -> str:
    """Text of the PDF (pages ``first`` to ``last``), words joined by single spaces, hyphenation undone."""
    pages = [*(["-f", str(first)] if first else []), *(["-l", str(last)] if last else [])]
    text = subprocess.run(
        ["pdftotext", "-enc", "UTF-8", *pages, str(pdf_file), "-"], capture_output=True, text=True, check=True
    ).stdout
    return " ".join(re.sub(r"(\w)-\n(\w)", r"\1\2", text).split())


def chapter_pages(book: Path) -> dict[str, tuple[int, int]]:
    """Physical page ranges of the numbered chapters, from the ``.toc`` anchors and the PDF's destinations."""
    entries = [
        m.groups() for m in map(TOC_CHAPTER.match, (book / "latex" / "tinyformer.toc").read_text().splitlines()) if m
    ]
    dests = subprocess.run(
        ["pdfinfo", "-dests", str(book / "latex" / "tinyformer.pdf")], capture_output=True, text=True, check=True
    ).stdout
    page_of = {m.group(2): int(m.group(1)) for m in map(DEST.match, dests.splitlines()) if m}
    starts = [page_of[anchor] for _, _, anchor in entries]
    numbered = [i for i, (title, _, _) in enumerate(entries) if title.startswith(r"\numberline")]
    assert len(numbered) == len(CHAPTERS), f"the PDF has {len(numbered)} numbered chapters: {entries}"
    return {
        chapter: (starts[i], starts[i + 1] - 1 if i + 1 < len(starts) else 10_000)
        for chapter, i in zip(CHAPTERS, numbered, strict=True)
    }


def html_page(book: Path, page: str) -> BeautifulSoup:
    return BeautifulSoup((book / "html" / f"{page}.html").read_text(), "html.parser")


def words(element) -> str:
    """An element's text as one line, without the "#" permalinks Sphinx adds to headings and equations."""
    for link in element.select("a.headerlink"):
        link.decompose()
    return " ".join(element.get_text(" ").split())


def without_formulas(element) -> BeautifulSoup:
    """A copy of ``element`` with each formula replaced by ``$…$``, which :func:`plain_phrase` skips: a
    formula's text on the site (KaTeX's glyphs, MathML and TeX) is not what the PDF sets."""
    copy = BeautifulSoup(str(element), "html.parser")
    for formula in copy.select(".math"):
        formula.replace_with("$…$")
    return copy


def plain_phrase(text: str, length: int = 40) -> str:
    """The longest run of ``text`` that holds no formula (``$…$`` or TeX delimiters)."""
    runs = re.split(r"\\\(.*?\\\)|\\\[.*?\\\]|\$[^$]*\$", text)
    longest = max((run.strip(" .,;:") for run in runs), key=len)  # punctuation touching a formula cut
    return longest[:length].rsplit(" ", 1)[0] if len(longest) > length else longest


def test_the_pdf_builds_without_latex_errors_or_unresolved_references(pdf):
    pdf_file = pdf / "latex" / "tinyformer.pdf"
    assert pdf_file.stat().st_size > 100_000
    log = (pdf / "latex" / "tinyformer.log").read_text(errors="replace")
    errors = [line for line in log.splitlines() if line.startswith("! ")]
    assert not errors, f"LaTeX errors: {errors[:5]}"
    for problem in ("There were undefined references", "Citation", "multiply defined"):
        assert not [line for line in log.splitlines() if "Warning" in line and problem in line], problem


def test_a_pdf_build_after_the_site_executes_nothing(pdf):
    """The LaTeX builder reused the site's environment: no page re-read, so no chapter executed again."""
    output = (pdf / "latex-build.txt").read_text()
    assert "updating environment: 0 added, 0 changed, 0 removed" in output
    assert "Executing" not in output


def test_title_page_names_the_book_its_authors_edition_date_and_citation(pdf):
    from datetime import UTC, datetime

    pdf_file = pdf / "latex" / "tinyformer.pdf"
    title = pdf_text(pdf_file, 1, 1)
    assert "tinyformer" in title
    assert "attention and position in Transformers" in title
    assert "The tinyformer authors" in title
    assert f"Edition {tinyformer.__version__}" in title
    built = datetime.fromtimestamp(int(source_date_epoch()), tz=UTC).date().isoformat()
    assert f"Built {built}" in title
    cite = pdf_text(pdf_file, 2, 2)
    assert "How to cite this edition" in cite
    assert f"(Version {tinyformer.__version__})" in cite
    assert "@book{tinyformer2026," in cite
    info = subprocess.run(["pdfinfo", str(pdf_file)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^Title:\s+tinyformer: attention and position in Transformers", info, re.MULTILINE)
    contents = pdf_text(pdf_file, 3, 4)
    assert "contents" in contents.lower()  # the heading is set in capitals


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_value_the_page_shows_is_in_the_pdf(pdf, chapter):
    import json

    first, last = chapter_pages(pdf)[chapter]
    text = pdf_text(pdf / "latex" / "tinyformer.pdf", first, last)
    site = " ".join(html_page(pdf, chapter).get_text().split())
    glued = json.loads((pdf / "jupyter_execute" / f"{chapter}.glue.json").read_text())
    roles = GLUE_ROLE.findall((DOCS / f"{chapter}.md").read_text())
    assert roles, "the chapter glues no numbers"
    for key, spec in roles:
        # spaces as in the site's and the PDF's text (a no-break space becomes a plain one)
        value = " ".join(format_plain_text(glued[key]["data"]["text/plain"], spec or "").split())
        assert value in site, f"glue {key!r}: the site shows no {value!r}"
        assert value in text, f"glue {key!r}: the site shows {value!r}, the PDF's chapter pages {first}-{last} do not"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_figures_equations_and_exercises_are_numbered_as_on_the_site(pdf, chapter):
    first, last = chapter_pages(pdf)[chapter]
    text = pdf_text(pdf / "latex" / "tinyformer.pdf", first, last)
    page = html_page(pdf, chapter)
    figures = [words(f.select_one(".caption-number")) for f in page.select("figure")]
    for number in figures:
        assert f"{number}:" in text or f"{number} " in text, f"{number} of the site is not a caption in the PDF"
    equations = [words(e) for e in page.select("span.eqno")]
    for number in equations:
        assert number in text, f"equation {number} of the site is not numbered so in the PDF"
    exercises = [words(t) for t in page.select("div.exercise > p.admonition-title")]
    for title in exercises:
        assert title in text, f"{title!r} is not in the PDF"


def test_the_pdf_has_as_many_figures_as_the_site_and_every_one_is_vector(pdf):
    site = sum(len(html_page(pdf, page).select("figure")) for page in CHAPTERS)
    tex = (pdf / "latex" / "tinyformer.tex").read_text()
    figures = re.findall(r"\\begin\{figure\}.*?\\end\{figure\}", tex, re.DOTALL)
    assert len(figures) == site >= 1
    for figure in figures:
        (image,) = re.findall(r"\\sphinxincludegraphics(?:\[[^\]]*\])?\{\{([^}]*)\}(\.\w+)\}", figure)
        assert image[1] == ".pdf", f"figure {image[0]} is a bitmap; every figure should be vector PDF"
        assert (pdf / "latex" / f"{image[0]}{image[1]}").stat().st_size > 2_000


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_solution_is_printed_after_its_exercise(pdf, chapter):
    first, last = chapter_pages(pdf)[chapter]
    text = pdf_text(pdf / "latex" / "tinyformer.pdf", first, last)
    page = html_page(pdf, chapter)
    solutions = page.select("div.solution")
    assert len(solutions) == len(page.select("div.exercise")) >= 1
    position = 0
    for exercise, solution in zip(page.select("div.exercise"), solutions, strict=True):
        title = words(exercise.select_one("p.admonition-title"))
        first = solution.select_one("section, div.section, p:not(.admonition-title)")
        # inline markup joined as the PDF sets it
        body = plain_phrase(" ".join(without_formulas(first).get_text().split()))
        exercise_at = text.find(title, position)
        assert exercise_at >= 0, f"{title!r} missing"
        solution_at = text.find(body, exercise_at)
        assert solution_at > exercise_at, f"the solution of {title!r} ({body!r}) is not printed after it"
        position = exercise_at + 1


def test_no_line_runs_into_the_margin(pdf):
    log = (pdf / "latex" / "tinyformer.log").read_text(errors="replace")
    overfull = [(float(width), where) for width, where in OVERFULL.findall(log)]
    too_wide = [item for item in overfull if item[0] > OVERFULL_LIMIT_PT]
    assert not too_wide, (
        f"{len(too_wide)} lines run past the margin by more than {OVERFULL_LIMIT_PT} pt: {too_wide[:5]}"
    )


def test_glossary_terms_are_in_the_index(pdf):
    text = pdf_text(pdf / "latex" / "tinyformer.pdf")
    index = text[text.rfind("INDEX") :]  # the index chapter's title, set in capitals
    glossary = html_page(pdf, "glossary")
    terms = [words(t) for t in glossary.select("dl.glossary dt")]
    assert len(terms) >= 10
    for term in terms:
        assert re.search(rf"\b{re.escape(term)}\b,? \d+", index, re.IGNORECASE), f"{term!r} is not in the index"


@pytest.mark.release
def test_the_pdf_is_byte_identical_across_two_clean_builds(pdf, tmp_path):
    """A second LaTeX output of the same build, compiled from scratch into a folder of its own, gives the
    same bytes as the fixture's, which was compiled from scratch too (by ``nox -s tests``, in the run that
    ``.ci/run`` makes: two clean compiles, in two sessions)."""
    written = sphinx(pdf, "latex", tmp_path / "again", "-q")
    assert written.returncode == 0, written.stderr
    compiled = latex_to_pdf(tmp_path / "again")
    assert compiled.returncode == 0, compiled.stdout[-2000:]
    assert (tmp_path / "again" / "tinyformer.pdf").read_bytes() == (pdf / "latex" / "tinyformer.pdf").read_bytes()


def _luminance(css_color: str) -> float:
    """Relative luminance (WCAG) of a computed ``rgb(...)``/``rgba(...)`` colour."""
    channels = [int(value) / 255 for value in re.findall(r"\d+", css_color)[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


@pytest.fixture(scope="module")
def chromium():
    """Headless Chromium, one for the module (Playwright's sync API: one instance at a time in a process)."""
    from playwright.sync_api import sync_playwright

    executable = os.environ.get("TINYFORMER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed and CI must run the print test")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_printing_a_page_in_dark_mode_gives_a_light_readable_page(book, chromium, chapter):
    """conf/tinyformer.css's print block: page, headings, text and code print dark on light."""
    page = chromium.new_page(color_scheme="dark")
    try:
        page.goto((book / "html" / f"{chapter}.html").as_uri())
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        page.emulate_media(media="print", color_scheme="dark")
        colours = page.evaluate(
            """() => {
                const colour = (selector, property) => getComputedStyle(document.querySelector(selector))[property];
                return {page: colour('body', 'backgroundColor'), text: colour('article p', 'color'),
                        heading: colour('article h1', 'color'), code: colour('.highlight pre', 'backgroundColor'),
                        codeText: colour('.highlight pre', 'color')};
            }"""
        )
    finally:
        page.close()
    assert _luminance(colours["page"]) > 0.9, colours
    assert _luminance(colours["code"]) > 0.85, colours
    for text in ("text", "heading", "codeText"):
        contrast = (_luminance(colours["page"]) + 0.05) / (_luminance(colours[text]) + 0.05)
        assert contrast >= 7, f"{text} prints with contrast {contrast:.1f} on the page: {colours}"


def test_a_character_missing_from_its_font_fails_the_pdf_build_naming_it(tmp_path):
    """A Greek letter typed into a formula has no glyph in the math font: the build stops and says which
    character (conf/latex/tinyformer.sty, \\tracinglostchars=3), and nox -s pdf prints it from the log
    (conf/latex/errors.py); without the setting XeLaTeX drops the glyph and the build is green."""
    require_tools()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# A tiny book\n\nA formula with a letter its font lacks: $x + α$.\n")
    command = [sys.executable, "-m", "sphinx", "-b", "latex", "-c", str(ROOT / "conf"), str(docs)]
    command += [str(tmp_path / "latex"), "-d", str(tmp_path / "doctrees"), "-q"]
    command += ["-D", f"nb_execution_cache_path={tmp_path / 'cache'}"]
    written = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=os.environ | OFFLINE, check=False)
    assert written.returncode == 0, written.stderr
    compiled = latex_to_pdf(tmp_path / "latex")
    assert compiled.returncode != 0, "the PDF built although a character has no glyph"
    sys.path.insert(0, str(ROOT / "conf" / "latex"))
    try:
        from errors import latex_errors
    finally:
        sys.path.remove(str(ROOT / "conf" / "latex"))
    errors = latex_errors((tmp_path / "latex" / "tinyformer.log").read_text(errors="replace"))
    assert any(error.startswith('Missing character: There is no α ("3B1) in font') for error in errors), errors
