"""Shared test configuration: hypothesis profiles, float64 helpers and the built book.

Profiles: ``ci`` (derandomized, so CI runs the same examples every time; selected by nox) and ``dev``
(random, more examples). Choose with ``HYPOTHESIS_PROFILE``.

``book`` builds the whole book once per test run, the way ``nox -s docs`` does but with every chapter
executed from scratch, into an empty execution cache of its own (:func:`fresh_cache`), so the chapters
execute side by side as in a clean ``nox -s docs``; every test of the pages, notebooks, PDF and wheel reads
that one build. With pytest-xdist (``nox -s tests`` runs two workers) the first worker that needs it builds
it under a file lock and the others wait and read it.
"""

import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from booktools import DOCS_FOLDERS, PROJECT_FILES, PROJECT_FOLDERS, fresh_cache
from filelock import FileLock
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]


# Any HTTP(S) request of a build goes to a closed port and fails, which -W turns into a failed build:
# the tests prove that the book builds offline (no remote inventories, images or scripts).
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
OFFLINE |= {key.lower(): value for key, value in OFFLINE.items()}


def sphinx_build(
    docs: Path, out: Path, *extra: str, conf: Path = ROOT / "conf", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Build the book in ``docs`` with the configuration in ``conf`` into ``out/html``, offline, as nox does.

    Doctrees go to ``out/doctrees``, beside the site rather than in it. ``env`` adds to the environment.
    """
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(conf), str(docs), str(out / "html")]
    command += ["-d", str(out / "doctrees"), "-W", "--keep-going", "-n", "-q", *extra]
    environment = os.environ | OFFLINE | (env or {})
    return subprocess.run(command, capture_output=True, text=True, cwd=conf.parent, env=environment, check=False)


def build_book(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run ``sphinx-build`` with the project's configuration into ``out/html``; return the finished process."""
    return sphinx_build(ROOT / "docs", out, *extra)


settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

DOUBLE = torch.float64


@pytest.fixture(scope="session")
def book(tmp_path_factory):
    """A clean build of the whole book, every chapter executed; the folder holding ``html/``.

    ``TINYFORMER_PREBUILT_BOOK=build`` (a folder holding ``html/``) uses that build instead, to iterate on
    the page tests without rebuilding; refused under CI, which always builds from scratch.
    """
    prebuilt = os.environ.get("TINYFORMER_PREBUILT_BOOK")
    if prebuilt:
        if os.environ.get("CI"):
            pytest.fail("TINYFORMER_PREBUILT_BOOK is set under CI, which must build the book from scratch")
        return Path(prebuilt).resolve()
    kept = os.environ.get("TINYFORMER_BOOK_DIR")
    if kept:
        # nox's tests and release sessions share one clean build (noxfile.py): the tests session empties the
        # folder and builds; the release session that follows reads that build when it was made from the
        # same sources (source_stamp), and builds it afresh otherwise.
        out = Path(kept).resolve()
    else:
        # one build for the whole run: pytest-xdist's workers (PYTEST_XDIST_WORKER) share their run's folder
        base = tmp_path_factory.getbasetemp()
        out = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "book"
    out.parent.mkdir(parents=True, exist_ok=True)
    # the first worker to need the book builds it; the others wait here, then read it
    with FileLock(str(out) + ".lock"):
        if (out / STAMP).is_file() and (out / STAMP).read_text() == source_stamp():
            return out
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        result = build_book(out, *fresh_cache(out))
        assert result.returncode == 0, f"the book build failed:\n{result.stdout}\n{result.stderr}"
        (out / STAMP).write_text(source_stamp())
    return out


#: The parameters by which a test names the one page it opens (tests/test_browser.py).
PAGE_PARAMETERS = ("page", "chapter", "page_name")


def pytest_collection_modifyitems(config, items):
    """The tests of a module that sets ``RUN_PAGE_BY_PAGE = True`` (tests/test_browser.py) run page by page: a
    stable sort on the page a test opens, tests that open no one page last, in the file's order. That module's
    ``visits`` fixture keeps the last few pages open, so each page is loaded once for every check that only
    reads it. Other modules keep their order; test ids are unchanged."""
    places = [i for i, item in enumerate(items) if getattr(getattr(item, "module", None), "RUN_PAGE_BY_PAGE", False)]

    def page_of(item) -> tuple[bool, str]:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        page = next((params[name] for name in PAGE_PARAMETERS if name in params), None)
        return page is None, page or ""

    for place, item in zip(places, sorted((items[i] for i in places), key=page_of), strict=True):
        items[place] = item


@pytest.fixture(scope="session", autouse=True)
def _book_first(request):
    """In a run that has book tests, every worker waits for the book before its first test, so the book is
    built on an otherwise quiet machine: its cells' times (tests/test_build.py) are those of a clean build,
    not of a build beside the library's tests."""
    if any(item.get_closest_marker("book") for item in request.session.items):
        request.getfixturevalue("book")


#: The file beside a kept build (``TINYFORMER_BOOK_DIR``) that names the sources it was built from.
STAMP = "sources.sha256"


def source_stamp() -> str:
    """SHA-256 over every file a build of the book reads (booktools.PROJECT_FOLDERS, PROJECT_FILES and
    DOCS_FOLDERS: path and bytes, sorted) and the Python that runs it: equal stamps, equal builds."""
    digest = hashlib.sha256(sys.version.encode())
    folders = (*PROJECT_FOLDERS, *DOCS_FOLDERS)
    files = [ROOT / name for name in PROJECT_FILES]
    files += [p for name in folders for p in (ROOT / name).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted(files):
        if ".egg-info" in path.as_posix() or ".hypothesis" in path.parts or ".pytest_cache" in path.parts:
            continue
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@pytest.fixture(scope="session")
def sphinx():
    """:func:`sphinx_build`, for tests that build books of their own (small temporary ones)."""
    return sphinx_build


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
