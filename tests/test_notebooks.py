"""The book outside the book: the wheel the site serves installs with pip in a new virtual environment,
and every chapter's notebook, downloaded from the site, runs there top to bottom in a plain Jupyter
kernel (no myst-nb, no Sphinx), and reads as Jupyter Markdown (no MyST markup left)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import urllib.request
import venv
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONSTRAINTS = ROOT / "conf" / "constraints.txt"
CHAPTERS = sorted(p.stem for p in DOCS.glob("*.md") if p.read_text().startswith("---\njupytext:"))

pytestmark = pytest.mark.book

# What MyST writes and Jupyter would show as literal text: roles, directive fences, label targets,
# substitutions.
MYST = {
    "role": re.compile(r"\{[a-z][\w:-]*\}`"),
    "directive": re.compile(r"^\s*(?:`{3,}|~{3,}|:{3,})\s*\{[\w:-]+\}", re.MULTILINE),
    "label target": re.compile(r"^\([\w-]+\)=\s*$", re.MULTILINE),
    "substitution": re.compile(r"\{\{[^}]*\}\}"),
}

# Executes a notebook with nbclient in the interpreter that runs this script (the new environment's):
# the kernel is that environment's python3 (ipykernel), in a folder that holds only the notebook.
EXECUTE = """
import sys, time, nbformat
from nbclient import NotebookClient
notebook = nbformat.read(sys.argv[1], as_version=4)
start = time.perf_counter()
NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
nbformat.write(notebook, sys.argv[1])
print(f"{time.perf_counter() - start:.1f}")
"""


def download(url: str, target: Path) -> Path:
    with urllib.request.urlopen(url, timeout=60) as response:
        target.write_bytes(response.read())
    return target


@pytest.fixture(scope="module")
def wheel(site, book, tmp_path_factory) -> Path:
    """The wheel, downloaded from the site's dist/ folder (the one the home page links)."""
    served = sorted((book / "html" / "dist").glob("tinyformer-*.whl"))
    assert len(served) == 1, f"the site serves {served}, not one wheel"
    return download(f"{site}dist/{served[0].name}", tmp_path_factory.mktemp("wheel") / served[0].name)


@pytest.fixture(scope="module")
def environment(wheel, tmp_path_factory) -> Path:
    """A new virtual environment with the wheel and its stated requirements (the ``hf`` extra), plus the
    kernel and the notebook runner; the versions those resolve to are pinned by conf/constraints.txt."""
    folder = tmp_path_factory.mktemp("venv") / "reader"
    venv.create(folder, with_pip=True)
    python = folder / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(CONSTRAINTS)]
    done = subprocess.run(
        [*install, f"tinyformer[hf] @ {wheel.as_uri()}", "ipykernel", "nbclient"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"pip could not install the wheel:\n{done.stdout}\n{done.stderr}"
    return python


@pytest.mark.release
def test_the_wheel_installs_the_library_with_its_presets_and_no_book_machinery(environment, wheel):
    probe = (
        "import importlib.util, json, tinyformer\n"
        "from tinyformer.labs.presets import PRESETS, preset\n"
        "print(json.dumps({'version': tinyformer.__version__, 'file': tinyformer.__file__,\n"
        "  'presets': {name: preset(name).read_text()[:1] for name in PRESETS},\n"
        "  'absent': [m for m in ('myst_nb', 'sphinx', 'jupyter_cache') if importlib.util.find_spec(m) is None]}))"
    )
    done = subprocess.run([str(environment), "-c", probe], capture_output=True, text=True, check=True, cwd=wheel.parent)
    found = json.loads(done.stdout)
    assert wheel.name.startswith(f"tinyformer-{found['version']}-")
    assert str(environment.parent.parent) in found["file"], "tinyformer was imported from outside the new environment"
    # the source tree's presets (tests run from the clone): each ships in the wheel and opens with its comment
    shipped = sorted(p.stem for p in (ROOT / "src" / "tinyformer" / "labs" / "presets").glob("*.toml"))
    assert found["presets"] == dict.fromkeys(shipped, "#"), "every preset ships and opens with its comment"
    assert found["absent"] == ["myst_nb", "sphinx", "jupyter_cache"]


@pytest.fixture(scope="module")
def downloaded(site, tmp_path_factory) -> dict[str, Path]:
    """Every chapter's notebook, downloaded from the site, each in a folder of its own."""
    folder = tmp_path_factory.mktemp("notebooks")
    paths = {}
    for chapter in CHAPTERS:
        (folder / chapter).mkdir()
        paths[chapter] = download(f"{site}_sources/{chapter}.ipynb", folder / chapter / f"{chapter}.ipynb")
    return paths


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_downloaded_notebook_is_jupyter_markdown(downloaded, book, chapter):
    notebook = nbformat.read(downloaded[chapter], as_version=4)
    nbformat.validate(notebook)
    markdown = [cell for cell in notebook.cells if cell.cell_type == "markdown"]
    assert markdown
    for cell in markdown:
        for kind, pattern in MYST.items():
            found = pattern.search(cell.source)
            assert found is None, f"{chapter}: MyST {kind} {found.group(0)!r} left in a markdown cell"
        for name in re.findall(r"\(attachment:([^)]+)\)", cell.source):
            assert name in cell.get("attachments", {}), f"{chapter}: image {name} is not attached"
    text = "\n".join(cell.source for cell in markdown)
    source = (DOCS / f"{chapter}.md").read_text()
    # the chapter's display formulas as $$ blocks, its listings as code, its exercises and solutions
    assert text.count("$$") >= 2 * len(re.findall(r"^```\{math\}", source, re.MULTILINE))
    assert text.count("<summary>Solution to Exercise") == len(re.findall(r"^:::\{solution\}", source, re.MULTILINE))
    assert len(re.findall(r"^```python", text, re.MULTILINE)) >= len(
        re.findall(r"^```\{literalinclude\}.*\.py$", source, re.MULTILINE)
    )
    assert "$ python3 -m tinyformer_exercises ID FILE" in text
    # every number in the page's tables, as the page writes it ("1.000", not "1")
    page = BeautifulSoup((book / "html" / f"{chapter}.html").read_text(), "html.parser")
    numbers = {" ".join(cell.get_text().split()) for cell in page.select("main table td")}
    numbers = {number for number in numbers if re.fullmatch(r"[-+−]?[\d.,]+", number)}
    cells = {cell.strip() for line in text.splitlines() if line.startswith("|") for cell in line.strip("|").split("|")}
    assert numbers <= cells, f"{chapter}: table numbers written otherwise: {sorted(numbers - cells)[:10]}"
    # the first markdown cell says what the notebook needs; sections carry the page's numbers
    assert '"tinyformer[hf] @ $SITE/tinyformer-' in markdown[0].source
    assert re.search(r"^# \d+\. ", text, re.MULTILINE), f"{chapter}: the chapter's heading has no number"
    assert re.search(r"^## \d+\.\d+\. ", text, re.MULTILINE), f"{chapter}: its sections have no numbers"
    # what the page removes is folded in Jupyter, and keeps no outputs (no answers in a student's face)
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if "remove-cell" in tags:
            assert cell.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}
            assert cell.outputs == []
        if "raises-exception" in tags:
            assert cell.source.startswith("try:\n"), f"{chapter}: a cell that raises on purpose would stop Run all"


@pytest.mark.release
def test_every_downloaded_notebook_runs_in_the_new_environment(environment, downloaded):
    """Two at a time (the machine's cores); each notebook in a folder that holds only itself."""

    def run(chapter: str) -> tuple[str, subprocess.CompletedProcess]:
        path = downloaded[chapter]
        command = [str(environment), "-c", EXECUTE, str(path), str(path.parent)]
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "JUPYTER", "IPYTHON"))}
        return chapter, subprocess.run(command, capture_output=True, text=True, env=env, cwd=path.parent, check=False)

    slow_first = sorted(CHAPTERS, key=lambda c: c not in {"long-context", "beyond-sinusoids", "decoder"})
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        results = dict(pool.map(run, slow_first))
    failed = {chapter: done.stderr[-3000:] for chapter, done in results.items() if done.returncode != 0}
    assert not failed, f"notebooks that stopped outside the book: {sorted(failed)}\n" + "\n".join(
        f"--- {chapter}\n{tail}" for chapter, tail in failed.items()
    )
    for chapter in CHAPTERS:
        executed = nbformat.read(downloaded[chapter], as_version=4)
        # the one cell that shows an error on purpose is tagged raises-exception, as in the book
        errors = [
            output["evalue"]
            for cell in executed.cells
            if cell.cell_type == "code" and "raises-exception" not in cell.metadata.get("tags", [])
            for output in cell.outputs
            if output.output_type == "error"
        ]
        assert errors == [], f"{chapter}: {errors}"
    print({chapter: f"{done.stdout.strip()} s" for chapter, done in results.items()}, file=sys.stderr)
