"""The book outside the book: the wheel the site serves installs with pip in a new virtual environment,
and every chapter's notebook, downloaded from the site, runs there top to bottom in a plain Jupyter
kernel (no myst-nb, no Sphinx), and reads as Jupyter Markdown (no MyST markup left)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
import venv
from pathlib import Path

import nbformat
import pytest
from booktools import parsed, slow_chapters

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
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


def figure_names(chapter: str) -> set[str]:
    """The names of the figures the chapter's page pastes (``{glue:figure}``)."""
    return set(re.findall(r"^[`:]{3,}\{glue:figure\} (\S+)", (DOCS / f"{chapter}.md").read_text(), re.MULTILINE))


def glues(cell, name: str) -> bool:
    """Whether the code ``cell`` glues the value called ``name``."""
    return cell.cell_type == "code" and re.search(rf"glue\(\s*[\"']{re.escape(name)}[\"']", cell.source) is not None


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


def install_command(notebook: Path, site_dist: str) -> list[str]:
    """The pip command of the notebook's first cell that installs tinyformer with the served constraints,
    with ``$SITE`` set to ``site_dist`` (the first cell's torch line needs PyTorch's index, which the test
    machine cannot reach; the torch it installs is the version the constraints pin)."""
    first = next(cell for cell in nbformat.read(notebook, as_version=4).cells if cell.cell_type == "markdown")
    lines = first.source.replace("\\\n", " ").splitlines()
    command = next(line for line in lines if line.startswith("$ python3 -m pip install -c "))
    return shlex.split(command.removeprefix("$ python3 -m pip install ").replace("$SITE", site_dist))


@pytest.fixture(scope="module")
def environment(site, downloaded, wheel, tmp_path_factory) -> Path:
    """A new virtual environment made by the install line of a downloaded notebook's first cell (the wheel
    and its ``hf`` extra, with the constraints file the site serves), plus the kernel and the notebook
    runner."""
    folder = tmp_path_factory.mktemp("venv") / "reader"
    venv.create(folder, with_pip=True)
    python = folder / "bin" / "python"
    options, constraints, requirement = install_command(downloaded["attention"], f"{site}dist")
    assert (options, constraints) == ("-c", f"{site}dist/constraints.txt")
    assert requirement == f"tinyformer[hf] @ {site}dist/{wheel.name}"
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", constraints]
    done = subprocess.run([*install, requirement, "ipykernel", "nbclient"], capture_output=True, text=True, check=False)
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
    page = parsed(book / "html" / f"{chapter}.html")
    numbers = {" ".join(cell.get_text().split()) for cell in page.select("main table td")}
    numbers = {number for number in numbers if re.fullmatch(r"[-+−]?[\d.,]+", number)}
    cells = {cell.strip() for line in text.splitlines() if line.startswith("|") for cell in line.strip("|").split("|")}
    assert numbers <= cells, f"{chapter}: table numbers written otherwise: {sorted(numbers - cells)[:10]}"
    # the first markdown cell says what the notebook needs; sections carry the page's numbers
    assert '"tinyformer[hf] @ $SITE/tinyformer-' in markdown[0].source
    assert re.search(r"^# \d+\. ", text, re.MULTILINE), f"{chapter}: the chapter's heading has no number"
    assert re.search(r"^## \d+\.\d+\. ", text, re.MULTILINE), f"{chapter}: its sections have no numbers"
    # the first cell also installs as the book was built (the CPU torch, the served constraints) and says
    # how long the notebook runs, the bound the chapter states
    minutes = int(re.search(r"^notebook_minutes: (\d+)$", source, re.MULTILINE)[1])
    assert "--index-url https://download.pytorch.org/whl/cpu" in markdown[0].source
    assert "$ python3 -m pip install -c $SITE/constraints.txt" in markdown[0].source
    said = "under a minute" if minutes == 1 else f"under {minutes} minutes"
    assert f"in {said} on two cores" in " ".join(markdown[0].source.split())
    # what the page removes is folded in Jupyter, and keeps no outputs (no answers in a student's face);
    # a cell that glues a figure shows its outputs, so that run again it draws the figure in view
    figures = figure_names(chapter)
    glued = set()
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        draws = {name for name in figures if glues(cell, name)}
        glued |= draws
        if "remove-cell" in tags:
            folded = {"source_hidden": True} if draws else {"source_hidden": True, "outputs_hidden": True}
            assert cell.metadata["jupyter"] == folded, f"{chapter}: {cell.source[:80]}"
            assert cell.outputs == []
        if "raises-exception" in tags:
            assert cell.source.startswith("try:\n"), f"{chapter}: a cell that raises on purpose would stop Run all"
    assert glued == figures, f"{chapter}: figures no cell glues: {sorted(figures - glued)}"


#: Notebooks run side by side by the test below: one per core, at most two.
NOTEBOOKS_AT_ONCE = max(1, min(2, os.cpu_count() or 1))


@pytest.mark.release
def test_every_downloaded_notebook_runs_in_the_new_environment(environment, downloaded):
    """Two at a time (the machine's cores), the slowest first; each notebook in a folder that holds only itself."""

    def run(chapter: str) -> tuple[str, subprocess.CompletedProcess]:
        path = downloaded[chapter]
        command = [str(environment), "-c", EXECUTE, str(path), str(path.parent)]
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "JUPYTER", "IPYTHON"))}
        # a lab's processes (tinyformer.tools.jobs.default_workers): the notebook's share of the cores
        env["TINYFORMER_WORKERS"] = str(max(1, (os.cpu_count() or 1) // NOTEBOOKS_AT_ONCE))
        return chapter, subprocess.run(command, capture_output=True, text=True, env=env, cwd=path.parent, check=False)

    slow = slow_chapters()  # started first, as the build starts them
    slow_first = sorted(CHAPTERS, key=lambda c: slow.index(c) if c in slow else len(slow))
    with concurrent.futures.ThreadPoolExecutor(max_workers=NOTEBOOKS_AT_ONCE) as pool:
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
        # every figure the page pastes is drawn again where the reader ran its cell
        for name in figure_names(chapter):
            cells = [cell for cell in executed.cells if glues(cell, name)]
            assert any("image/png" in output.get("data", {}) for cell in cells for output in cell.outputs), (
                f"{chapter}: figure {name} was not drawn when its cell ran outside the book"
            )
    print({chapter: f"{done.stdout.strip()} s" for chapter, done in results.items()}, file=sys.stderr)


@pytest.mark.parametrize("chapter", CHAPTERS[:1])
def test_the_setup_cell_installs_what_the_first_cell_says_where_tinyformer_is_missing(downloaded, chapter):
    """The code cell after the first markdown cell (Colab, or a kernel without tinyformer) runs the first
    cell's two pip commands, with the same torch, index, constraints and wheel; where tinyformer imports it
    runs nothing. Run here with pip replaced by a recorder: the test machine cannot reach PyTorch's index."""
    notebook = nbformat.read(downloaded[chapter], as_version=4)
    first = next(i for i, cell in enumerate(notebook.cells) if cell.cell_type == "markdown")
    setup = notebook.cells[first + 1]
    assert setup.cell_type == "code"
    assert setup.metadata["tags"] == ["tinyformer-setup"]
    lines = notebook.cells[first].source.replace("\\\n", " ").splitlines()
    site = next(line for line in lines if line.startswith("$ SITE=")).removeprefix("$ SITE=")
    said = [
        shlex.split(line.removeprefix("$ python3 -m pip install ").replace("$SITE", site))
        for line in lines
        if line.startswith("$ python3 -m pip install")
    ]
    assert len(said) == 2

    def ran(find_spec):
        commands = []
        fake_subprocess = type(sys)("subprocess")
        fake_subprocess.run = lambda command, check: commands.append(command[5:])  # after python -m pip install -q
        fake_util = type(sys)("importlib.util")
        fake_util.find_spec = find_spec
        source = setup.source.replace("import importlib.util\n", "").replace("import subprocess\n", "")
        exec(source, {"importlib": type("I", (), {"util": fake_util}), "subprocess": fake_subprocess, "sys": sys})
        return commands

    assert ran(lambda name: None) == said
    assert ran(lambda name: object()) == []
