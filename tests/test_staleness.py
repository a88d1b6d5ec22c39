"""A cached rebuild is never stale: it re-executes exactly the chapters whose inputs changed.

In a temporary copy of the project (``src/``, ``conf/``, ``pyproject.toml``, ``CITATION.cff``) with a small book of two
chapters, the book is built the way ``nox -s docs`` builds it (execution cache in ``build/``) again and
again, after changing nothing, the library, one chapter and the pinned versions. Every cell of a
chapter appends the chapter's name to a log, so the test sees which chapters really executed, and the
kernels import the copy's library (``PYTHONPATH``; the probe module exists only there).
"""

import xml.etree.ElementTree as ET

import pytest
from booktools import copy_project, myst_notebook
from bs4 import BeautifulSoup

pytestmark = pytest.mark.book

PROBE = "def answer() -> int:\n    return {}\n"


def chapter(name, extra=""):
    return myst_notebook(
        f"Chapter {name}",
        "```{code-cell} ipython3\nimport os\n\nfrom myst_nb import glue\n\n"
        + "from tinyformer.probe import answer\n\n"
        + f"with open(os.environ['EXECUTION_LOG'], 'a') as log:\n    log.write('{name}\\n')\n"
        + f"glue('answer', answer(), display=False){extra}\n```\n\n"
        + "The library answers {glue:text}`answer`.\n",
    )


@pytest.fixture
def project(tmp_path):
    """A copy of the project with a two-chapter book and a probe module in its library."""
    copy = copy_project(tmp_path / "project", docs=False)
    (copy / "src" / "tinyformer" / "probe.py").write_text(PROBE.format(21))
    docs = copy / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# A small book\n\n```{toctree}\nalpha\nbeta\n```\n")
    (docs / "alpha.md").write_text(chapter("alpha"))
    (docs / "beta.md").write_text(chapter("beta"))
    return copy


def test_a_cached_rebuild_executes_what_changed_and_shows_the_library_now(project, sphinx, tmp_path):
    log = tmp_path / "executions.log"
    env = {"PYTHONPATH": str(project / "src"), "EXECUTION_LOG": str(log)}

    def build():
        """Build as nox -s docs does; return the chapters executed and the two pages' text. The sitemap
        lists every page after each build, not only the pages this build wrote again."""
        log.write_text("")
        result = sphinx(project / "docs", project / "build", conf=project / "conf", env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        sitemap = ET.parse(project / "build" / "html" / "sitemap.xml").getroot()
        listed = sorted(
            loc.text.rsplit("/", 1)[-1]
            for loc in sitemap.findall("s:url/s:loc", {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"})
        )
        assert listed == ["alpha.html", "beta.html", "index.html"], f"the sitemap lists {listed}"
        pages = [
            " ".join(
                BeautifulSoup((project / "build" / "html" / f"{name}.html").read_text(), "html.parser").text.split()
            )
            for name in ("alpha", "beta")
        ]
        return sorted(log.read_text().split()), pages

    executed, pages = build()
    assert executed == ["alpha", "beta"]
    assert all("The library answers 21." in page for page in pages)

    executed, pages = build()
    assert executed == [], "an unchanged rebuild executed chapters"
    assert all("The library answers 21." in page for page in pages)

    (project / "src" / "tinyformer" / "probe.py").write_text(PROBE.format(42))
    executed, pages = build()
    assert executed == ["alpha", "beta"], "a library change should re-execute every chapter"
    assert all("The library answers 42." in page for page in pages), "the page shows a stale value"

    (project / "docs" / "beta.md").write_text(chapter("beta", extra="\nanswer()"))
    executed, _ = build()
    assert executed == ["beta"], "an edited chapter should re-execute alone"

    with (project / "conf" / "constraints.txt").open("a") as constraints:
        constraints.write("# a pin changed\n")
    executed, _ = build()
    assert executed == ["alpha", "beta"], "a change of the pinned versions should re-execute every chapter"
    caches = list((project / "build" / ".jupyter_cache").iterdir())
    assert len(caches) == 1, f"caches of older builds were not pruned: {caches}"


def test_a_build_that_would_import_another_tinyformer_stops(project, sphinx):
    # Without PYTHONPATH the kernels would import the installed tinyformer, which lacks the copy's probe.
    result = sphinx(project / "docs", project / "build", conf=project / "conf")
    assert result.returncode != 0
    assert f"differs from {project / 'src' / 'tinyformer'}" in result.stderr, result.stderr
    assert "the pages would show a stale library" in result.stderr
