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

Full-page screenshots of every page in both themes are written to ``build/screenshots/{light,dark}/``.
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import nbformat
import pytest
from axe_playwright_python.sync_playwright import Axe
from PIL import Image
from playwright.sync_api import Browser, Page, sync_playwright

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
# Raw TeX delimiters that mean a formula was not typeset.
RAW_MATH = re.compile(r"\$|\\\(|\\\)|\\\[|\\\]")
BLOCKING_IMPACTS = {"serious", "critical"}
SOLUTION = re.compile(r"^(?::{3,}|`{3,})\{solution\}", re.MULTILINE)
IMAGE_FILE = re.compile(r"\.(png|jpe?g|gif|svg|webp)\b", re.IGNORECASE)

pytestmark = pytest.mark.book


def chromium_path() -> str | None:
    return os.environ.get("TINYFORMER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="session")
def site(book):
    """The built book served over HTTP on 127.0.0.1 (a free port); the base URL, ending in ``/``."""
    handler = functools.partial(_QuietHandler, directory=str(book / "html"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="session")
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


def open_page(browser: Browser, site: str, path: str, theme: str) -> Visit:
    """Open ``path`` in a fresh browser context whose system colour scheme is ``theme``.

    Requests to anything but the local server are aborted and recorded; so are failed requests, HTTP
    errors, console errors and uncaught exceptions. Returns once the page and its formulas are done.
    """
    context = browser.new_context(color_scheme=theme, viewport={"width": 1280, "height": 900})
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
    page.goto(site + path, wait_until="networkidle")
    # MathJax typesets after load; wait for it on pages that have it (a failed load leaves no MathJax).
    page.evaluate("() => window.MathJax?.startup?.promise ?? null")
    return visit


@pytest.fixture(scope="session")
def visits(browser, site):
    """Each (page, theme) opened once and kept open for the read-only checks; closed at the end."""
    opened: dict[tuple[str, str], Visit] = {}

    def visit(page: str, theme: str) -> Visit:
        if (page, theme) not in opened:
            opened[page, theme] = open_page(browser, site, f"{page}.html", theme)
        return opened[page, theme]

    yield visit
    for opened_visit in opened.values():
        opened_visit.page.context.close()


@pytest.fixture
def fresh(browser, site):
    """Opens a page in a new browser context for a test that clicks or types; closed after the test."""
    opened: list[Visit] = []

    def open_fresh(path: str, theme: str = "light") -> Visit:
        opened.append(open_page(browser, site, path, theme))
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
    shot = SCREENSHOTS / theme / f"{page}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    visit.page.screenshot(path=shot, full_page=True)
    # Checked after the screenshot, so that requests made while it renders are seen too.
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
    visit = visits(page, "light")
    formulas = visit.page.locator(".math")
    typeset = visit.page.locator(".math mjx-container svg")
    errors = visit.page.locator("mjx-merror, [data-mjx-error]")
    assert formulas.count() == typeset.count(), f"{page}: {formulas.count() - typeset.count()} formulas not typeset"
    assert errors.count() == 0, f"{page}: TeX errors: {errors.all_inner_texts()}"
    # The reader-visible text, less code (where $ and backslashes are legitimate) and typeset math.
    prose = visit.page.evaluate(
        """() => {
            const main = document.querySelector("main").cloneNode(true);
            main.querySelectorAll("pre, code, mjx-container, script, style").forEach((e) => e.remove());
            return main.textContent;
        }"""
    )
    assert not RAW_MATH.findall(prose), f"{page}: raw TeX in the text: {RAW_MATH.findall(prose)}"


def test_the_chapter_has_formulas(visits):
    """Guards the test above against passing vacuously: the chapter's formulas are found and typeset."""
    assert visits("positional-encoding", "light").page.locator(".math mjx-container svg").count() >= 50


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
        shown = Image.open(io.BytesIO(figure.screenshot())).convert("RGB")
        _, background = max(shown.getcolors(shown.width * shown.height))
        darkest = min(luminance(colour) for _, colour in shown.getcolors(shown.width * shown.height))
        ground = luminance(background)
        assert ground > 0.5, f"{page} ({theme}): figure {figure.get_attribute('src')} shows on a dark ground"
        assert (ground + 0.05) / (darkest + 0.05) >= 4.5, f"{page} ({theme}): figure ink too faint"
    if page == "positional-encoding":
        assert figures.count() >= 5


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_downloads_offer_the_source_and_the_executed_notebook(fresh, chapter, book):
    visit = fresh(f"{chapter}.html")
    page = visit.page
    page.get_by_role("button", name="Download this page").click()
    menu = page.locator(".dropdown-download-buttons .dropdown-menu")
    notebook_link = menu.locator('a[href$=".ipynb"]')
    source_link = menu.locator('a[href$=".md"]')
    assert notebook_link.is_visible()
    assert source_link.is_visible()

    source = page.context.request.get(source_link.evaluate("(a) => a.href"))
    assert source.ok
    assert source.body() == (DOCS / f"{chapter}.md").read_bytes()

    downloaded = page.context.request.get(notebook_link.evaluate("(a) => a.href"))
    assert downloaded.ok
    notebook = nbformat.reads(downloaded.text(), as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert any(output.output_type in {"execute_result", "stream", "display_data"} for output in outputs)
    executed = nbformat.read(book / "jupyter_execute" / f"{chapter}.ipynb", as_version=4)
    assert [c.get("outputs") for c in notebook.cells] == [c.get("outputs") for c in executed.cells]
    assert visit.failed == []


def page_title(page: str) -> str:
    """The first heading of a page's source, as plain words (no role names, backticks or markup)."""
    title = re.search(r"^# (.+)$", (DOCS / f"{page}.md").read_text(), re.MULTILINE).group(1)
    return " ".join(re.sub(r"\{[^}]*\}|[`*_$]", " ", title).split())


def solution_count(page: str) -> int:
    """The number of ``solution`` directives in a page's source, colon or backtick fenced."""
    return len(SOLUTION.findall((DOCS / f"{page}.md").read_text()))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_search_box_finds_the_chapter_offline(fresh, chapter):
    """Type the chapter's title into the search box, press Enter: the chapter is among the results."""
    visit = fresh("index.html")
    page = visit.page
    page.locator("button.search-button__button:visible").first.click()
    box = page.locator("#pst-search-dialog input[name=q]")
    box.fill(page_title(chapter))
    box.press("Enter")
    page.wait_for_url(re.compile(r"search\.html\?q="))
    results = page.locator("#search-results ul.search li a")
    results.first.wait_for(timeout=30_000)
    hrefs = [urlsplit(href).path for href in results.evaluate_all("(links) => links.map((a) => a.href)")]
    assert f"/{quote(chapter)}.html" in hrefs, f"searching {page_title(chapter)!r} gave {hrefs}"
    assert (visit.off_site, visit.failed, visit.console) == ([], [], [])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solutions_are_hidden_until_clicked(fresh, chapter):
    """Every solution is hidden on arrival; clicking its toggle shows it."""
    visit = fresh(f"{chapter}.html")
    solutions = visit.page.locator("div.solution")
    expected = solution_count(chapter)
    assert solutions.count() == expected
    for i in range(expected):
        solution = solutions.nth(i)
        body = solution.locator("section")
        assert body.is_hidden(), f"{chapter}: solution {i + 1} is shown before it is clicked"
        solution.locator("button.toggle-button").click()
        body.wait_for(state="visible")
        assert body.inner_text().strip()
    assert visit.console == []


def test_the_chapter_has_solutions():
    """Guards the test above against passing vacuously."""
    assert solution_count("multi-head-attention") == 6


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("page", PAGES + GENERATED)
def test_no_serious_or_critical_accessibility_violation(visits, page, theme):
    """axe-core on the whole page as it loads, in each theme."""
    assert not (report := blocking_violations(visits(page, theme).page)), f"{page} ({theme}):\n{report}"


def blocking_violations(page: Page) -> str:
    """axe-core's serious and critical violations on ``page`` (the copy in axe-playwright-python), one a line."""
    results = Axe().run(page)
    return "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']} -- {[n['target'] for n in v['nodes']][:5]}"
        for v in results.response["violations"]
        if v["impact"] in BLOCKING_IMPACTS
    )


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_serious_or_critical_accessibility_violation_with_solutions_open(fresh, chapter, theme):
    """axe-core skips hidden content, so the solutions are opened and the chapter is checked again."""
    page = fresh(f"{chapter}.html", theme).page
    toggles = page.locator("div.solution button.toggle-button").all()
    for toggle in toggles:
        toggle.click()
    if toggles:
        page.locator("div.solution section").last.wait_for(state="visible")
    # The solutions fade in (a 0.3 s CSS transition): measured mid-fade, text has too little contrast.
    page.wait_for_function("document.getAnimations().every((a) => a.playState !== 'running')")
    assert not (report := blocking_violations(page)), f"{chapter} ({theme}), solutions open:\n{report}"


def test_theme_switch_changes_the_theme(fresh):
    """The reader can override the system setting with the colour-mode menu, and the choice is applied."""
    visit = fresh("index.html", "light")
    page = visit.page
    page.locator(".theme-switch-button:visible").first.click()
    page.locator(".theme-change-button[data-mode=dark]:visible").first.click()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert visit.console == []
