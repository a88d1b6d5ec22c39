"""Editions: CHANGELOG.md, the "Errata and changes" page made from it, and the edition in every citation.

The edition is the version of CITATION.cff (equal to the package's); the site shows it in every page's
footer, the PDF on its title page (tests/test_pdf.py), the citation in BibTeX and APA.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest
from booktools import rendered
from bs4 import BeautifulSoup
from pybtex.database import parse_string

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CHANGELOG = ROOT / "CHANGELOG.md"
EDITION = re.compile(
    r"^## (?:(\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)|Unreleased: the next edition \((\d+\.\d+\.\d+)\))$"
)
PAGES = sorted(
    p.relative_to(DOCS).with_suffix("").as_posix()
    for p in DOCS.rglob("*.md")
    if not {"_build", "jupyter_execute", ".ipynb_checkpoints"} & set(p.relative_to(DOCS).parts)
)


def _citation():
    spec = importlib.util.spec_from_file_location("tinyformer_citation", ROOT / "conf" / "citation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


citation = _citation()
CFF = citation.load(ROOT / "CITATION.cff")
VERSION = importlib.metadata.version("tinyformer")


def editions() -> list[tuple[str, str | None]]:
    """(version, release date or None if unreleased) of each ``## `` section of CHANGELOG.md, in order."""
    sections = [line for line in CHANGELOG.read_text().splitlines() if line.startswith("## ")]
    parsed = []
    for line in sections:
        match = EDITION.match(line)
        assert match, f"CHANGELOG.md: {line!r} is neither '## X.Y.Z (YYYY-MM-DD)' nor the unreleased section"
        released, date, upcoming = match.groups()
        parsed.append((released, date) if released else (upcoming, None))
    return parsed


def as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_changelog_has_a_section_per_edition_newest_first():
    found = editions()
    released = [version for version, date in found if date]
    assert VERSION in released, f"the current edition {VERSION} has no released section"
    versions = [as_tuple(version) for version, _ in found]
    assert versions == sorted(versions, reverse=True), "sections are not newest first"
    assert len(set(versions)) == len(versions)
    upcoming = [version for version, date in found if date is None]
    assert len(upcoming) <= 1
    if upcoming:
        assert found[0][1] is None, "the unreleased edition comes first"
        assert as_tuple(upcoming[0]) > as_tuple(VERSION)


def test_the_edition_is_the_same_in_citation_cff_the_package_and_the_changelog():
    assert CFF["version"] == CFF["preferred-citation"]["version"] == VERSION


def test_bibtex_cites_the_book_as_a_book_with_publisher_and_edition():
    ((key, entry),) = parse_string(citation.bibtex(CFF), "bibtex").entries.items()
    assert key == "tinyformer2026"
    assert entry.type == "book"
    assert entry.fields["publisher"] == CFF["preferred-citation"]["publisher"]["name"]
    assert entry.fields["edition"] == VERSION
    assert "howpublished" not in entry.fields  # not a @book field; the medium is a note
    assert entry.fields["note"] == "Executable textbook"


def test_a_book_without_publisher_is_refused():
    work = dict(CFF["preferred-citation"])
    del work["publisher"]
    with pytest.raises(ValueError, match="publisher"):
        citation.bibtex(CFF | {"preferred-citation": work})


def test_software_is_cited_as_misc_with_howpublished():
    work = dict(CFF["preferred-citation"], type="software")
    entry = next(iter(parse_string(citation.bibtex(CFF | {"preferred-citation": work}), "bibtex").entries.values()))
    assert entry.type == "misc"
    assert entry.fields["howpublished"] == "Executable textbook"


def test_apa_names_the_edition_and_publisher():
    apa = BeautifulSoup(citation.apa_html(CFF), "html.parser").get_text()
    assert f"(Version {VERSION})" in apa
    assert CFF["preferred-citation"]["publisher"]["name"] in apa


@pytest.mark.book
def test_errata_page_shows_every_edition_of_the_changelog(book):
    page = rendered(book, "changelog")
    assert page.select_one("main h1").get_text(strip=True).startswith("Errata and changes")
    headings = [" ".join(h.get_text(" ", strip=True).rstrip("#").split()) for h in page.select("main h2")]
    for version, date in editions():
        assert any(version in heading and (date is None or date in heading) for heading in headings), version
    # It is in the Reference part of the navigation.
    index = rendered(book, "index")
    assert index.select_one("nav.bd-links a[href='changelog.html']") is not None


@pytest.mark.book
@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_the_edition_in_its_footer(book, page):
    footer = rendered(book, page).select_one("p.tinyformer-edition")
    assert footer is not None
    assert footer["data-edition"] == VERSION
    assert f"Edition {VERSION}" in footer.get_text()
    assert footer.find("a")["href"] == "changelog.html"
