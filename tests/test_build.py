"""The built book is reproducible, carries its provenance on every page and loads nothing from the network.

Reads the ``book`` fixture (tests/conftest.py), one clean build shared with the other book tests; the
determinism test adds one more clean build and compares the two byte by byte.
"""

import filecmp
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from booktools import copy_project, fresh_cache, parsed, slow_chapters

import tinyformer

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CHAPTERS = sorted(p.stem for p in DOCS.glob("*.md") if p.read_text().startswith("---\njupytext:"))
SEED = 0
# Elements that make a browser fetch something, and the attribute holding the address.
RESOURCES = {"script": "src", "img": "src", "iframe": "src", "source": "src", "embed": "src", "object": "data"}
# <link> relations a browser fetches (not canonical, next, prev: addresses only).
FETCHED_LINKS = [
    "stylesheet",
    "icon",
    "shortcut",
    "apple-touch-icon",
    "preload",
    "modulepreload",
    "prefetch",
    "manifest",
]
REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


def differing_files(first: Path, second: Path) -> list[str]:
    """Relative paths of the files that are in one tree only or whose bytes differ."""
    names = {p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file()}
    names |= {p.relative_to(second).as_posix() for p in second.rglob("*") if p.is_file()}
    return sorted(
        name
        for name in names
        if not ((first / name).is_file() and (second / name).is_file())
        or not filecmp.cmp(first / name, second / name, shallow=False)
    )


def pages(book):
    """The site's pages (not the theme's HTML fragments under ``_static``)."""
    return sorted(p for p in (book / "html").rglob("*.html") if "_static" not in p.parts)


def library_hash() -> str:
    """The spec of the provenance hash: SHA-256 over the package's ``.py`` files, its presets (``.toml``)
    and its corpus (``.txt``), path and bytes, sorted.

    The coding exercises are their own package (``tinyformer_exercises``), outside it.
    """
    package = Path(tinyformer.__file__).parent
    digest = hashlib.sha256()
    files = (p for p in package.rglob("*") if p.suffix in {".py", ".toml", ".txt"} and "__pycache__" not in p.parts)
    for path in sorted(files):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_date() -> str | None:
    """The date conf.py takes: ``$SOURCE_DATE_EPOCH``, else the last commit's; None outside a git checkout."""
    command = ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"]
    epoch = (
        os.environ.get("SOURCE_DATE_EPOCH")
        or subprocess.run(command, capture_output=True, text=True, check=False).stdout.strip()
    )
    return datetime.fromtimestamp(int(epoch), tz=UTC).date().isoformat() if epoch.isdigit() else None


@pytest.mark.release
def test_two_clean_builds_are_byte_identical(book, sphinx, tmp_path):
    second = sphinx(DOCS, tmp_path, *fresh_cache(tmp_path))
    assert second.returncode == 0, f"the second build failed:\n{second.stdout}\n{second.stderr}"
    assert len(list((book / "html").rglob("*.png"))) >= 5, "the comparison should cover the figures"
    # The site, and the executed notebooks, figures and glue data beside it (a page may offer them).
    differ = [
        f"{tree}/{name}"
        for tree in ("html", "jupyter_execute")
        for name in differing_files(book / tree, tmp_path / tree)
    ]
    assert not differ, "two clean builds differ in:\n" + "\n".join(differ)


@pytest.mark.release
def test_the_project_copy_that_buildtime_builds_has_everything_the_pages_include(book, sphinx, tmp_path):
    """``nox -s buildtime`` builds a copy of the project (``booktools.copy_project``); a copy that lacks a
    file a page includes (the claims page and the solutions include ``tests/``, the errata page
    ``CHANGELOG.md``) fails to build, as it did on a fresh clone. The copy is built here with the book's
    execution cache, so nothing executes; ``nox -s reproducible`` is the byte-identical test above.

    With a PDF in the copy's ``build/pdf`` (as after ``nox -s pdf``), the site copies it and every page's
    ".pdf" entry links it, with no print dialog. A release check: it renders the whole site a second time."""
    project = copy_project(tmp_path / "project")
    # As after a reader's `nox -s pdf`: the site built next copies the PDF and every page links it.
    pdf = project / "build" / "pdf" / "tinyformer.pdf"
    pdf.parent.mkdir(parents=True)
    pdf.write_bytes(b"%PDF-1.7\n% stands in for the PDF edition\n")
    cache = ("-D", "nb_execution_mode=cache", "-D", f"nb_execution_cache_path={book / 'cache'}")
    built = sphinx(project / "docs", tmp_path / "out", *cache, conf=project / "conf")
    assert built.returncode == 0, f"the copy did not build:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    assert (tmp_path / "out" / "html" / "claims.html").is_file()
    executed = list((tmp_path / "out" / "jupyter_execute").glob("*.ipynb"))
    assert executed, "the copy's build wrote no executed notebooks"
    assert (tmp_path / "out" / "html" / "tinyformer.pdf").read_bytes() == pdf.read_bytes()
    menus = 0
    for page in (tmp_path / "out" / "html").glob("*.html"):
        menu = parsed(page).select_one(".dropdown-download-buttons")
        if menu is not None:
            assert menu.select_one("a[href$='tinyformer.pdf']") is not None, f"{page.name}: the PDF is not linked"
            assert "window.print" not in str(menu), f"{page.name}: the .pdf entry opens the print dialog"
            menus += 1
    assert menus >= 8, f"only {menus} pages have a download menu"


def test_a_site_built_without_the_pdf_says_how_to_make_it(book):
    """Without `nox -s pdf` first, the ".pdf" entry leads to the section that says how to build it
    (the theme's entry opened the browser's print dialog, which prints one page)."""
    if (book / "html" / "tinyformer.pdf").exists():
        pytest.skip("this build has the PDF (build/pdf/tinyformer.pdf existed)")
    pages = sorted((book / "html").glob("*.html"))
    menus = 0
    for page in pages:
        menu = parsed(page).select_one(".dropdown-download-buttons")
        if menu is None:
            continue
        menus += 1
        assert "window.print" not in str(menu), f"{page.name}: the .pdf entry opens the print dialog"
        target = "#sec-pdf-edition" if page.name == "cite.html" else "cite.html#sec-pdf-edition"
        assert menu.select_one(f"a[href='{target}']") is not None, f"{page.name}: the .pdf entry leads elsewhere"
    assert menus >= 8
    section = parsed(book / "html" / "cite.html").find(id="sec-pdf-edition")
    assert section is not None
    assert "nox -s pdf" in section.get_text()


def test_differing_files_names_every_difference(tmp_path):
    for tree in ("a", "b"):
        (tmp_path / tree / "_images").mkdir(parents=True)
        (tmp_path / tree / "same.html").write_text("same")
        (tmp_path / tree / "_images" / "fig.png").write_text(f"figure {tree}")
    (tmp_path / "a" / "only-a.js").write_text("")
    assert differing_files(tmp_path / "a", tmp_path / "b") == ["_images/fig.png", "only-a.js"]


def test_every_page_states_its_provenance(book):
    expected = {
        "tinyformer": tinyformer.__version__,
        "source-hash": library_hash()[:12],
        "torch": importlib.metadata.version("torch"),
        "numpy": importlib.metadata.version("numpy"),
        "seed": str(SEED),
        "build-date": build_date(),
    }
    found = pages(book)
    assert {f"{chapter}.html" for chapter in CHAPTERS} <= {p.name for p in found}
    for page in found:
        provenance = parsed(page).select(".tinyformer-provenance")
        assert len(provenance) == 1, f"{page.name}: {len(provenance)} provenance elements"
        facts = {key: provenance[0].get(f"data-{key}") for key in expected}
        if expected["build-date"] is None:  # no git: the date of the newest source file, an ISO date
            expected["build-date"] = datetime.fromisoformat(facts["build-date"]).date().isoformat()
        assert facts == expected, page.name
        text = provenance[0].get_text()
        for key in ("tinyformer", "source-hash", "torch", "numpy", "build-date"):
            assert expected[key] in text, f"{page.name}: the provenance line does not show {key}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_seeds_with_the_seed_the_provenance_states(chapter):
    source = (DOCS / f"{chapter}.md").read_text()
    first_cell = source.split("```{code-cell}", 1)[1].split("\n```", 1)[0]
    seed = re.search(r"torch\.manual_seed\((\w+)\)", first_cell)
    assert seed, f"{chapter}: the first code cell should call torch.manual_seed"
    value = seed.group(1)
    if not value.isdigit():
        value = re.search(rf"^{value}\s*=\s*(\d+)", first_cell, re.MULTILINE).group(1)
    assert int(value) == SEED


def test_no_page_loads_anything_from_the_network(book):
    for page in pages(book):
        soup = parsed(page)
        for tag, attribute in RESOURCES.items():
            for element in soup.find_all(tag):
                assert not REMOTE.match(element.get(attribute, "")), f"{page.name} loads {element}"
        for link in soup.find_all("link", rel=FETCHED_LINKS):
            assert not REMOTE.match(link.get("href", "")), f"{page.name} loads {link}"
    for stylesheet in (book / "html").rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", stylesheet.read_text()), stylesheet.name


def test_no_page_shows_the_build_machines_paths(book):
    """Tracebacks of expected errors show the error, not the files of the machine that built the book."""
    for page in [*pages(book), *(book / "html" / "_sources").rglob("*.ipynb")]:
        text = parsed(page).get_text() if page.suffix == ".html" else page.read_text()
        for path in ("site-packages", str(ROOT), "/tmp/"):
            assert path not in text, f"{page.name} shows the path {path!r}"


def test_no_cell_runs_within_five_times_of_the_cell_limit(book):
    """The per-cell limit (``nb_execution_timeout``) stops a runaway cell; it is not a speed target. Every code
    cell of every chapter must finish in a fifth of it on a quiet machine, so that a busy one still builds the
    book; the build records each cell's seconds and how busy the machine was before the chapters started
    (conf/_ext/tinyformer_build.py, ``execution-times.json``). Built on a machine already busy (a load
    average at or above its cores), the times say nothing of the chapters, and the test is skipped, saying so."""
    limit = int(re.search(r"^nb_execution_timeout = (\d+)$", (ROOT / "conf" / "conf.py").read_text(), re.M)[1])
    times = json.loads((book / "doctrees" / "execution-times.json").read_text())
    assert set(times) == set(CHAPTERS), "every chapter is executed by the build's workers and timed"
    busy = [(r["load_before"], r["cpus"]) for r in times.values() if r["load_before"] >= r["cpus"]]
    if busy:
        # another process kept the cores busy before the chapters started: the times measure that machine
        pytest.skip(f"the machine was busy when the book was built (load {busy[0][0]} on {busy[0][1]} cores)")
    too_slow = []
    for chapter, record in sorted(times.items()):
        cells = record["cells"]
        assert cells, chapter
        assert all(seconds is not None for seconds in cells), f"{chapter}: a cell has no timestamps"
        too_slow += [f"{chapter}, code cell {n + 1}: {s:.0f} s" for n, s in enumerate(cells) if s > limit / 5]
    assert not too_slow, f"cells within 5x of the {limit} s limit (at most {limit // 5} s each): " + "; ".join(too_slow)


def test_each_notebook_runs_within_the_minutes_its_chapter_states(book):
    """A downloaded notebook's first cell says it runs in under ``notebook_minutes`` (the chapter's front
    matter) on two cores; the build, which executes each chapter on one of two cores, must take at most
    that. Skipped, saying so, when the machine was already busy as the build started."""
    times = json.loads((book / "doctrees" / "execution-times.json").read_text())
    busy = [(r["load_before"], r["cpus"]) for r in times.values() if r["load_before"] >= r["cpus"]]
    if busy:
        pytest.skip(f"the machine was busy when the book was built (load {busy[0][0]} on {busy[0][1]} cores)")
    over = []
    for chapter, record in sorted(times.items()):
        stated = re.search(r"^notebook_minutes: (\d+)$", (ROOT / "docs" / f"{chapter}.md").read_text(), re.M)
        assert stated is not None, f"{chapter}: the front matter states no notebook_minutes"
        if record["seconds"] > 60 * int(stated[1]):
            over.append(f"{chapter}: {record['seconds']:.0f} s, stated under {stated[1]} min")
    assert not over, "notebooks slower than their chapters state: " + "; ".join(over)


def test_every_slow_chapter_is_started_first(book):
    """The build starts the chapters of ``tinyformer_slow_chapters`` (conf/conf.py) first, so that the short ones
    fill in at the end and neither core waits long for the other: a chapter that took 30 s or more in this
    build must be on that list. Skipped, saying so, when the machine was already busy as the build started."""
    times = json.loads((book / "doctrees" / "execution-times.json").read_text())
    busy = [(r["load_before"], r["cpus"]) for r in times.values() if r["load_before"] >= r["cpus"]]
    if busy:
        pytest.skip(f"the machine was busy when the book was built (load {busy[0][0]} on {busy[0][1]} cores)")
    listed = slow_chapters()
    assert set(listed) <= set(CHAPTERS), f"tinyformer_slow_chapters names no chapter: {set(listed) - set(CHAPTERS)}"
    slow = {chapter: record["seconds"] for chapter, record in times.items() if record["seconds"] >= 30}
    missing = [f"{chapter} ({seconds:.0f} s)" for chapter, seconds in sorted(slow.items()) if chapter not in listed]
    assert not missing, (
        "chapters of 30 s or more not started first (add them to tinyformer_slow_chapters): " + ", ".join(missing)
    )
