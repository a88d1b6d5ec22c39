"""The built book as a reader meets it: headless Chromium over the site served on 127.0.0.1.

Every page of the ``book`` fixture's build (the pages come from ``docs/``, so new chapters are picked up
without editing this file; the general index and the search page are added) is opened in a light and a
dark browser; the book follows the reader's ``prefers-color-scheme``. The browser may reach only the
local server: any other request is aborted and recorded, so these tests pass only if the book works
with no network at all.

Chromium is Debian's (``/usr/bin/chromium``, or ``TINYFORMER_CHROMIUM``), driven by the ``playwright``
package's bundled driver; no browser is downloaded. Without Chromium the tests skip on a developer's
machine and fail under CI (``CI`` set), so CI can never pass without having run them; ``.ci/run``
installs Chromium when it is missing.

``nox -s screenshots`` writes full-page screenshots of every page in both themes to
``build/screenshots/{light,dark}/`` (1280 px) and of every chapter to ``build/screenshots/390/{light,dark}/``, as
JPEG (a chapter is up to 35,000 px tall: as PNG its shot took 2.1 s, as JPEG 1.3 s); ``nox -s tests`` takes only
the phone menus' shots.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import shutil
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import nbformat
import pytest
from axe_playwright_python.sync_playwright import Axe
from PIL import Image, ImageStat
from playwright.sync_api import Browser, Page, Request, expect, sync_playwright

import tinyformer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCREENSHOTS = ROOT / "build" / "screenshots"
# Every page built from docs/ (Sphinx docnames), and the chapters among them.
PAGES = sorted(
    p.relative_to(DOCS).with_suffix("").as_posix()
    for p in DOCS.rglob("*.md")
    if not {"_build", "jupyter_execute", ".ipynb_checkpoints"} & set(p.relative_to(DOCS).parts)
)
CHAPTERS = [page for page in PAGES if (DOCS / f"{page}.md").read_text().startswith("---\njupytext:")]
# The pages Sphinx's HTML builder always adds: they too must load offline and be accessible.
GENERATED = ["genindex", "search"]
THEMES = ("light", "dark")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-quic",
    "--disable-sync",
]
# True once the search page has listed every result (Sphinx's searchtools writes its summary last).
SEARCH_FINISHED = (
    "/Search finished|did not match/.test(document.querySelector('#search-results .search-summary')?.textContent)"
)
# Raw TeX delimiters that mean a formula was not typeset.
RAW_MATH = re.compile(r"\$|\\\(|\\\)|\\\[|\\\]")
# Resolves once the fonts the page's text and formulas use have loaded (widths and pixels depend on them).
FONTS_READY = "() => document.fonts.ready.then(() => null)"
BLOCKING_IMPACTS = {"serious", "critical"}
SOLUTION = re.compile(r"^(?::{3,}|`{3,})\{solution\}", re.MULTILINE)
IMAGE_FILE = re.compile(r"\.(png|jpe?g|gif|svg|webp)\b", re.IGNORECASE)

pytestmark = pytest.mark.book


def chromium_path() -> str | None:
    return os.environ.get("TINYFORMER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


# Module scope, not session: Playwright's sync API refuses to start while another sync instance runs, and
# tests/test_pdf.py starts its own for the print test after this module.
@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    if executable is None:
        message = "Chromium is not installed (apt-get install chromium); the browser tests cannot run"
        if os.environ.get("CI"):
            pytest.fail(message + " and CI must run them")
        pytest.skip(message)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Visit:
    """One page opened in one theme, and everything the browser saw while loading it."""

    page: Page
    off_site: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    #: every request the load itself finished (until the network was idle and the fonts had loaded), not those
    #: of later clicks or scrolls: a first visit's, as the context's cache starts empty
    loaded: list[Request] = field(default_factory=list)


def open_page(browser: Browser, site: str, path: str, theme: str, width: int = 1280, height: int = 900) -> Visit:
    """Open ``path`` in a fresh browser context whose system colour scheme is ``theme``.

    Requests to anything but the local server are aborted and recorded; so are failed requests, HTTP
    errors, console errors and uncaught exceptions. Returns once the page and its formulas are done.
    A viewport narrower than 600 px is a phone's: touch, and a mobile user agent's layout.
    """
    phone = width < 600
    context = browser.new_context(
        color_scheme=theme, viewport={"width": width, "height": height}, has_touch=phone, is_mobile=phone
    )
    page = context.new_page()
    visit = Visit(page)
    local = urlsplit(site).netloc

    def route(route):
        url = urlsplit(route.request.url)
        if url.scheme in {"data", "blob"} or url.netloc == local:
            route.continue_()
        else:
            visit.off_site.append(route.request.url)
            route.abort()

    context.route("**/*", route)
    page.on("requestfailed", lambda request: visit.failed.append(f"{request.url} ({request.failure})"))
    page.on(
        "response", lambda response: response.status >= 400 and visit.failed.append(f"{response.url} {response.status}")
    )
    page.on("console", lambda message: message.type == "error" and visit.console.append(message.text))
    page.on("pageerror", lambda error: visit.console.append(f"uncaught: {error}"))
    finished: list[Request] = []
    page.on("requestfinished", lambda request: finished.append(request))
    page.goto(site + path, wait_until="networkidle")
    # Formulas arrive typeset; wait for the fonts they use (their widths depend on them).
    page.evaluate(FONTS_READY)
    visit.loaded = list(finished)
    return visit


# This module's tests run page by page (tests/conftest.py, pytest_collection_modifyitems), and ``visits`` keeps
# the last KEEP_OPEN pages open: a page is seen in at most six ways (two themes at 1280 and at 390 px, and at
# 1280 px with the solutions open).
RUN_PAGE_BY_PAGE = True
KEEP_OPEN = 8


@pytest.fixture(scope="module")
def visits(browser, site):
    """A page opened once in each (theme, viewport, solutions open or not) for the checks that only read it.

    ``visits(page, theme, width=1280, height=900, solutions=False)``; with ``solutions`` every solution is
    opened after the load. The least recently used page is closed once more than KEEP_OPEN are open. A check
    that clicks, types, navigates or scrolls a box uses ``fresh`` instead (or puts back what it moved).
    """
    opened: OrderedDict[tuple, Visit] = OrderedDict()

    def visit(page: str, theme: str = "light", width: int = 1280, height: int = 900, solutions: bool = False) -> Visit:
        key = (page, theme, width, height, solutions)
        if key in opened:
            opened.move_to_end(key)
            return opened[key]
        opened[key] = open_page(browser, site, f"{page}.html", theme, width, height)
        if solutions:
            open_solutions(opened[key].page)
        while len(opened) > KEEP_OPEN:
            opened.popitem(last=False)[1].page.context.close()
        return opened[key]

    def discard(page: str, theme: str = "light", width: int = 1280, height: int = 900, solutions: bool = False) -> None:
        """Close that visit, for a check that has moved its page on (the next ``visits`` of it loads it anew)."""
        gone = opened.pop((page, theme, width, height, solutions), None)
        if gone is not None:
            gone.page.context.close()

    visit.discard = discard
    yield visit
    for opened_visit in opened.values():
        opened_visit.page.context.close()


@pytest.fixture
def fresh(browser, site):
    """Opens a page in a new browser context for a test that clicks or types; closed after the test."""
    opened: list[Visit] = []

    def open_fresh(path: str, theme: str = "light", width: int = 1280, height: int = 900) -> Visit:
        opened.append(open_page(browser, site, path, theme, width, height))
        return opened[-1]

    yield open_fresh
    for visit in opened:
        visit.page.context.close()


def test_every_source_page_is_tested(book):
    """The page list above (docs/*.md) is exactly the set of documents Sphinx built."""
    index = (book / "html" / "searchindex.js").read_text()
    built = json.loads(re.search(r'"docnames":(\[[^\]]*\])', index).group(1))
    assert sorted(built) == PAGES
    assert "multi-head-attention" in CHAPTERS


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("page", PAGES + GENERATED)
def test_page_loads_offline_without_errors(visits, page, theme):
    visit = visits(page, theme)
    load_every_image(visit.page)
    # Checked after every image has loaded (a lazy one is asked for only when scrolled to), so that a broken
    # image's request is seen too.
    assert visit.off_site == [], f"{page} asked for something beyond 127.0.0.1"
    assert visit.failed == [], f"{page} had failed requests"
    assert visit.console == [], f"{page} logged console errors"
    assert visit.page.evaluate("document.documentElement.dataset.theme") == theme
    # Without a declared icon the browser asks for /favicon.ico, which fails; the request happens after
    # the load event and is not always seen above, so the declared icon is checked directly.
    icon = visit.page.locator("link[rel~=icon]")
    assert icon.count() == 1, f"{page} declares no icon"
    assert visit.page.context.request.get(icon.evaluate("(link) => link.href")).ok


@pytest.mark.parametrize("page", PAGES + GENERATED)
def test_every_page_shows_the_version_and_build_date(visits, page):
    """The provenance line is visible in the footer: the version and build date a citation needs."""
    provenance = visits(page, "light").page.locator(".tinyformer-provenance")
    assert provenance.count() == 1, f"{page} has no provenance line"
    provenance.scroll_into_view_if_needed()
    assert provenance.is_visible()
    text = provenance.inner_text()
    assert tinyformer.__version__ in text
    assert provenance.get_attribute("data-build-date") in text


@pytest.mark.parametrize("page", PAGES)
def test_every_formula_is_typeset_and_no_raw_tex_remains(visits, page):
    """Each formula arrives typeset by KaTeX at build time: styled (its MathML copy, for screen readers,
    hidden from view), drawn in KaTeX's fonts, with no error and no math script on the page."""
    visit = visits(page, "light")
    formulas = visit.page.locator(".math")
    typeset = visit.page.locator(".math > .katex, .math > .katex-display > .katex")
    errors = visit.page.locator(".katex-error")
    assert formulas.count() == typeset.count(), f"{page}: {formulas.count() - typeset.count()} formulas not typeset"
    assert errors.count() == 0, f"{page}: TeX errors: {errors.all_inner_texts()}"
    styled = visit.page.evaluate(
        """() => [...document.querySelectorAll(".katex-mathml")].every((e) => getComputedStyle(e).position === "absolute"
            && e.getBoundingClientRect().width <= 1)"""
    )
    assert styled, f"{page}: KaTeX's stylesheet is not applied (the MathML copy of a formula shows)"
    if formulas.count():
        assert visit.page.evaluate(
            "() => document.fonts.check('16px KaTeX_Main') && document.fonts.check('16px KaTeX_Math')"
        )
    scripts = visit.page.evaluate(
        "() => [...document.scripts].map((s) => s.src).filter((src) => /katex|mathjax/i.test(src))"
    )
    assert scripts == [], f"{page}: loads a math script: {scripts}"
    # The reader-visible text, less code (where $ and backslashes are legitimate) and typeset math.
    prose = visit.page.evaluate(
        """() => {
            const main = document.querySelector("main").cloneNode(true);
            main.querySelectorAll("pre, code, .katex, script, style").forEach((e) => e.remove());
            return main.textContent;
        }"""
    )
    assert not RAW_MATH.findall(prose), f"{page}: raw TeX in the text: {RAW_MATH.findall(prose)}"


def test_the_chapter_has_formulas(visits):
    """Guards the test above against passing vacuously: the chapter's formulas are found and typeset."""
    assert visits("positional-encoding", "light").page.locator(".math .katex-html").count() >= 50


def luminance(rgb: tuple[int, int, int]) -> float:
    """WCAG relative luminance of an sRGB colour."""
    channels = [c / 255 for c in rgb]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("page", PAGES)
def test_images_have_alt_text_and_figures_are_opaque_and_readable(visits, page, theme):
    """Every image has alt text; every figure is an opaque PNG that shows on a light ground with dark ink.

    Readable means: as rendered in this theme, the figure's most common colour (its background) is light
    and the darkest ink on it has a WCAG contrast ratio of at least 4.5 against it.
    """
    visit = visits(page, theme)
    images = visit.page.locator("img")
    for i in range(images.count()):
        image = images.nth(i)
        source, alt = image.get_attribute("src"), (image.get_attribute("alt") or "").strip()
        # docutils writes the file name as alt when an image has none: that is no description either.
        assert len(alt.split()) >= 2, f"{page}: image {source} has no alt text that describes it: {alt!r}"
        assert not IMAGE_FILE.search(alt), f"{page}: image {source} has a file name as alt text: {alt!r}"
    figures = visit.page.locator("main figure img, main .cell_output img")
    for i in range(figures.count()):
        figure = figures.nth(i)
        source = visit.page.context.request.get(figure.evaluate("(img) => img.src"))
        stored = Image.open(io.BytesIO(source.body()))
        if stored.mode in {"RGBA", "LA", "PA"} or "transparency" in stored.info:
            alpha_low, _ = stored.convert("RGBA").getchannel("A").getextrema()
            assert alpha_low == 255, f"{page}: figure {figure.get_attribute('src')} has transparent pixels"
        figure.scroll_into_view_if_needed()
        # a lazy image scrolled into view loads and decodes after the scroll: wait for it, or the shot
        # shows the page's own ground (seen once under load in CI, a dark-theme figure read as dark)
        figure.evaluate(
            "async (img) => { if (!img.complete) await new Promise((done) => img.addEventListener('load', done, "
            "{once: true})); await img.decode(); }"
        )
        # decoded is not yet painted: on a loaded machine (CI under load, twice) the first shot of a dark page
        # showed its own ground where the figure was to be. Two frames are let pass, and a dark shot is taken
        # again, up to five times, half a second apart: a figure that is dark stays dark.
        for _ in range(5):
            figure.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
            shown = Image.open(io.BytesIO(figure.screenshot())).convert("RGB")
            _, background = max(shown.getcolors(shown.width * shown.height))
            if luminance(background) > 0.5:
                break
            visit.page.wait_for_timeout(500)
        darkest = min(luminance(colour) for _, colour in shown.getcolors(shown.width * shown.height))
        ground = luminance(background)
        assert ground > 0.5, f"{page} ({theme}): figure {figure.get_attribute('src')} shows on a dark ground"
        assert (ground + 0.05) / (darkest + 0.05) >= 4.5, f"{page} ({theme}): figure ink too faint"
    if page == "positional-encoding":
        assert figures.count() >= 5


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_download_menu_gives_the_source_and_the_executed_notebook(fresh, chapter, book):
    """The page's download menu offers the chapter's source (.md, its bytes) and its executed notebook (.ipynb);
    each downloads under its own name. The notebook has the page's outputs, a setup cell that installs
    tinyformer, and no glue markup: glued values as text, glued figures as attachments."""
    visit = fresh(f"{chapter}.html")
    page = visit.page
    toggle = page.get_by_role("button", name="Download this page")
    menu = page.locator(".dropdown-download-buttons .dropdown-menu")
    for suffix in (".md", ".ipynb"):
        link = menu.locator(f'a[href$="{suffix}"]')
        # From a known state, whatever the last download left (the menu open, or closing): closed, then
        # opened, each waited for rather than sampled once (a sample during the closing saw it "visible"), up to
        # playwright's timeout however long the opening takes.
        if menu.is_visible():
            page.keyboard.press("Escape")
        expect(menu).to_be_hidden()
        toggle.click()
        expect(link).to_be_visible()
        assert link.get_attribute("download") == f"{chapter}{suffix}"
        assert link.get_attribute("target") is None
        with page.expect_download() as download:
            link.click()
        assert download.value.suggested_filename == f"{chapter}{suffix}"

    source = page.context.request.get(menu.locator('a[href$=".md"]').evaluate("(a) => a.href"))
    assert source.ok
    assert source.body() == (DOCS / f"{chapter}.md").read_bytes()

    downloaded = page.context.request.get(menu.locator('a[href$=".ipynb"]').evaluate("(a) => a.href"))
    assert downloaded.ok
    notebook = nbformat.reads(downloaded.text(), as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert any(output.output_type in {"execute_result", "stream", "display_data"} for output in outputs)
    executed = nbformat.read(book / "jupyter_execute" / f"{chapter}.ipynb", as_version=4)
    # outputs as executed, except in the cells the page removes (glue records; the text has the values)
    kept = [[] if "remove-cell" in c.metadata.get("tags", []) else c.get("outputs") for c in executed.cells]
    # one cell more than the page: the setup cell after the first markdown cell, which installs tinyformer
    setup = [i for i, c in enumerate(notebook.cells) if "tinyformer-setup" in c.metadata.get("tags", [])]
    first = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown")
    assert setup == [first + 1]
    assert [c.get("outputs") for i, c in enumerate(notebook.cells) if i not in setup] == kept

    markdown = [cell for cell in notebook.cells if cell.cell_type == "markdown"]
    assert not [cell.source for cell in markdown if "{glue" in cell.source]
    figures = len(re.findall(r"\{glue:figure\}", (DOCS / f"{chapter}.md").read_text()))
    attached = [
        name for cell in markdown for name, bundle in cell.get("attachments", {}).items() if "image/png" in bundle
    ]
    assert len(attached) == figures
    for cell in markdown:
        for name in cell.get("attachments", {}):
            assert f"(attachment:{name})" in cell.source
    assert visit.failed == []


def page_title(page: str) -> str:
    """The first heading of a page's source, as plain words (no role names, backticks or markup)."""
    title = re.search(r"^# (.+)$", (DOCS / f"{page}.md").read_text(), re.MULTILINE).group(1)
    return " ".join(re.sub(r"\{[^}]*\}|[`*_$]", " ", title).split())


def solution_count(page: str) -> int:
    """The number of ``solution`` directives in a page's source, colon or backtick fenced."""
    return len(SOLUTION.findall((DOCS / f"{page}.md").read_text()))


def test_search_box_finds_every_chapter_offline(fresh):
    """Type a chapter's title into the index page's search box, press Enter: the chapter is among the results.
    Each chapter from the index page again (back from the last results, in one browser)."""
    visit = fresh("index.html")
    page = visit.page
    index = page.url
    missed = []
    for chapter in CHAPTERS:
        if page.url != index:
            page.go_back(wait_until="networkidle")
            assert page.url == index
        title = page_title(chapter)
        page.locator("button.search-button__button:visible").first.click()
        box = page.locator("#pst-search-dialog input[name=q]")
        box.fill(title)
        box.press("Enter")
        page.wait_for_url(lambda url, title=title: parse_qs(urlsplit(url).query).get("q") == [title])
        results = page.locator("#search-results ul.search li a")
        results.first.wait_for(timeout=30_000)
        # every result listed and its snippet fetched (leaving earlier would abort those requests)
        page.wait_for_function(f"() => {SEARCH_FINISHED}")
        page.wait_for_load_state("networkidle")
        hrefs = [urlsplit(href).path for href in results.evaluate_all("(links) => links.map((a) => a.href)")]
        if f"/{quote(chapter)}.html" not in hrefs:
            missed.append(f"searching {title!r} gave {hrefs}")
    assert not missed, "\n".join(missed)
    assert (visit.off_site, visit.failed, visit.console) == ([], [], [])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solutions_are_hidden_named_and_opened_by_their_button_or_the_exercise_link(fresh, chapter):
    """Every solution is hidden on arrival. A screen reader hears its button as "Show the solution to Exercise
    6.7", not sphinx-togglebutton's "Toggle hidden content" nineteen times. The exercise's link in the first
    solution's bar opens it; a click on each other's button shows it; an open one's button says "Hide ..."."""
    visit = fresh(f"{chapter}.html")
    page = visit.page
    solutions = page.locator("div.solution")
    expected = solution_count(chapter)
    assert solutions.count() == expected
    buttons = page.locator("div.solution button.toggle-button")
    names = [button.get_attribute("aria-label") for button in buttons.all()]
    # a titled exercise keeps its title: "Show the solution to Exercise 1.7 (A causal mask)"
    said = [re.fullmatch(r"Show the solution to Exercise (\d+\.\d+)(?: \(.+\))?", name) for name in names]
    assert all(said), names
    assert len({match[1] for match in said}) == len(names) == expected, f"{chapter}: two buttons share a name: {names}"
    for i in range(expected):
        assert solutions.nth(i).locator("section").is_hidden(), (
            f"{chapter}: solution {i + 1} is shown before it is clicked"
        )
    for i in range(expected):
        solution = solutions.nth(i)
        body = solution.locator("section")
        if i == 0:
            solution.locator(".admonition-title a").first.click()
        else:
            solution.locator("button.toggle-button").click()
        expect(body).to_be_visible()
        assert body.inner_text().strip()
        expect(solution.locator("button.toggle-button")).to_have_attribute(
            "aria-label", re.compile(r"^Hide the solution to Exercise ")
        )
    assert visit.console == [], visit.console


@pytest.mark.parametrize("chapter", CHAPTERS[:1])
def test_the_skip_link_lands_on_the_text(fresh, chapter):
    """The first Tab stop, "Skip to the text", moves the focus past the header's toolbar to the article: the
    next Tab reaches a link or button inside the text, not the theme's buttons."""
    page = fresh(f"{chapter}.html").page
    page.keyboard.press("Tab")
    focused = page.evaluate(
        "() => [document.activeElement.closest('.skip-link') !== null, document.activeElement.textContent.trim()]"
    )
    assert focused == [True, "Skip to the text"], focused
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.matches('main article.bd-article')")
    page.keyboard.press("Tab")
    inside = page.evaluate("() => document.activeElement.closest('main article.bd-article') !== null")
    assert inside, "the Tab after the skip link left the text"


@pytest.mark.parametrize("theme", THEMES)
def test_a_wide_tables_caption_is_read_at_phone_width(fresh, theme):
    """At 390 px a table wider than the column scrolls in its box, and its caption stays outside the box, at
    the column's width: Table 7.1 (chapter 7's results), screenshot in build/screenshots."""
    page = fresh("long-context.html", theme, width=390, height=844).page
    table = page.locator("table#tab-long-context-1")
    box = table.locator("xpath=..")
    assert box.evaluate("(b) => b.scrollWidth > b.clientWidth + 1"), "Table 7.1 fits a phone: the test tests nothing"
    caption = page.locator("#tab-long-context-1-caption")
    assert caption.inner_text().startswith("Table 7.1")
    assert table.get_attribute("aria-labelledby") == "tab-long-context-1-caption"
    assert caption.evaluate("(c) => c.closest('.pst-scrollable-table-container') === null")
    column = page.evaluate("() => document.querySelector('main article.bd-article').getBoundingClientRect().right")
    assert caption.evaluate("(c) => c.getBoundingClientRect().right") <= column + 1
    assert caption.evaluate("(c) => c.scrollWidth <= c.clientWidth")
    caption.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"table-7.1-caption-390-{theme}.png")


def test_no_caption_is_left_inside_a_box_that_scrolls(book):
    """Every numbered table's caption of every page is outside its scrolling box, and names its table."""
    moved = 0
    for name in PAGES:
        html = (book / "html" / f"{name}.html").read_text()
        for box in re.findall(r'<div class="pst-scrollable-table-container">.*?</table>', html, re.DOTALL):
            assert "<caption" not in box, f"{name}: a caption scrolls with its table"
        for table_id, label in re.findall(r'<table aria-labelledby="([^"]+)-caption"[^>]*\bid="([^"]+)"', html):
            assert table_id == label
            assert f'<p class="tinyformer-table-caption" id="{label}-caption">' in html
            moved += 1
    assert moved >= 10, f"only {moved} captions were found: the test reads the wrong markup"


def test_the_chapter_has_solutions():
    """Guards the test above against passing vacuously."""
    assert solution_count("multi-head-attention") == 8  # six read-and-reveal exercises, two coding ones


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("page", PAGES + GENERATED)
def test_no_serious_or_critical_accessibility_violation(visits, page, theme):
    """axe-core on the whole page, in each theme. axe skips hidden content, so a chapter's solutions are opened
    first: one scan sees the page as it loads and every solution (a scan of the solutions alone on top of the
    closed page's took 7 s a chapter)."""
    solutions = page in PAGES and solution_count(page) > 0
    visit = visits(page, theme, solutions=solutions)
    if solutions:
        assert_solutions_open(visit.page, page)
    assert not (report := blocking_violations(visit.page)), f"{page} ({theme}):\n{report}"


def blocking_violations(page: Page, context: str | None = None) -> str:
    """axe-core's serious and critical violations on ``page`` (the copy in axe-playwright-python), one a line;
    ``context``, a CSS selector, limits the scan to the elements it matches."""
    results = Axe().run(page, context=context)
    return "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']} -- {[n['target'] for n in v['nodes']][:5]}"
        for v in results.response["violations"]
        if v["impact"] in BLOCKING_IMPACTS
    )


def open_solutions(page: Page) -> None:
    """Open every solution dropdown and wait until each has finished fading in."""
    toggles = page.locator("div.solution button.toggle-button").all()
    for toggle in toggles:
        toggle.click()
    if toggles:
        page.locator("div.solution section").last.wait_for(state="visible")
    # The solutions fade in (a 0.3 s CSS transition): measured mid-fade, text has too little contrast.
    page.wait_for_function("document.getAnimations().every((a) => a.playState !== 'running')")


def assert_solutions_open(page: Page, chapter: str) -> None:
    """Every solution of the page is shown: a check of the solutions' contents is not run on closed ones."""
    # a closed solution's section keeps display: block, its contents hidden: it has no height
    shown = page.locator("div.solution section").evaluate_all(
        "(bodies) => bodies.map((b) => b.getBoundingClientRect().height > 0)"
    )
    assert shown, f"{chapter}: no solution found"
    assert all(shown), f"{chapter}: solutions shown {shown}"
    assert page.locator("div.solution.toggle-hidden").count() == 0, f"{chapter}: a solution is still closed"


def test_theme_switch_changes_the_theme(fresh):
    """The reader can override the system setting with the colour-mode menu, and the choice is applied."""
    visit = fresh("index.html", "light")
    page = visit.page
    page.locator(".theme-switch-button:visible").first.click()
    page.locator(".theme-change-button[data-mode=dark]:visible").first.click()
    # waited for, not sampled once after the click
    page.wait_for_function("document.documentElement.dataset.theme === 'dark'", timeout=10_000)
    assert visit.console == []


# -- The site in use (issue 12): menus, widths, figures, dark loading, search, downloads, weight ------

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
MENU_SHOTS = SCREENSHOTS / "menus"
# A chapter page's first visit (every request until the network is idle and the fonts have loaded)
# transfers at most PAGE_BUDGET bytes, uncompressed (issue 12: 1.5 MiB). With MathJax 3 loaded in the
# browser the pages weighed 1.67-1.75 MiB; with the formulas typeset at build time (KaTeX) 1.05-1.23.
PAGE_BUDGET = int(1.5 * 2**20)
# Words of the theme's buttons that must never appear in a search snippet.
THEME_CHROME = ("System Settings", "Download this page", "Toggle primary sidebar", "Print to PDF", "Ctrl+K")


def load_every_image(page: Page) -> None:
    """Load and decode every image of ``page``, the lazy ones (asked for only when scrolled to) included."""
    page.evaluate(
        """async () => {
            for (const img of document.querySelectorAll("img[loading=lazy]")) img.loading = "eager";
            await Promise.all([...document.images].map((img) => img.decode().catch(() => null)));
        }"""
    )


def shoot(page: Page, path: Path, *, full_page: bool = True) -> None:
    """A screenshot, of the whole page after every image has loaded where ``full_page``; JPEG (quality 85) where
    ``path`` ends in ``.jpg``, PNG otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if full_page:
        load_every_image(page)
    page.screenshot(path=path, full_page=full_page, quality=85 if path.suffix == ".jpg" else None)


def settle(page: Page) -> None:
    """Wait until every CSS animation and transition (a drawer sliding in) has finished."""
    page.wait_for_function("() => document.getAnimations().every((a) => a.playState !== 'running')")


def on_screen(locator, what: str) -> None:
    """``locator``'s box lies within the phone's screen, wide enough to read."""
    box = locator.bounding_box()
    assert box is not None, f"{what} is not shown"
    inside = box["x"] >= -1 and box["x"] + box["width"] <= PHONE["width"] + 1
    assert inside, f"{what} is not on the screen: {box}"
    assert box["width"] >= 200, f"{what} is too narrow to read: {box}"


# Every chapter's menus in the light theme, and one chapter's in the dark: the menus are the theme's template
# and their colours alone change with the theme (a fresh page at 390 px is 3-4 s).
@pytest.mark.parametrize(("chapter", "theme"), [(chapter, "light") for chapter in CHAPTERS] + [(CHAPTERS[0], "dark")])
def test_phone_menus_open_when_tapped(fresh, chapter, theme):
    """At 390x844 tapping the menu button shows the chapter list; tapping the contents button, the sections.

    pydata-sphinx-theme issue 2451 / sphinx-book-theme issue 988: a second copy of each toggle in the
    navbar took the click handlers, and tapping showed a tooltip and nothing else.
    """
    visit = fresh(f"{chapter}.html", theme, **PHONE)
    page = visit.page
    # The theme moves the sidebar into a <dialog> (#pst-primary-sidebar-modal) when it opens.
    chapters = page.locator("nav.bd-docs-nav a.reference")
    assert chapters.count() >= len(CHAPTERS)
    assert not chapters.first.is_visible(), "the chapter list shows before the menu is tapped"
    page.locator(".primary-toggle:visible").first.tap()
    for i in range(chapters.count()):
        chapters.nth(i).wait_for(state="visible", timeout=5_000)
    settle(page)
    on_screen(page.locator("nav.bd-docs-nav"), "the chapter list")
    shoot(page, MENU_SHOTS / theme / f"{chapter}-chapters-390.png", full_page=False)
    page.keyboard.press("Escape")
    chapters.first.wait_for(state="hidden", timeout=5_000)

    sections = page.locator("nav#pst-page-toc-nav a.nav-link")
    headings = page.locator("main article section > h2")
    assert headings.count() >= 2
    assert sections.count() >= headings.count()
    assert not sections.first.is_visible()
    page.locator(".secondary-toggle:visible").first.tap()
    sections.first.wait_for(state="visible", timeout=5_000)
    settle(page)
    on_screen(page.locator("nav#pst-page-toc-nav"), "the page contents")
    shown = sections.evaluate_all(
        "(links) => links.filter((a) => a.checkVisibility()).map((a) => a.getAttribute('href'))"
    )
    for section_id in headings.evaluate_all("(hs) => hs.map((h) => h.parentElement.id)"):
        assert f"#{section_id}" in shown, f"section {section_id} is not in the contents menu"
    shoot(page, MENU_SHOTS / theme / f"{chapter}-contents-390.png", full_page=False)
    assert (visit.off_site, visit.failed, visit.console) == ([], [], [])


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_desktop_menus_are_on_screen(visits, chapter, theme):
    """At 1280 px both menus are on screen."""
    page = visits(chapter, theme, **DESKTOP).page
    assert page.locator("nav.bd-docs-nav a.reference").first.is_visible()
    assert page.locator("nav#pst-page-toc-nav a.nav-link").first.is_visible()


@pytest.mark.screenshots
@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("page", PAGES + GENERATED)
def test_screenshots_for_a_reader_to_look_at(visits, page, theme):
    """Full-page screenshots of every page at 1280 px, and of every chapter at 390 px, in both themes:
    build/screenshots/{light,dark}/ and build/screenshots/390/{light,dark}/ (``nox -s screenshots``; a chapter
    is up to 35,000 px tall, about 2 s a shot, so ``nox -s tests`` takes only the phone menus'). Each shot is
    as wide as its viewport, at least a screen tall, and not one flat colour."""
    shots = [(SCREENSHOTS / theme / f"{page}.jpg", visits(page, theme), DESKTOP)]
    if page in CHAPTERS:
        shots.append((SCREENSHOTS / "390" / theme / f"{page}.jpg", visits(page, theme, **PHONE), PHONE))
    for path, visit, viewport in shots:
        shoot(visit.page, path)
        with Image.open(path) as shot:
            assert shot.width == viewport["width"], f"{path}: {shot.size}"
            assert shot.height >= viewport["height"], f"{path}: {shot.size}"
            lowest, highest = zip(*ImageStat.Stat(shot.convert("L")).extrema, strict=True)
            assert highest[0] - lowest[0] > 64, f"{path} is one flat colour"


def test_one_search_box_and_one_viewport_tag(fresh):
    """The desktop header shows one search field (the theme's navbar added a second) and the page one viewport tag."""
    page = fresh("multi-head-attention.html").page
    assert page.locator(".search-button-field:visible").count() == 1
    assert page.locator(".primary-toggle").count() == 1
    assert page.locator(".secondary-toggle").count() == 1
    assert page.locator("meta[name=viewport]").count() == 1


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
@pytest.mark.parametrize("page_name", PAGES + GENERATED)
def test_no_page_is_wider_than_the_viewport(visits, page_name, viewport):
    """The page is no wider than the screen. A phone browser zooms out to show a wider page whole (its
    window.innerWidth grows with the page), so the page's width is compared with the screen's."""
    page = visits(page_name, "light", **viewport).page
    width = viewport["width"]
    over = page.evaluate("() => document.documentElement.scrollWidth") - width
    culprits = page.evaluate(
        """(width) => [...document.querySelectorAll("main *")]
            .filter((e) => e.getBoundingClientRect().right > width + 1)
            .filter((e) => !e.parentElement.closest("pre, .katex, .pst-scrollable-table-container, .math"))
            .slice(0, 8).map((e) => `${e.tagName.toLowerCase()}.${e.className} ${e.textContent.slice(0, 40)}`)""",
        width,
    )
    assert over <= 0, f"{page_name} at {width} px is {over} px wider than the screen: {culprits}"
    assert page.evaluate("() => window.innerWidth") == width


# What must fit its column at 1280 px, per chapter: [what, px too wide]. Display equations compare the
# width of the typeset formula (the sum of KaTeX's unbreakable pieces) with the width of the box it is
# drawn in; code cell inputs their text's width with the block's.
FIT_SCRIPT = """() => {
    const out = [];
    const label = (box) => (box.querySelector(".eqno")?.textContent.replace("#", "").trim() || "(unnumbered)")
        + " " + (box.querySelector("annotation")?.textContent.replace(/\\s+/g, " ").trim().slice(0, 50) || "");
    for (const box of document.querySelectorAll("main div.math")) {
        const formula = box.querySelector(".katex-display > .katex > .katex-html");
        if (!formula) continue;
        const width = [...formula.children].reduce((sum, piece) => sum + piece.getBoundingClientRect().width, 0);
        const over = Math.ceil(width - formula.clientWidth);
        if (over > 0) out.push(["equation " + label(box), over]);
    }
    for (const pre of document.querySelectorAll("main .cell_input pre, main div.highlight pre")) {
        if (pre.closest(".cell_output")) continue;
        const over = pre.scrollWidth - pre.clientWidth;
        if (over > 0) out.push(["code " + pre.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a)).slice(0, 60), over]);
    }
    return out;
}"""
SCROLL_SCRIPT = """() => {
    const out = [];
    const column = document.querySelector("main article.bd-article").getBoundingClientRect();
    const scrolls = (e) => ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
    // Inside the column, or inside a box that fits the column and scrolls.
    const contained = (e) => {
        for (let a = e; a && a.tagName !== "ARTICLE"; a = a.parentElement) {
            const r = a.getBoundingClientRect();
            if (r.right <= column.right + 1) return a === e || scrolls(a);
        }
        return false;
    };
    const items = document.querySelectorAll(
        "main .cell_output pre, main .cell_output .output, main .cell_output img, main table, main div.math, main div.highlight pre");
    for (const e of items) {
        const r = e.getBoundingClientRect();
        if (r.width === 0) continue;
        const name = `${e.tagName.toLowerCase()}.${e.className}`.slice(0, 60);
        if (!contained(e)) { out.push([`${name} reaches past the column and does not scroll`, Math.ceil(r.right - column.right)]); continue; }
        const clip = e.scrollWidth - e.clientWidth;
        if (clip > 1 && !scrolls(e) && !["IMG", "TABLE"].includes(e.tagName))
            out.push([`${name} clips its content without a scroll bar`, clip]);
    }
    return out;
}"""


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_equations_and_code_fit_the_column_at_desktop_width(visits, chapter):
    """At 1280 px every display equation and every code cell's input fits the text column: no sideways scroll.

    The solutions are opened first (closed, their code has no width to measure). 76 characters of code
    fit the column and 68 a solution box: the chapters' cells are written to that width, and the library
    and the reference solutions they include are formatted to it (src/ruff.toml,
    tests/exercise_solutions/ruff.toml).
    """
    page = visits(chapter, "light", **DESKTOP, solutions=True).page
    assert_solutions_open(page, chapter)
    too_wide = page.evaluate(FIT_SCRIPT)
    assert too_wide == [], f"{chapter}: {len(too_wide)} wider than the column (px): {too_wide}"


# Each numbered display equation at the page's width: [label, what is wrong].
EQUATION_SCRIPT = """() => {
    const out = [];
    for (const box of document.querySelectorAll("main div.math")) {
        const formula = box.querySelector(".katex-display > .katex > .katex-html");
        const number = box.querySelector(".eqno");
        if (!formula || !number) continue;
        const label = number.textContent.replace("#", "").trim();
        // The formula's pieces (scrolled-off ones included) and the number's text, as drawn.
        const pieces = [...formula.children].map((piece) => piece.getBoundingClientRect());
        const text = document.createRange();
        text.selectNodeContents(number.firstChild);
        const n = text.getBoundingClientRect(), f = formula.getBoundingClientRect();
        if (pieces[0].left < f.left - 1) out.push([label, `its start is ${Math.round(f.left - pieces[0].left)} px out of view`]);
        if (window.innerWidth < 540 && n.top < f.bottom - 1) out.push([label, "the number is not under the formula"]);
        if (pieces.some((p) => n.left < p.right && n.right > p.left && n.top < p.bottom && n.bottom > p.top))
            out.push([label, "the number is drawn over the formula"]);
    }
    return out;
}"""


# Inline formulas whose touching punctuation ended up on another line: [punctuation, formula's TeX].
PUNCTUATION_SCRIPT = """() => {
    const out = [];
    const main = document.querySelector("main");
    const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
    const line = (rect, other) => rect.top < other.bottom && other.top < rect.bottom;
    let previous = null;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const math = node.parentElement.closest("span.math");
        if (math) { previous = math; continue; }
        const text = node.textContent;
        if (previous && /^[,.;:!?)]/.test(text)) {
            const range = document.createRange();
            range.setStart(node, 0);
            range.setEnd(node, 1);
            const formula = previous.querySelector(".katex-html") || previous;
            if (!line(range.getBoundingClientRect(), formula.getBoundingClientRect()))
                out.push([text[0], previous.querySelector("annotation")?.textContent]);
        }
        previous = null;
    }
    return out;
}"""


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_punctuation_stays_on_the_line_of_its_formula(visits, chapter):
    """On a phone no line starts with the comma or full stop that follows an inline formula."""
    page = visits(chapter, "light", **PHONE).page
    assert page.locator("main span.math").count() > 0
    broken = page.evaluate(PUNCTUATION_SCRIPT)
    assert broken == [], f"{chapter} at 390 px: punctuation wrapped away from its formula: {broken}"


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_equation_numbers_leave_the_formula_whole(visits, chapter, viewport):
    """A numbered formula shows from its start and its number never covers it; on a phone the number
    goes under the formula, which then has the column's whole width."""
    page = visits(chapter, "light", **viewport).page
    assert page.locator("main div.math .eqno").count() > 0
    problems = page.evaluate(EQUATION_SCRIPT)
    assert problems == [], f"{chapter} at {viewport['width']} px: {problems}"


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
@pytest.mark.parametrize("page_name", PAGES)
def test_outputs_and_tables_fit_or_scroll(visits, page_name, viewport):
    """Outputs, tables and equations stay inside the column; what is wider scrolls inside itself."""
    page = visits(page_name, "light", **viewport).page
    problems = page.evaluate(SCROLL_SCRIPT)
    assert problems == [], f"{page_name} at {viewport['width']} px: {problems}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_figures_are_sharp_readable_and_open_full_size(visits, chapter):
    """Each figure is drawn at twice its size on the page, its text is at least the page's small print at
    1280 px, and it links to the full-size image."""
    matplotlibrc = dict(
        line.split(":", 1) for line in (ROOT / "conf" / "matplotlibrc").read_text().splitlines() if ":" in line
    )
    font_pt = float(matplotlibrc["font.size"].split("#")[0])
    page = visits(chapter, "light", **DESKTOP).page
    # The theme's small print: the size of a <small> in the article.
    small_print = page.evaluate(
        """() => {
            const small = document.querySelector("main article").appendChild(document.createElement("small"));
            const size = parseFloat(getComputedStyle(small).fontSize);
            small.remove();
            return size;
        }"""
    )
    figures = page.locator("main figure img, main .cell_output img")
    assert figures.count() >= 1
    problems = []
    for i in range(figures.count()):
        figure = figures.nth(i)
        figure.scroll_into_view_if_needed()
        figure.evaluate("(img) => img.decode()")
        natural, shown = figure.evaluate("(img) => [img.naturalWidth, img.getBoundingClientRect().width]")
        stored = Image.open(io.BytesIO(page.context.request.get(figure.evaluate("(img) => img.src")).body()))
        dpi = round(stored.info.get("dpi", (72, 72))[0])
        name = figure.get_attribute("src").rsplit("/", 1)[-1][:12]
        if natural < 2 * shown - 1:
            problems.append(f"{name}: {natural} px drawn for {shown:.0f} px shown (not sharp)")
        text_px = font_pt / 72 * dpi * shown / natural
        if text_px < small_print - 0.5:
            problems.append(f"{name}: text {text_px:.1f} px < small print {small_print:.1f} px")
        link = figure.locator("xpath=ancestor::a[1]")
        if link.count() == 0 or not (link.get_attribute("href") or "").endswith(figure.get_attribute("src")[-20:]):
            problems.append(f"{name}: no link to the full-size image")
    assert problems == [], f"{chapter}: {problems}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_dark_system_setting_paints_no_light_frame(browser, site, chapter):
    """With a dark system setting and the default "auto" mode, no frame painted while loading is light.

    Every frame the browser paints is captured by Chromium's screencast (DevTools protocol), from a dark
    blank page through the chapter's load; each frame's median luminance must stay dark.
    """
    context = browser.new_context(color_scheme="dark", viewport=DESKTOP)
    page = context.new_page()
    try:
        page.set_content("<html style='background:#000'><body></body></html>")
        cdp = context.new_cdp_session(page)
        frames: list[bytes] = []

        def on_frame(event):
            frames.append(base64.b64decode(event["data"]))
            cdp.send("Page.screencastFrameAck", {"sessionId": event["sessionId"]})

        cdp.on("Page.screencastFrame", on_frame)
        cdp.send("Page.startScreencast", {"format": "png", "everyNthFrame": 1, "maxWidth": 320, "maxHeight": 240})
        page.goto(site + f"{chapter}.html", wait_until="networkidle")
        page.evaluate(FONTS_READY)
        page.wait_for_timeout(300)
        cdp.send("Page.stopScreencast")
    finally:
        context.close()
    medians = [ImageStat.Stat(Image.open(io.BytesIO(frame)).convert("L")).median[0] for frame in frames]
    assert len(frames) >= 2, "the screencast caught no frames of the page"
    assert max(medians) < 128, f"{chapter}: light frames while loading, median grey per frame: {medians}"


def search_results(page: Page, site: str, query: str) -> tuple[list[str], list[str], list[str]]:
    """Run a query on the search page: (result paths, result kinds, snippets), best first."""
    page.goto(site + f"search.html?q={quote(query)}", wait_until="networkidle")
    page.wait_for_function(f"() => {SEARCH_FINISHED}")
    page.wait_for_load_state("networkidle")  # the snippets: each result's page is fetched after it is listed
    items = page.locator("#search-results ul.search > li")
    paths = items.evaluate_all("(lis) => lis.map((li) => new URL(li.querySelector('a').href).pathname)")
    kinds = items.evaluate_all("(lis) => lis.map((li) => [...li.classList].find((c) => c.startsWith('kind-')))")
    snippets = page.locator("#search-results p.context").all_inner_texts()
    return paths, kinds, snippets


@pytest.mark.parametrize("query", ["head", "attention", "positional encoding", "softmax"])
def test_search_ranks_chapters_first_with_clean_snippets(fresh, site, query):
    """Search: chapters above API entries, each page once, snippets without raw TeX or the theme's buttons."""
    visit = fresh("index.html")
    paths, kinds, snippets = search_results(visit.page, site, query)
    assert paths, f"no results for {query!r}"
    assert snippets, f"no snippets for {query!r}"
    for snippet in snippets:
        assert not RAW_MATH.search(snippet.replace("$", "")), f"raw TeX in a snippet for {query!r}: {snippet!r}"
        assert not [words for words in THEME_CHROME if words in snippet], f"theme chrome in {snippet!r}"
    pages = [path for path, kind in zip(paths, kinds, strict=True) if kind != "kind-object"]
    assert len(pages) == len(set(pages)) or all(kind == "kind-title" for kind in kinds[: len(pages)]), (
        f"a page appears twice for {query!r}: {list(zip(paths, kinds, strict=True))}"
    )
    assert sum(path.endswith("/glossary.html") for path in paths) <= 1
    chapter_ranks = [i for i, path in enumerate(paths) if path.strip("/").removesuffix(".html") in CHAPTERS]
    api_ranks = [i for i, kind in enumerate(kinds) if kind == "kind-object"]
    if chapter_ranks and api_ranks:
        assert max(chapter_ranks) < min(api_ranks), f"an API entry above a chapter for {query!r}: {paths}"
    assert visit.console == []


def test_search_snippets_write_a_formula_once_as_its_tex(fresh, site):
    """A formula in a snippet is its TeX source, once: not KaTeX's typeset glyphs and MathML copy as well
    (U+200B is the zero-width space of KaTeX's layout boxes, U+22A4 the typeset transpose)."""
    visit = fresh("index.html")
    _, _, snippets = search_results(visit.page, site, "scaled")
    tex = [snippet for snippet in snippets if "\\sqrt{d_k}" in snippet]
    assert tex, f"no snippet shows the formula softmax(QK^T / sqrt(d_k)) V as TeX: {snippets}"
    for snippet in snippets:
        assert not {"\u200b", "\u22a4"} & set(snippet), f"typeset math in a snippet: {snippet!r}"
    assert visit.console == []


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_page_weight_is_within_budget(visits, chapter):
    """The bytes a first visit (empty cache) to a chapter transfers, its formulas' fonts included: the requests
    the page's load finished (``Visit.loaded``), not the lazy images a later scroll asks for."""
    visit = visits(chapter, "light")
    typeset = visit.page.locator(".math .katex").count()
    assert typeset == visit.page.locator(".math").count() > 0
    sizes = {}
    for request in visit.loaded:
        measured = request.sizes()
        sizes[request.url] = measured["responseBodySize"] + measured["responseHeadersSize"]
    # The formulas' fonts are part of the visit (a page whose fonts failed to load would weigh less).
    assert any("/katex/fonts/" in url for url in sizes), sorted(sizes)
    total = sum(sizes.values())
    heaviest = [(urlsplit(url).path, size) for url, size in sorted(sizes.items(), key=lambda item: -item[1])[:8]]
    assert total <= PAGE_BUDGET, f"{chapter}: {total / 2**20:.2f} MiB in {len(sizes)} requests; heaviest {heaviest}"


def test_site_has_precompressed_copies(book):
    """Every sizeable text file has a gzip copy beside it that decompresses to the same bytes."""
    html = book / "html"
    for name in ["multi-head-attention.html", "searchindex.js", "_static/styles/pydata-sphinx-theme.css"]:
        original = html / name
        assert gzip.decompress((html / f"{name}.gz").read_bytes()) == original.read_bytes()


def test_bibliography_is_author_year(fresh):
    """The bibliography labels its entries as the text cites them: "Vaswani et al., 2017", not [1]."""
    page = fresh("bibliography.html").page
    labels = page.locator("main .citation .label, main dt.label").all_inner_texts()
    assert labels, "no bibliography entries"
    for label in labels:
        # an author's name, or the handle a post was published under ("bloc97"), then the year
        assert re.fullmatch(r"\[?[A-Za-z][^\]]*, (19|20)\d\d[a-z]?\]?", label.strip()), label


# ==== Screens (issue 22): figures on a phone, scrolling boxes, the solution bar, printing, search, focus ====
FIGURE_DESCRIPTION = re.compile(r"tinyformer figure; smallest text (?P<pt>[\d.]+) pt")


def test_wide_screens_show_figures_in_their_column(fresh):
    page = fresh("attention.html").page
    image = page.locator("main figure img").first
    width = image.evaluate("(img) => img.getBoundingClientRect().width")
    assert width <= page.locator("main article").first.evaluate("(a) => a.getBoundingClientRect().width")


SCROLLING_BOXES = """() => [...document.querySelectorAll('main pre, main .pst-scrollable-table-container,'
        + ' main .katex-html, main .cell_output, main .output, main a.image-reference')]
      .filter((box) => box.scrollWidth > box.clientWidth + 1
                       && ['auto', 'scroll'].includes(getComputedStyle(box).overflowX))
      .map((box) => ({marked: box.classList.contains('tinyformer-scrolls'),
                      fade: getComputedStyle(box).maskImage, text: box.textContent.slice(0, 40)}))"""


def assert_scrolling_boxes_are_marked(page: Page, chapter: str) -> None:
    found = page.evaluate(SCROLLING_BOXES)
    assert found, f"{chapter}: nothing scrolls sideways at 390 px, so nothing is checked"
    unmarked = [box["text"] for box in found if not box["marked"] or not box["fade"].startswith("linear-gradient")]
    assert unmarked == [], f"{chapter}: boxes that scroll with no cue: {unmarked}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_boxes_that_scroll_sideways_show_that_they_do(visits, chapter):
    """On a phone every table, equation, listing, output or figure wider than its box is marked, and the
    edge that has more behind it fades out; scrolled to the end, the fade moves to the other edge (and back
    at the start, as the page the other checks read had it)."""
    page = visits(chapter, "light", **PHONE).page
    assert_scrolling_boxes_are_marked(page, chapter)
    box = page.locator("main .tinyformer-scrolls").first
    clear = r"(?:transparent|rgba\(0, 0, 0, 0\))"  # how the browser may write the fade's far end
    assert re.search(clear + r"\)$", box.evaluate("(box) => getComputedStyle(box).maskImage"))  # the right edge
    box.evaluate("(box) => { box.scrollLeft = box.scrollWidth; }")
    try:
        expect(box).to_have_class(re.compile(r"\btinyformer-at-end\b"))
        fade = box.evaluate("(box) => getComputedStyle(box).maskImage")
        assert re.match(r"linear-gradient\(to right, " + clear, fade), f"{chapter}: at the end, {fade}"
        assert not re.search(clear + r"\)$", fade), f"{chapter}: at the end, the right edge still fades: {fade}"
    finally:
        box.evaluate("(box) => { box.scrollLeft = 0; }")
    expect(box).not_to_have_class(re.compile(r"\btinyformer-at-end\b"))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_figures_on_a_phone_show_text_of_at_least_9_px(visits, chapter):
    """At 390 px every figure is shown at least as wide as its smallest text needs to be 9 CSS px (the
    kernel writes that text's size into the PNG; at 100 px an inch a point is 100/72 px), scrolling
    sideways in its box where it is wider than the screen; a tap opens the full image. Read on the page the other
    phone checks read (this test comes after them in the file), which the tap then leaves."""

    page = visits(chapter, "light", **PHONE).page
    images = page.locator("main figure img, main .cell_output img")
    assert images.count() > 0
    for index in range(images.count()):
        image = images.nth(index)
        shown = image.evaluate(
            "(img) => ({src: img.currentSrc || img.src, width: img.getBoundingClientRect().width,"
            " natural: Number(img.getAttribute('width'))})"
        )
        png = Image.open(io.BytesIO(page.context.request.get(shown["src"]).body()))
        smallest = float(FIGURE_DESCRIPTION.fullmatch(png.text["Description"])["pt"])
        text_px = smallest * 100 / 72 * shown["width"] / shown["natural"]
        assert text_px >= 9, f"{chapter}: {shown['src']} shows its smallest text at {text_px:.1f} px"
        link = image.locator("xpath=ancestor::a[contains(@class, 'image-reference')]")
        assert link.get_attribute("href").endswith(Path(urlsplit(shown["src"]).path).name)
    # a tap on the first figure opens its full image, twice the pixels it was drawn with (retina)
    first = images.first
    first.scroll_into_view_if_needed()
    natural = int(first.get_attribute("width"))
    try:
        first.tap()
        page.wait_for_url(re.compile(r"\.png$"))
        assert page.evaluate("document.images[0].naturalWidth") >= 2 * natural - 2
    finally:
        visits.discard(chapter, "light", **PHONE)


def test_boxes_that_scroll_only_once_their_fonts_arrive_are_marked(browser, site):
    """A formula grows wider when its KaTeX fonts arrive, after the page's script has marked the boxes
    (its box keeps its width, so no resize is seen): it is marked then. The fonts are held back here
    until the page has run its script, as a slow network does; CI once saw two such formulas unmarked."""
    context = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    held: list = []
    released = False

    def hold(route):
        if released:
            route.continue_()
        else:
            held.append(route)

    context.route(re.compile(r"\.(woff2?|ttf)(\?.*)?$"), hold)
    try:
        page = context.new_page()
        page.goto(site + "positional-encoding.html", wait_until="domcontentloaded")
        # DOMContentLoaded has been handled (the script marks boxes then); the fonts are asked for, and held
        page.wait_for_function("document.fonts.status === 'loading'")
        assert held, "no font was requested, so nothing here is held back"
        released = True
        for route in held:
            route.continue_()
        page.evaluate(FONTS_READY)
        assert_scrolling_boxes_are_marked(page, "positional-encoding")
    finally:
        context.close()


def test_printing_dark_mode_leaves_no_dark_cell_boxes(fresh):
    """Printed from dark mode, code cells and their outputs are light boxes (no grey blocks)."""
    page = fresh("attention.html", theme="dark").page
    page.emulate_media(media="print", color_scheme="dark")
    colours = page.evaluate(
        """() => [...document.querySelectorAll('div.cell, div.cell_input, div.cell_output, div.cell_output pre,'
                 + ' div.highlight, div.highlight pre')]
              .map((box) => getComputedStyle(box).backgroundColor)"""
    )
    assert colours
    dark = [
        colour
        for colour in colours
        if (rgb := re.findall(r"[\d.]+", colour))
        and (len(rgb) < 4 or float(rgb[3]) > 0)
        and luminance(tuple(int(float(c)) for c in rgb[:3])) < 0.7
    ]
    assert dark == [], f"dark boxes in print: {sorted(set(dark))}"


@pytest.mark.parametrize("width", [PHONE["width"], DESKTOP["width"]])
def test_the_search_icon_sits_beside_the_query(fresh, width):
    page = fresh("attention.html", width=width, height=900).page
    page.keyboard.press("Control+k")
    field = page.locator("form.bd-search input").first
    expect(field).to_be_visible()
    field.fill("attention")
    geometry = page.evaluate(
        """() => { const form = [...document.querySelectorAll('form.bd-search')].find((f) => f.offsetParent);
                   const icon = form.querySelector('.fa-magnifying-glass').getBoundingClientRect();
                   const input = form.querySelector('input'); const style = getComputedStyle(input);
                   return {icon: icon.right, text: input.getBoundingClientRect().left
                           + parseFloat(style.paddingLeft) + parseFloat(style.borderLeftWidth)}; }"""
    )
    assert geometry["icon"] <= geometry["text"], (
        f"the icon ends at {geometry['icon']}, the text starts at {geometry['text']}"
    )


def test_header_buttons_show_keyboard_focus(fresh):
    page = fresh("attention.html").page
    buttons = page.locator(".article-header-buttons > .btn, .article-header-buttons .dropdown-toggle")
    assert buttons.count() >= 3
    for index in range(buttons.count()):
        button = buttons.nth(index)
        if not button.is_visible():
            continue
        button.focus()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Tab")  # focus by keyboard, so :focus-visible applies
        style = page.evaluate(
            "() => { const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth]; }"
        )
        assert style[0] != "none", f"button {index}: no focus outline"
        assert float(style[1].removesuffix("px")) >= 2, f"button {index}: focus outline {style[1]}"


def test_copy_buttons_have_accessible_names(fresh):
    page = fresh("attention.html").page
    buttons = page.locator("button.copybtn")
    assert buttons.count() > 5
    named = page.get_by_role("button", name="Copy this code to the clipboard", include_hidden=True)
    expect(named).to_have_count(buttons.count())  # those in closed solutions too
