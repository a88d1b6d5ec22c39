"""Sessions of the tinyformer book: ``docs``, ``pdf``, ``tests``, ``release``, ``lint``, ``serve``, ``bench``, ``buildtime``, ``reproducible``, ``check``, ``new-chapter``, ``templates``.

Every session installs with ``conf/constraints.txt``, which pins every package (torch 2.13.0, whose
CPU build the machines carry; an unpinned torch resolves to a multi-GB CUDA build).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox
import nox.command

ROOT = Path(__file__).parent
CONSTRAINTS = ("-c", str(ROOT / "conf" / "constraints.txt"))
SPHINX_ARGS = (
    "-b",
    "html",
    "-c",
    "conf",
    "-d",
    "build/doctrees",
    "docs",
    "build/html",
    "-W",
    "--keep-going",
    "-n",
    "-q",
)

# The PDF edition: the same configuration, doctrees and execution cache as the site (SPHINX_ARGS), so a
# PDF build after `nox -s docs` executes nothing.
LATEX_ARGS = ("-b", "latex", *SPHINX_ARGS[2:7], "build/latex", *SPHINX_ARGS[8:])
# Debian's TeX Live packages that `nox -s pdf` needs (README; .ci/run installs them when missing).
TEX_PACKAGES = (
    "texlive-xetex texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended "
    "fonts-freefont-otf tex-gyre lmodern latexmk xindy poppler-utils"
)

# KaTeX typesets the formulas at build time under Node.js, and its stylesheet and fonts are served from
# the book (conf.py, "Math"). The npm package is pinned in conf/katex/package-lock.json and installed
# into build/katex, outside conf/ (every file in conf/ is part of the execution cache key).
KATEX_LOCK = ROOT / "conf" / "katex" / "package-lock.json"
KATEX_DIR = ROOT / "build" / "katex"


def _latex_errors(log: str) -> list[str]:
    """conf/latex/errors.py's ``latex_errors`` (nox's own environment has no Sphinx, so it is loaded by path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("latex_errors", ROOT / "conf" / "latex" / "errors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.latex_errors(log)


nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests"]


def install(session: nox.Session, *extras: str) -> None:
    """Install tinyformer (not editable: tests and chapters run the installed package) with extras."""
    # setuptools builds the wheel in build/lib and never empties it, so a module deleted or moved in
    # src/ would still be installed from there (setuptools issue 4394's family; pip issue 1953); the
    # chapters' stale-library check (conf/_ext/tinyformer_build.py) would then refuse to build.
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
    session.install(*CONSTRAINTS, "pip")
    session.install(*CONSTRAINTS, f".[{','.join(extras)}]" if extras else ".")
    if "docs" in extras:
        install_katex(session)


def install_katex(session: nox.Session) -> None:
    """``npm ci`` of conf/katex into build/katex, unless that lockfile is installed there already."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        session.error(
            f"{', '.join(missing)} not found; the formulas are typeset with Node.js: apt-get install -y nodejs npm"
        )
    installed = KATEX_DIR / "node_modules" / ".package-lock.json"
    if installed.is_file() and (KATEX_DIR / "package-lock.json").read_bytes() == KATEX_LOCK.read_bytes():
        return
    KATEX_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(KATEX_LOCK.parent / name, KATEX_DIR / name)
    session.run("npm", "ci", "--prefix", str(KATEX_DIR), "--ignore-scripts", "--no-audit", "--no-fund", external=True)


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Build the book into build/html, executing every chapter (cached; see README). ``-j N`` is refused."""
    install(session, "docs")
    session.run("sphinx-build", *SPHINX_ARGS, *session.posargs)
    session.log(f"Open {ROOT / 'build' / 'html' / 'index.html'}")


# XeLaTeX stops at the first error instead of waiting for an answer on the terminal.
LATEXOPTS = "-interaction=nonstopmode -halt-on-error"


def source_date_epoch() -> str:
    """The build date as conf.py takes it: ``$SOURCE_DATE_EPOCH``, else the last commit's time."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return os.environ["SOURCE_DATE_EPOCH"]
    result = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip().isdigit() else "0"


@nox.session(python="3.11")
def pdf(session: nox.Session) -> None:
    """Build the PDF edition into build/pdf/tinyformer.pdf (Sphinx's LaTeX builder, latexmk, XeLaTeX).

    Same configuration, doctrees and execution cache as ``docs``: after ``nox -s docs`` nothing executes
    again. A later ``nox -s docs`` puts the PDF in the site and its download menu. Needs Debian's TeX Live
    (TEX_PACKAGES; README). The PDF's dates are SOURCE_DATE_EPOCH's, so two builds of one commit agree.
    """
    missing = [tool for tool in ("xelatex", "latexmk", "xindy") if shutil.which(tool) is None]
    if missing:
        session.error(f"{', '.join(missing)} not found; install TeX Live: apt-get install -y {TEX_PACKAGES}")
    install(session, "docs")
    session.run("sphinx-build", *LATEX_ARGS, *session.posargs)
    env = {"SOURCE_DATE_EPOCH": source_date_epoch(), "FORCE_SOURCE_DATE": "1", "LATEXOPTS": LATEXOPTS}
    try:
        session.run("make", "-C", "build/latex", "all-pdf", "LATEXMKOPTS=-silent", external=True, env=env)
    except nox.command.CommandFailed:
        # latexmk's summary names no error: print the log's (a missing character, for one)
        log = ROOT / "build" / "latex" / "tinyformer.log"
        errors = _latex_errors(log.read_text(errors="replace")) if log.is_file() else []
        session.error("XeLaTeX stopped: " + ("; ".join(errors) or f"see {log}"))
    target = ROOT / "build" / "pdf" / "tinyformer.pdf"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "build" / "latex" / "tinyformer.pdf", target)
    session.log(f"Wrote {target}")


@nox.session(python="3.11")
def serve(session: nox.Session) -> None:
    """Build the book, serve it on http://127.0.0.1:8000 and rebuild on every save (sphinx-autobuild).

    Watches src/ and conf/ too: the chapters run the library, so a library change re-executes them.
    Pass ``-- --port N`` to use another port.
    """
    install(session, "docs", "serve")
    session.run(
        "sphinx-autobuild",
        *SPHINX_ARGS,
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--watch",
        "src",
        "--watch",
        "conf",
        "--re-ignore",
        r"\.ipynb_checkpoints",
        *session.posargs,
    )


# Two pytest-xdist workers, each test file on one worker (a file's module fixtures, such as the browser or the
# PDF built into the book's folder, are then made once): both wait for the book's build (tests/conftest.py), then
# the browser tests run beside the rest. ``-- -n 0`` runs them in one process.
XDIST = ("-n", "2", "--dist", "loadfile")

# The one clean build of the book that the tests session makes and the release session reads
# (tests/conftest.py, the ``book`` fixture): every chapter executes once per ``nox -s tests``.
TEST_BOOK = ROOT / "build" / "test-book"


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """The library's tests against PyTorch, then the book's tests, which read one clean build of the book
    (build/test-book; every chapter executed once). The checks that need a second clean build or a new
    virtual environment are ``nox -s release``'s."""
    install(session, "docs", "test")
    shutil.rmtree(TEST_BOOK, ignore_errors=True)
    env = {"HYPOTHESIS_PROFILE": "ci", "TINYFORMER_BOOK_DIR": str(TEST_BOOK)}
    # the slowest tests are named at the end of every run (issue 35: the run's budget is 20 minutes)
    session.run("pytest", "-m", "not release and not screenshots", *XDIST, "--durations=25", *session.posargs, env=env)


@nox.session(python="3.11")
def release(session: nox.Session) -> None:
    """The checks an edition needs beyond ``nox -s tests`` (the tests marked ``release``): a second clean build
    byte-identical to the first, every downloaded notebook run from the served wheel in a new virtual
    environment, the PDF compiled again to the same bytes, the site rendered again from a copy of the project
    with a PDF in it. Reads ``nox -s tests``'s build of the book and its PDF when they were made from the same
    sources, and builds them otherwise; ``.ci/run`` runs it after the tests."""
    install(session, "docs", "test")
    env = {"HYPOTHESIS_PROFILE": "ci", "TINYFORMER_BOOK_DIR": str(TEST_BOOK)}
    session.run("pytest", "-m", "release", *XDIST, "--durations=10", *session.posargs, env=env)


@nox.session(python="3.11")
def screenshots(session: nox.Session) -> None:
    """Full-page screenshots of every page in both themes, at 1280 px and (chapters) 390 px, for a person to look
    at: build/screenshots/. Reads ``nox -s tests``'s build of the book when it was made from the same sources."""
    install(session, "docs", "test")
    env = {"TINYFORMER_BOOK_DIR": str(TEST_BOOK)}
    session.run("pytest", "tests/test_browser.py", "-m", "screenshots", *session.posargs, env=env)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """Ruff, with the rule set in pyproject.toml."""
    session.install(*CONSTRAINTS, "ruff")
    session.run("ruff", "check", "src", "tests", "conf", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "conf", "noxfile.py")


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Speed (inference, forward + backward, one training step) and memory against PyTorch, cached decoding against
    recomputation and Hugging Face's generate, as ratios; build/bench/."""
    install(session)
    session.install(*CONSTRAINTS, "transformers")  # the decoding section's reference (tests/bench_decoding.py)
    session.run("python", "tests/bench_attention.py", *session.posargs)


@nox.session(python="3.11")
def buildtime(session: nox.Session) -> None:
    """Time a clean build, a no-change rebuild and a one-chapter edit; check what executed; build/buildtime.json."""
    install(session, "docs")
    session.run("python", "tests/buildtime.py", *session.posargs)


@nox.session(python="3.11")
def kernels(session: nox.Session) -> None:
    """Execute the chapters that train models with other instruction sets' kernels (AVX2, SSE) and report every
    claim that fails with them: a claim must not hold only on the machine that wrote it; build/claims_kernels.json."""
    install(session, "docs")
    session.run("python", "tests/claims_kernels.py", *session.posargs)


@nox.session(python="3.11")
def reproducible(session: nox.Session) -> None:
    """Build the book twice from scratch and name every file that differs (a test of tests/test_build.py)."""
    install(session, "docs", "test")
    session.run("pytest", "tests/test_build.py", "-m", "release", "-k", "byte_identical", *session.posargs)


@nox.session(python="3.11")
def check(session: nox.Session) -> None:
    """Check a coding exercise: ``nox -s check -- --list``, then ``nox -s check -- ID FILE`` (exit 0: all pass).

    Runs offline and needs no built book. A relative FILE is taken from the folder nox was called from.
    """
    install(session)
    args = list(session.posargs)
    if len(args) == 2 and not args[0].startswith("-"):
        args[1] = str(Path(session.invoked_from, args[1]))
    session.run("python", "-m", "tinyformer_exercises", *args)


def _authoring():
    """``tinyformer_exercises.authoring``, loaded by path (it needs the standard library only, and nox's own
    environment has no tinyformer)."""
    import importlib.util

    path = ROOT / "src" / "tinyformer_exercises" / "authoring.py"
    spec = importlib.util.spec_from_file_location("tinyformer_exercises_authoring", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@nox.session(name="new-chapter", python="3.11", venv_backend="none")
def new_chapter(session: nox.Session) -> None:
    """Write a new chapter that builds and passes the tests as it stands: ``nox -s new-chapter -- SLUG "Title"``.

    The page, its library module, a checked coding exercise with its solution and two wrong solutions, the
    chapter's tests, its table-of-contents entry and a session in the lecturers' plan (tests/scaffold.py;
    the book's page "Contributing a chapter" says what an author changes next).
    """
    import importlib.util

    if len(session.posargs) != 2:
        session.error('usage: nox -s new-chapter -- SLUG "Title" (e.g. induction-heads "Induction heads")')
    spec = importlib.util.spec_from_file_location("tinyformer_scaffold", ROOT / "tests" / "scaffold.py")
    scaffold = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scaffold)
    if scaffold.main([*session.posargs, "--root", str(ROOT)]) != 0:
        session.error("nothing was written")


@nox.session(python="3.11", venv_backend="none")
def templates(session: nox.Session) -> None:
    """Write the exercises package's data from the book's sources: the chapters' numbers and titles
    (``chapters.json``, from docs/index.md's table of contents and each page's heading) and the coding
    exercises' templates from their reference solutions (``tests/exercise_solutions/``, the answer between
    ``# BEGIN SOLUTION`` and ``# END SOLUTION``; ``tinyformer_exercises.authoring``).

    Needs no environment of its own: the authoring module and the registry use the standard library only,
    and are loaded by path.
    """
    chapters_changed, changed, count = _authoring().write_exercise_files(ROOT)
    session.log(f"chapters.json {'written anew' if chapters_changed else 'unchanged'}")
    session.log(f"{count} templates, {len(changed)} written anew: {', '.join(changed) or 'none'}")
