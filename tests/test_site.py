"""The published site's metadata: citation, bibliography, sitemap, link previews and hosting configuration.

The built-page checks read the ``book`` fixture's build; the browser checks are in test_browser.py.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import yaml
from booktools import parsed, rendered
from bs4 import BeautifulSoup
from pybtex.database import parse_file

from tinyformer_exercises import CHAPTERS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(
    p.relative_to(DOCS).with_suffix("").as_posix()
    for p in DOCS.rglob("*.md")
    if not {"_build", "jupyter_execute", ".ipynb_checkpoints"} & set(p.relative_to(DOCS).parts)
)
CITE_ROLE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")
# The hosts build the PDF edition first (`nox -s pdf`), so that the site copies it (tests/test_hosting.py).
NOX_DOCS = re.compile(r"pip install nox==(\S+) && (?:nox -s pdf && )?nox -s docs\b")


def _load_citation_module():
    spec = importlib.util.spec_from_file_location("tinyformer_citation", ROOT / "conf" / "citation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


citation = _load_citation_module()
CFF = citation.load(ROOT / "CITATION.cff")
BASE_URL = CFF["url"]  # conf.py refuses to build unless html_baseurl is the same URL


def test_citation_cff_follows_the_schema():
    assert CFF["cff-version"] == "1.2.0"
    assert CFF["version"] == CFF["preferred-citation"]["version"] == importlib.metadata.version("tinyformer")
    assert BASE_URL.startswith("https://")
    assert BASE_URL.endswith("/")


def test_a_broken_citation_cff_is_rejected(tmp_path):
    broken = tmp_path / "CITATION.cff"
    text = (ROOT / "CITATION.cff").read_text()
    broken.write_text(text.replace("cff-version: 1.2.0", "cff-version: 1.2.0\nauthor: misspelt field"))
    with pytest.raises(jsonschema.ValidationError, match="author"):
        citation.load(broken)


@pytest.mark.book
def test_cite_page_shows_the_citation_generated_from_citation_cff(book):
    page = rendered(book, "cite")
    bibtex = page.select_one("#bibtex pre").get_text()
    assert bibtex.strip() == citation.bibtex(CFF).strip()
    assert "@book{tinyformer2026," in bibtex
    apa = page.select_one("#apa p").get_text()
    assert apa == BeautifulSoup(citation.apa_html(CFF), "html.parser").get_text()
    assert apa.startswith("The tinyformer authors. (2026). tinyformer: attention and position in Transformers")
    assert f"(Version {CFF['version']})" in apa
    assert BASE_URL in apa


@pytest.mark.book
def test_every_cited_work_is_in_the_bibliography(book):
    keys = {
        key.strip() for p in DOCS.rglob("*.md") for role in CITE_ROLE.findall(p.read_text()) for key in role.split(",")
    }
    assert "vaswani2017attention" in keys
    entries = parse_file(ROOT / "conf" / "references.bib").entries
    listed = " ".join(rendered(book, "bibliography").select_one("main").get_text().split())
    for key in sorted(keys):
        title = entries[key].fields["title"].replace("{", "").replace("}", "")
        assert title in listed, f"{key} ({title}) is cited but not in the bibliography"


@pytest.mark.book
def test_sitemap_lists_every_page_under_the_base_url(book):
    tree = ET.parse(book / "html" / "sitemap.xml")
    namespace = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    listed = sorted(loc.text for loc in tree.getroot().findall("s:url/s:loc", namespace))
    assert listed == sorted(f"{BASE_URL}{page}.html" for page in PAGES)


@pytest.mark.book
@pytest.mark.parametrize("page", PAGES)
def test_every_page_has_a_link_preview(book, page):
    head = rendered(book, page).head

    def meta(name):
        tag = head.find("meta", attrs={"property": name})
        return tag["content"] if tag else None

    assert meta("og:url") == f"{BASE_URL}{page}.html"
    assert meta("og:title")
    assert meta("og:site_name") == "tinyformer"
    assert head.find("link", rel="canonical")["href"] == f"{BASE_URL}{page}.html"


def ci_nox_version():
    return re.search(r"pip install nox==(\S+) && nox -s tests", (ROOT / ".ci" / "run").read_text()).group(1)


def test_read_the_docs_runs_the_nox_docs_session():
    config = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    assert config["version"] == 2
    assert config["build"]["os"] == "ubuntu-24.04"
    assert config["build"]["tools"]["python"] == "3.11"
    commands = "\n".join(config["build"]["commands"])
    assert NOX_DOCS.search(commands).group(1) == ci_nox_version()
    assert "build/html" in commands
    assert "$READTHEDOCS_OUTPUT/html" in commands


def test_github_pages_workflow_runs_the_nox_docs_session():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job.get("steps", [])]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert NOX_DOCS.search(runs).group(1) == ci_nox_version()
    uses = {step["uses"].split("@")[0]: step for step in steps if "uses" in step}
    assert uses["actions/setup-python"]["with"]["python-version"] == "3.11"
    assert uses["actions/upload-pages-artifact"]["with"]["path"] == "build/html"
    assert "actions/deploy-pages" in uses
    assert workflow["permissions"]["pages"] == "write"


# ==== The repository and the wheel (issue 22) ====
CONF = (ROOT / "conf" / "conf.py").read_text()
REPOSITORY = re.search(r'^repository_url = "([^"]+)"$', CONF, re.MULTILINE).group(1)
BASE_URL = re.search(r'^html_baseurl = "([^"]+)"$', CONF, re.MULTILINE).group(1)
# What a placeholder for an address looks like: "<this repository>", "<repository URL>", "<your-fork>".
PLACEHOLDER = re.compile(r"<(?:this |the |your[ -])?(?:repo(?:sitory)?|fork|url|clone)[^<>\n]{0,20}>", re.IGNORECASE)
CODING_CHAPTERS = sorted(p.stem for p in DOCS.glob("*.md") if "\n## Coding exercises\n" in p.read_text())


def test_one_repository_address_for_citation_and_pages():
    """The theme's button is checked on the built pages below, not as text of conf.py."""
    assert REPOSITORY.startswith("https://")
    assert CFF["repository-code"] == REPOSITORY


def test_the_home_page_and_every_coding_section_give_the_repository_and_pip_install(book):
    """One install, the way the book was built, on the home page, in every chapter's coding section (and in
    every notebook's first cell, tests/test_notebooks.py): PyTorch's CPU build of the book's torch first,
    then the wheel with the constraints file the site serves beside it, which is conf/constraints.txt."""
    wheel = sorted((book / "html" / "dist").glob("tinyformer-*.whl"))
    assert len(wheel) == 1
    served = book / "html" / "dist" / "constraints.txt"
    assert served.read_text() == (ROOT / "conf" / "constraints.txt").read_text()
    torch_pin = re.search(r"^torch==\S+$", served.read_text(), re.MULTILINE)[0]
    install = (
        f"$ SITE={BASE_URL}dist\n"
        f"$ python3 -m pip install {torch_pin} \\\n    --index-url https://download.pytorch.org/whl/cpu\n"
        f'$ python3 -m pip install -c $SITE/constraints.txt \\\n    "tinyformer[hf] @ $SITE/{wheel[0].name}"'
    )
    home = parsed(book / "html" / "index.html")
    assert home.select_one(f'main a[href="{REPOSITORY}"]') is not None, "the home page does not link the repository"
    text = home.select_one("main").get_text()
    assert f"git clone {REPOSITORY}" in text
    assert install in text
    assert f'"tinyformer[hf] @ git+{REPOSITORY}@main"' in text
    assert sorted(CHAPTERS) == CODING_CHAPTERS  # every chapter of the table of contents sets coding exercises
    for chapter in CODING_CHAPTERS:
        page = parsed(book / "html" / f"{chapter}.html")
        section = page.find("section", id=re.compile(r"coding"))
        assert section is not None, f"{chapter}: no coding-exercise section"
        assert section.select_one(f'a[href="{REPOSITORY}"]') is not None, f"{chapter}: no repository link"
        commands = section.get_text()
        assert install in commands, f"{chapter}: the coding section does not install as the book was built"
        assert "$ python3 -m tinyformer_exercises --template ID" in commands, chapter
        button = page.select_one(f'.article-header-buttons a[href="{REPOSITORY}"]')
        assert button is not None, f"{chapter}: no repository button"


def test_no_address_placeholder_anywhere(book):
    sources = [ROOT / "README.md", ROOT / "CITATION.cff", *DOCS.glob("*.md"), *(ROOT / "src").rglob("*.py")]
    found = [f"{path.name}: {m.group(0)}" for path in sources for m in PLACEHOLDER.finditer(path.read_text())]
    found += [
        f"{page.name}: {m.group(0)}"
        for page in (book / "html").glob("*.html")
        for m in PLACEHOLDER.finditer(parsed(page).get_text())
    ]
    assert found == []


def test_placeholder_pattern_finds_the_old_one():
    assert PLACEHOLDER.search("$ git clone <this repository> tinyformer")
    assert PLACEHOLDER.search("clone <repository URL>")
    assert not PLACEHOLDER.search("a <b>bold</b> word, x < y > z")
