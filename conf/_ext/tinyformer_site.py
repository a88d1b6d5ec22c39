"""The reader's side of the site that Sphinx and the theme do not configure by option alone.

- An author-year bibliography: pybtex ships numeric and alphabetic labels only, so the list would
  number its entries [1]-[8] while the text cites "Vaswani et al. [2017]". :class:`AuthorYearStyle`
  is pybtex's ``plain`` style with author-year labels, sorted by author and year, registered as a
  pybtex plugin (the way sphinxcontrib-bibtex documents custom styles).
- Downloads that download: the theme's download menu links the ``.md`` source and the notebook with
  ``target="_blank"``, so the browser opens the Markdown as text in a tab. Each gets a ``download``
  attribute (``conf/_templates/macros/buttons.html`` renders it).
- Pre-compressed copies: every text file of the site also gets a ``.gz`` beside it, which hosts that
  serve pre-compressed files (nginx ``gzip_static``, Caddy ``precompressed``, Netlify and others) send
  to browsers that accept gzip. Written with a zero timestamp and no file name, so two builds of one
  commit stay byte-identical.
- Lighter pages: images load when scrolled near (``loading="lazy"``).
- Formulas typeset at build time by KaTeX (conf.py): :func:`check_katex` refuses a build without the
  pinned KaTeX, and a formula KaTeX cannot typeset is a build warning (sphinxcontrib-katex's
  prerendering would otherwise print it in red on the page and carry on).
- Inline formulas keep touching punctuation on their line (:func:`_math_keeps_its_punctuation`).
- One viewport meta tag (with ``conf/_templates/pages/layout.html``).
- Figures a phone can read: on a narrow screen a figure is as wide as its smallest text needs to be 9
  CSS pixels (the kernel writes that text's size into the PNG, ``conf/kernel_figures.py``), and scrolls
  sideways in its box when that is wider than the screen (:func:`_phone_widths`).
- The library as a wheel the site serves (:func:`build_wheel`), so a reader installs it with pip.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from html import unescape
from math import ceil
from pathlib import Path

from docutils import nodes
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.util import logging

AUTHOR_YEAR_STYLE = "tinyformer_author_year"
COMPRESSIBLE = {".html", ".js", ".css", ".svg", ".json", ".txt", ".xml", ".ipynb", ".md", ".inv", ".map"}
# Below this size gzip saves too little to be worth a second file.
COMPRESS_MIN_BYTES = 1024


def _last_name(person) -> str:
    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels "Vaswani et al., 2017", "Press and Smith, 2022", "Shaw, 2018"; "2017a", "2017b" on a tie."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [self.format_label(entry) for entry in entries]
        counts = Counter(labels)
        seen: Counter = Counter()
        for label in labels:
            if counts[label] > 1:
                yield f"{label}{'abcdefghijklmnopqrstuvwxyz'[seen[label]]}"
                seen[label] += 1
            else:
                yield label

    @staticmethod
    def format_label(entry) -> str:
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [_last_name(person) for person in people]
        if not names:
            authors = entry.fields.get("organization") or entry.key
        elif len(names) == 1:
            authors = names[0]
        elif len(names) == 2:
            authors = f"{names[0]} and {names[1]}"
        else:
            authors = f"{names[0]} et al."
        return f"{authors}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearStyle(PlainStyle):
    """pybtex's ``plain`` entries, labelled by author and year and sorted by author, year and title."""

    default_label_style = AUTHOR_YEAR_STYLE
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", AUTHOR_YEAR_STYLE, AuthorYearLabelStyle, force=True)
register_plugin("pybtex.style.formatting", AUTHOR_YEAR_STYLE, AuthorYearStyle, force=True)


def _downloads_download(app, pagename, templatename, context, doctree) -> None:
    """Mark the download menu's file links (source, notebook) with ``download``: saved, not opened."""
    for button in context.get("header_buttons", []):
        for item in button.get("buttons", []):
            if item.get("type") == "link" and item.get("url", "").split("/")[-2:-1] == ["_sources"]:
                item["download"] = item["url"].rsplit("/", 1)[-1]


# docutils' HTML5 writer adds this to every page's meta tags, beside the one Sphinx's layout writes.
DOCUTILS_VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1" />\n'


def _one_viewport_tag(app, pagename, templatename, context, doctree) -> None:
    """Drop docutils' copy of the viewport tag (Sphinx's layout has its own; see conf/_templates/layout.html)."""
    if "metatags" in context:
        context["metatags"] = context["metatags"].replace(DOCUTILS_VIEWPORT, "")


def compress_site(outdir: Path) -> list[Path]:
    """Write ``name.gz`` beside every text file of ``outdir`` of at least 1 KiB; returns the files written."""
    written = []
    for path in sorted(outdir.rglob("*")):
        if not path.is_file() or path.suffix not in COMPRESSIBLE or path.stat().st_size < COMPRESS_MIN_BYTES:
            continue
        target = path.with_name(path.name + ".gz")
        with target.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
            out.write(path.read_bytes())
        written.append(target)
    return written


def _compress_on_finish(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        compress_site(Path(app.outdir))


logger = logging.getLogger(__name__)


def check_katex(dist: Path, lockfile: Path) -> None:
    """Refuse to build without Node.js or without the KaTeX that ``lockfile`` pins, installed at ``dist``.

    Raises:
        RuntimeError: ``node`` is not on the path, or KaTeX is missing or of another version.
    """
    pinned = json.loads(lockfile.read_text())["packages"]["node_modules/katex"]["version"]
    manifest = dist.parent / "package.json"
    installed = json.loads(manifest.read_text())["version"] if manifest.is_file() else None
    how = f"`nox -s docs` installs it (npm ci of {lockfile.parent} into {dist.parents[2]})"
    if shutil.which("node") is None:
        raise RuntimeError(f"Node.js (`node`) is not on the path; the formulas are typeset with it. {how}.")
    if installed != pinned:
        raise RuntimeError(f"KaTeX {pinned} is not installed at {dist} (found: {installed}); {how}.")


# sphinxcontrib-katex's prerendering asks KaTeX with throwOnError false: a formula it cannot parse
# comes back as <span class="katex-error" title="ParseError: ..." ...>the TeX</span>, and a command it
# does not know is typeset as its own name in KaTeX's error colour (MathML: <mstyle mathcolor="#cc0000">
# <mtext>\\name</mtext>) inside a formula that otherwise renders.
KATEX_ERROR = re.compile(r'<span class="katex-error" title="([^"]*)"[^>]*>(.*?)</span>', re.DOTALL)
KATEX_UNKNOWN = re.compile(
    r'<mstyle mathcolor="#cc0000"><mtext>(\\[^<]*)</mtext>.*?<annotation encoding="application/x-tex">(.*?)</annotation>',
    re.DOTALL,
)


def _math_errors(app, pagename, templatename, context, doctree) -> None:
    """A formula KaTeX could not typeset is a warning (an error under ``-W``), not red text on a page."""
    body = context.get("body", "")
    for title, tex in KATEX_ERROR.findall(body):
        logger.warning(f'KaTeX could not typeset "{unescape(tex)}": {unescape(title)}', location=pagename)
    for command, tex in KATEX_UNKNOWN.findall(body):
        logger.warning(f'KaTeX could not typeset "{unescape(tex)}": unknown command {command}', location=pagename)


# Punctuation that may not start a line after a formula, and brackets that may not end one before it.
CLOSING = re.compile(r"^[,.;:!?)\]\u2019\u201d]+")
OPENING = re.compile(r"[(\[\u2018\u201c]+$")


def _math_keeps_its_punctuation(app, doctree, docname) -> None:
    """An inline formula and the punctuation touching it stay on one line (HTML only).

    A typeset formula is an atomic box, and browsers break a line between it and a comma after it, so
    on a phone lines began with ", v_t" or ended with "(". The formula and its touching punctuation
    are wrapped in ``<span class="tinyformer-nowrap">`` (``white-space: nowrap``, conf/tinyformer.css).
    """
    if app.builder.format != "html":
        return
    for math in list(doctree.findall(nodes.math)):
        parent = math.parent
        index = parent.index(math)
        before = parent[index - 1] if index > 0 else None
        after = parent[index + 1] if index + 1 < len(parent) else None
        lead = OPENING.search(str(before)) if isinstance(before, nodes.Text) else None
        trail = CLOSING.match(str(after)) if isinstance(after, nodes.Text) else None
        if not (lead or trail):
            continue
        group = nodes.inline(classes=["tinyformer-nowrap"])
        if trail:
            parent[index + 1] = nodes.Text(str(after)[trail.end() :])
        if lead:
            parent[index - 1] = nodes.Text(str(before)[: lead.start()])
            group += nodes.Text(lead.group())
        parent[index] = group
        group += math
        if trail:
            group += nodes.Text(trail.group())


#: The smallest text a figure may show on a phone, in CSS pixels.
PHONE_TEXT_PX = 9
#: A figure's PNG describes itself so (conf/kernel_figures.py), followed by its smallest text in points.
FIGURE_DESCRIPTION = re.compile(r"tinyformer figure; smallest text (?P<pt>[\d.]+) pt")


def phone_width(png: Path, css_width: float) -> int | None:
    """The width in CSS pixels at which the figure in ``png`` (shown ``css_width`` wide on a wide screen,
    its size at 100 pixels an inch) shows its smallest text at :data:`PHONE_TEXT_PX`; None for a PNG
    that does not say (not a chapter's figure)."""
    from PIL import Image

    with Image.open(png) as image:
        found = FIGURE_DESCRIPTION.fullmatch(image.text.get("Description", ""))
    if found is None or float(found["pt"]) <= 0:
        return None
    text_px = float(found["pt"]) * 100 / 72  # at the figure's own size (figure.dpi 100)
    return ceil(css_width * PHONE_TEXT_PX / text_px)


def _phone_widths(app, pagename, templatename, context, doctree) -> None:
    """Each figure's ``<img>`` carries its phone width (:func:`phone_width`) as the CSS custom property
    ``--tinyformer-phone-width``, which conf/tinyformer.css applies on narrow screens."""
    if doctree is None or "body" not in context:
        return
    body = context["body"]
    for image in doctree.findall(nodes.image):
        uri = image.get("candidates", {}).get("*", "")
        if not uri.endswith(".png") or "width" not in image:
            continue
        width = phone_width(Path(app.srcdir) / uri, float(re.match(r"[\d.]+", str(image["width"])).group()))
        if width is None:
            continue
        name = re.escape(Path(uri).name)
        body, found = re.subn(
            rf'<img (?=[^>]*src="[^"]*_images/{name}")',
            f'<img style="--tinyformer-phone-width: {width}px" ',
            body,
        )
        if not found:
            raise RuntimeError(f"{pagename}: the figure {Path(uri).name} is not on the page")
    context["body"] = body


def _sitemap_lists_every_page(app, exception) -> None:
    """Before sphinx-sitemap writes ``sitemap.xml``, add every page this build did not write.

    sphinx-sitemap 2.9.0 lists the pages that reach ``html-page-context``, which on an incremental
    build are only the pages written again: after editing one chapter, ``sitemap.xml`` listed that
    chapter alone. A build that wrote no page leaves the last ``sitemap.xml`` as it was (sphinx-sitemap
    writes none), so it is left alone here too.
    """
    links = getattr(app, "sitemap_links", None)
    if exception is not None or links is None or app.builder.format != "html":
        return
    from queue import Empty

    from sphinx_sitemap import is_excluded

    written = {}
    while True:
        try:
            link, last_updated = links.get_nowait()
        except Empty:
            break
        written[link] = last_updated
    if not written:
        return
    suffix = app.config.html_file_suffix or ".html"
    for docname in app.env.found_docs:
        link = docname + suffix
        if not is_excluded(link, app.config.sitemap_excludes):
            written.setdefault(link, None)
    for link in sorted(written):
        links.put((link, written[link]))


def setup(app) -> None:
    # Before sphinx-sitemap's own build-finished handler (priority 500).
    app.connect("build-finished", _sitemap_lists_every_page, priority=400)
    app.connect("html-page-context", _phone_widths)
    app.connect("html-page-context", _math_errors)
    app.connect("doctree-resolved", _math_keeps_its_punctuation)
    # After sphinx-book-theme builds its header buttons (priority 501).
    app.connect("html-page-context", _downloads_download, priority=600)
    app.connect("html-page-context", _one_viewport_tag)
    app.connect("doctree-resolved", _lazy_images)
    app.connect("build-finished", _compress_on_finish, priority=900)


def robust_katex_start(katex) -> None:
    """Make sphinxcontrib-katex's start of its Node.js server wait for the
    server to listen, and end the server on any failure.

    sphinxcontrib-katex 0.9.11 connects as soon as the socket file exists,
    which is after the server's ``bind`` but may be before its ``listen``:
    on a loaded machine 3 builds in 20 crashed with ConnectionRefusedError.
    A failed start left the server running, holding the build's stderr, so
    a caller reading the build's output waited for ever. Here the connect
    is retried until ``katex.STARTUP_TIMEOUT``; a server that exits, a
    timeout or any other error ends the server (terminate, then kill) and
    removes its folder before the error is raised. ``katex`` is the
    ``sphinxcontrib.katex`` module."""
    import socket
    import subprocess
    import time

    server_class = katex.KaTeXServer

    def end(process: subprocess.Popen, rundir: Path) -> None:
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(rundir, ignore_errors=True)

    def connect(cls, rundir: Path, timeout: float, *, unix: bool):
        host, port = "127.0.0.1", None
        socket_path = rundir / "katex.sock"
        if unix:
            command = cls.build_command(socket=socket_path)
        else:
            port = katex.random_free_port()
            command = cls.build_command(port=port)
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=rundir)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if process.poll() is not None:
                    raise katex.KaTeXError(
                        f"the KaTeX server ({command[0]}) exited with status {process.returncode} before it listened"
                    )
                if not unix or socket_path.is_socket():
                    sock = socket.socket(socket.AF_UNIX if unix else socket.AF_INET, socket.SOCK_STREAM)
                    try:
                        sock.settimeout(max(deadline - time.monotonic(), 0.01))
                        sock.connect(str(socket_path) if unix else (host, port))
                        sock.settimeout(None)
                        return process, sock
                    except (TimeoutError, ConnectionRefusedError, FileNotFoundError):
                        # bound but not listening yet, or gone: try again
                        sock.close()
                if time.monotonic() > deadline:
                    raise cls.timeout_error(timeout)
                time.sleep(0.01)
        except BaseException:
            end(process, rundir)
            raise

    server_class.start_server_process = classmethod(
        lambda cls, rundir, timeout: connect(cls, rundir, timeout, unix=True)
    )
    server_class.start_network_socket = classmethod(
        lambda cls, rundir, timeout: connect(cls, rundir, timeout, unix=False)
    )


def copy_parts(source: Path, parts: list[str], target: Path) -> None:
    """Copy the files and folders ``parts`` (relative paths) of ``source`` to ``target``.

    A file already there with the same size is kept, so builds running at once do not trip on each other.
    """
    for part in parts:
        origin = source / part
        for file in sorted(origin.rglob("*")) if origin.is_dir() else [origin]:
            if file.is_dir():
                continue
            destination = target / file.relative_to(source)
            if destination.is_file() and destination.stat().st_size == file.stat().st_size:
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, destination)


def _lazy_images(app, doctree, docname) -> None:
    """Images load when the reader scrolls near them (HTML ``loading="lazy"``, docutils' image option):
    a chapter's first visit transfers only the figures on the first screen."""
    for image in doctree.findall(nodes.image):
        image.setdefault("loading", "lazy")


#: What the wheel is made of, relative to the project's root (the readme is its long description).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "src")


def build_wheel(root: Path, cache: Path, epoch: int) -> Path:
    """tinyformer's wheel, built from ``root`` into ``cache/<hash>/dist/`` and reused while its sources
    (:data:`WHEEL_SOURCES`) are unchanged; returns the wheel's path.

    The wheel is built by pip with setuptools (the build backend pinned in pyproject.toml, installed in
    the docs environment) from a copy of the sources, without build isolation or an index, so the build
    stays offline and writes nothing into ``src/``. ``epoch`` (``SOURCE_DATE_EPOCH``) dates the files in
    the archive, so two builds of one commit give the same bytes.

    Raises:
        RuntimeError: pip failed; its output is in the message.
    """
    digest = hashlib.sha256()
    files = [
        path
        for name in WHEEL_SOURCES
        for path in ([root / name] if (root / name).is_file() else sorted((root / name).rglob("*")))
        if path.is_file() and "__pycache__" not in path.parts and not path.match("*.egg-info/*")
    ]
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    dist = cache / digest.hexdigest()[:16] / "dist"
    wheels = sorted(dist.glob("tinyformer-*.whl")) if dist.is_dir() else []
    if len(wheels) == 1:
        return wheels[0]
    with tempfile.TemporaryDirectory(prefix="tinyformer-wheel-") as tmp:
        for path in files:
            copy = Path(tmp) / path.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
        out = Path(tmp) / "out"
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
        done = subprocess.run(
            [*command, "--quiet", "--wheel-dir", str(out), tmp],
            capture_output=True,
            text=True,
            env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
            check=False,
        )
        built = sorted(out.glob("tinyformer-*.whl"))
        if done.returncode != 0 or len(built) != 1:
            raise RuntimeError(f"building tinyformer's wheel failed:\n{done.stdout}{done.stderr}")
        for stale in cache.iterdir() if cache.is_dir() else []:
            shutil.rmtree(stale)  # wheels of earlier sources
        dist.mkdir(parents=True)
        return Path(shutil.copy2(built[0], dist / built[0].name))
