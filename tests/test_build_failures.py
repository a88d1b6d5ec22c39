"""Every way a chapter can go wrong fails the build, with a message naming the chapter and the cell.

The tests build small temporary books with the project's ``conf/``, as ``nox -s docs`` builds the real one
(cache mode, ``-W --keep-going -n``), each with its own execution cache. The faults that let the build go on
(a warning or an error it reports and fails on at the end: reprs, stderr, a broken reference, citation,
glue key or formula) share one book, a chapter each (``faulty_book``), and each test asserts the message
that names its own chapter and line; a fault that stops the build (a cell that raises or runs too long)
has a book of its own (the raising chapter beside a sound one, as the real book's chapters execute). The
healthy chapters share one book too (``sound_book``), which must build without a warning, so that the faults
fail for the reason they name and not because small books cannot be built; two of its chapters sleep, to show
that chapters execute side by side, and a second build of it from its cache executes nothing.
"""

import json
import re
import textwrap

import pytest
from booktools import myst_notebook
from conftest import sphinx_build

pytestmark = pytest.mark.book

CHAPTER = "tiny-chapter"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of IPython's tracebacks


def cell(source, *tags):
    return f"```{{code-cell}} ipython3\n{tag_line(tags)}{textwrap.dedent(source).strip()}\n```\n\n"


def tag_line(tags):
    return f":tags: [{', '.join(tags)}]\n" if tags else ""


def write_book(docs, chapters):
    """A book in ``docs`` whose chapters are ``chapters`` (name -> body), in that order."""
    docs.mkdir()
    toctree = "\n".join(chapters)
    (docs / "index.md").write_text(f"# A tiny book\n\n```{{toctree}}\n{toctree}\n```\n\n```{{bibliography}}\n```\n")
    for name, body in chapters.items():
        (docs / f"{name}.md").write_text(myst_notebook(f"Chapter {name}", body))
    return docs


def build_chapter(sphinx, tmp_path, body, *extra):
    """Build a book whose one chapter is ``body``; return the finished process and the chapter's path."""
    docs = write_book(tmp_path / "docs", {CHAPTER: body})
    cache = tmp_path / "cache"
    return sphinx(docs, tmp_path, "-D", f"nb_execution_cache_path={cache}", *extra), docs / f"{CHAPTER}.md"


def build_shared(tmp_path, chapters):
    """Build one book of ``chapters`` (name -> body), executed side by side as the real book's chapters are;
    return the finished process and the docs folder."""
    docs = write_book(tmp_path / "docs", chapters)
    return sphinx_build(docs, tmp_path, *shared_settings(tmp_path)), docs


def shared_settings(out):
    """The overrides of a book built with :func:`build_shared` in ``out``: its cache, two workers."""
    return ("-D", f"nb_execution_cache_path={out / 'cache'}", "-D", "tinyformer_execution_workers=2")


def line_of(path, text):
    """1-based line number of the first line of ``path`` containing ``text``."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


def assert_names_a_line_of_the_cell(result, chapter, message, text):
    """The failure names ``chapter``, a line of the code cell holding ``text``, and ``message``."""
    lines = chapter.read_text().splitlines()
    inside = next(n for n, line in enumerate(lines) if text in line)
    fence = max(n for n in range(inside) if lines[n].startswith("```{code-cell}"))
    end = next(n for n in range(inside, len(lines)) if lines[n] == "```")
    found = re.search(rf"{re.escape(str(chapter))}:(\d+): {message}", result.stdout + result.stderr)
    assert result.returncode != 0
    assert found, f"no {message!r} naming {chapter}:\n{result.stdout}{result.stderr}"
    assert fence + 1 <= int(found.group(1)) <= end + 1, f"line {found.group(1)} is not in the cell at {fence + 1}"


def assert_fails_naming(result, *fragments):
    output = ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode != 0, f"the build should have failed:\n{output}"
    for fragment in fragments:
        assert fragment in output, f"the failure message should name {fragment!r}:\n{output}"


# -- Healthy chapters build without a warning (one book) ---------------------------------------------

HEALTHY = (
    cell("""
        import numpy as np
        import torch
        from myst_nb import glue

        torch.manual_seed(0)
        glue("mean", float(torch.randn(100).mean()), display=False)
        glue("size", int(np.int64(7)), display=False)
        """)
    + "The mean is {glue:text}`mean:.3f` over {glue:text}`size` draws ({ref}`a-label`, {cite:t}`vaswani2017attention`).\n\n"
    + "(a-label)=\n## A section\n\n"
    + cell("int('not a number')", "raises-exception")
)
# Prints a kernel sends in separate messages (a pause between them).
TWO_PRINTS = cell("""
    import sys
    import time

    print("first")
    sys.stdout.flush()
    time.sleep(0.5)
    print("second")
    """)
FIGURE = """
    import torch
    from myst_nb import glue

    from tinyformer.plotting import plot_encoding
    from tinyformer.models.positional import sinusoidal_positional_encoding

    fig = plot_encoding(sinusoidal_positional_encoding(16, 8))
    glue("encoding-figure", fig, display=False)
    """


def timed(name):
    """A chapter that sleeps 4 s and glues when it started and ended; ``name`` makes its cells its own (the
    cache would otherwise match two identical chapters to one record)."""
    return (
        cell(f"""
        import time
        from myst_nb import glue

        chapter = {name!r}
        start = time.time()
        time.sleep(4)
        glue("span", f"{{start:.3f}} {{time.time():.3f}}", display=False)
        """)
        + "Ran {glue:text}`span`.\n"
    )


# The timed chapters' names sort first, so the build's two workers start them first (a second apart).
SIDE_BY_SIDE = ("a-timed", "b-timed")
SOUND = {
    **{name: timed(name) for name in SIDE_BY_SIDE},
    "healthy": HEALTHY,
    "two-prints": TWO_PRINTS,
    # no %matplotlib inline in the chapter
    "figure": cell(FIGURE) + "```{glue:figure} encoding-figure\n\nThe table.\n```\n\n" + cell("fig"),
}


@pytest.fixture(scope="module")
def sound_book(tmp_path_factory):
    """The book of the :data:`SOUND` chapters: the finished build and the folder it was built in."""
    out = tmp_path_factory.mktemp("sound")
    result, _ = build_shared(out, SOUND)
    return result, out


def test_uncached_chapters_execute_side_by_side_and_are_cached(sound_book, sphinx):
    """Two chapters the cache lacks execute at the same time; a second build reads them from the cache, executes
    nothing, and shows the same pages."""
    result, out = sound_book
    assert result.returncode == 0, result.stdout + result.stderr
    spans = []
    for name in SIDE_BY_SIDE:
        text = (out / "html" / f"{name}.html").read_text()
        found = re.search(r"Ran ([\d.]+) ([\d.]+)\.", text)
        assert found, f"{name}: the glued values are not on the page"
        spans.append((float(found[1]), float(found[2])))
    (a_start, a_end), (b_start, b_end) = spans
    assert a_start < b_end, f"the chapters ran one after the other: {spans}"
    assert b_start < a_end, f"the chapters ran one after the other: {spans}"
    # the executed notebooks the book offers for download carry the outputs (myst-nb writes them
    # without outputs when it finds a chapter in the cache)
    for name in SOUND:
        executed = json.loads((out / "jupyter_execute" / f"{name}.ipynb").read_text())
        outputs = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
        assert outputs, f"{name}: the executed notebook has no outputs"
    # all are in the cache: a second build executes nothing (each timed chapter would glue a new time) and
    # shows the same pages
    again = sphinx(out / "docs", out / "again", *shared_settings(out))
    assert again.returncode == 0, again.stdout + again.stderr
    for name in SOUND:
        assert (out / "again" / "html" / f"{name}.html").read_text() == (out / "html" / f"{name}.html").read_text()


def test_healthy_chapters_build(sound_book):
    result, out = sound_book
    assert result.returncode == 0, result.stdout + result.stderr
    assert not result.stderr, result.stderr
    page = (out / "html" / "healthy.html").read_text()
    assert "tinyformer-provenance" in page


def test_the_downloadable_notebook_has_one_stdout_output_per_cell(sound_book):
    """Prints a kernel sends in separate messages (a pause between them) are merged in the executed
    notebook, as on the page: otherwise how they were split depends on timing and two builds differ."""
    _, out = sound_book
    notebook = json.loads((out / "jupyter_execute" / "two-prints.ipynb").read_text())
    (code,) = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert [(o["output_type"], o["name"]) for o in code["outputs"]] == [("stream", "stdout")]
    assert "".join(code["outputs"][0]["text"]) == "first\nsecond\n"


def test_a_figure_without_matplotlib_inline_is_an_image(sound_book):
    """No ``%matplotlib inline`` in the chapter: the kernel start-up makes figures images anyway."""
    _, out = sound_book
    page = (out / "html" / "figure.html").read_text()
    assert "&lt;Figure size" not in page
    assert page.count("<img") >= 2, "the glued figure and the cell's figure should both be images"


# -- Faults that stop the build: a book each ---------------------------------------------------------


def test_a_cell_that_raises_fails_the_build_beside_a_sound_chapter(tmp_path):
    """A chapter whose cell raises, executed beside a sound one (the build's workers fail it, myst-nb executes it
    again and reports it): the build fails naming the chapter, the cell's source and the error."""
    body = cell("x = 1") + cell("raise ValueError('the chapter is broken')")
    result, docs = build_shared(tmp_path, {"chapter-a": cell("x = 1"), "chapter-b": body})
    chapter = docs / "chapter-b.md"
    assert_fails_naming(result, f"{chapter}: WARNING: Executing notebook failed: CellExecutionError")
    assert_fails_naming(result, "raise ValueError('the chapter is broken')", "ValueError: the chapter is broken")
    sound = re.escape(str(docs / "chapter-a.md"))
    assert not re.search(rf"{sound}(:\d+)?: (WARNING|ERROR)", ANSI.sub("", result.stdout + result.stderr))


def test_a_cell_past_the_timeout_fails_the_build(sphinx, tmp_path):
    body = cell("x = 1") + cell("import time\n\ntime.sleep(60)")
    result, chapter = build_chapter(sphinx, tmp_path, body, "-D", "nb_execution_timeout=3")
    assert_fails_naming(result, f"{chapter}: WARNING: Executing notebook failed: CellTimeoutError")
    assert_fails_naming(result, "timed out while it was being executed, after 3 seconds", "time.sleep(60)")


# -- Faults the build reports and goes on from, failing at the end: one book, a chapter each -----------

PYTHON_WARNINGS = {
    "user-warning": "import warnings\n\nwarnings.warn('a user warning')",
    # Python hides a DeprecationWarning raised outside __main__, as it would be in the library;
    # the kernel start-up (conf/ipython_kernel_config.py) shows it.
    "deprecation-warning-in-a-library": "import types\n\nlib = types.ModuleType('lib')\n"
    "exec(\"import warnings\\ndef old(): warnings.warn('old', DeprecationWarning)\", lib.__dict__)\nlib.old()",
}
# glued value, the role that shows it, what the page would show
GLUED_REPRS = {
    "np-float64": ("np.float64(0.25)", "{glue:text}`x`", "np.float64(0.25)"),
    "torch-tensor": ("torch.tensor(0.25)", "{glue:text}`x`", "tensor(0.2500)"),
    "np-array": ("np.arange(3)", "{glue}`x`", "array([0, 1, 2])"),
}
# a cell's source, the repr its output would show
OBJECT_REPRS = {
    "object": ("class Thing:\n    pass\n\nThing()", "<__main__.Thing at 0x"),
    "forgotten-semicolon": ("import matplotlib.pyplot as plt\n\nplt.plot([0, 1])", "<matplotlib.lines.Line2D at 0x"),
    "printed": ("print(iter([]))", "<list_iterator object at 0x"),
    "figure-without-inline": (
        "%matplotlib agg\nimport matplotlib.pyplot as plt\n\nplt.figure(figsize=(7, 3.6))",
        "<Figure size 700x360",
    ),
}
# A kernel without the inline backend's image formatters glues a figure: the page would show its repr.
NO_INLINE = """
    from matplotlib.figure import Figure

    for formatter in get_ipython().display_formatter.formatters.values():
        formatter.type_printers.pop(Figure, None)
    """
# a formula, why KaTeX cannot typeset it
FORMULAS = {
    "unknown-command": ("\\operatorname{softmax}(\\undefinedmacro{QK})V", "unknown command \\undefinedmacro"),
    "parse-error": ("\\frac{QK^\\top}{", "ParseError: KaTeX parse error: Unexpected end of input"),
}
GLUE = "from myst_nb import glue\n\n"
FAULTY = {
    "undefined-glue-key": cell(GLUE + "glue('defined', 1.0, display=False)")
    + "Defined {glue:text}`defined:.1f`, undefined {glue:text}`never_glued:.1f`.\n",
    "broken-cross-reference": "As {ref}`sec-nowhere` shows.\n",
    "broken-citation": "As {cite:t}`nobody2099` shows.\n",
    "stderr": cell("x = 1") + cell("import sys\n\nprint('careful', file=sys.stderr)"),
    **{f"warning-{name}": cell("x = 1") + cell(source) for name, source in PYTHON_WARNINGS.items()},
    **{
        f"glued-{name}": cell("import numpy as np\nimport torch\nfrom myst_nb import glue")
        + cell(f"glue('x', {value}, display=False)")
        + f"The value is {role}.\n"
        for name, (value, role, _) in GLUED_REPRS.items()
    },
    **{f"repr-{name}": cell("x = 1") + cell(source) for name, (source, _) in OBJECT_REPRS.items()},
    "glued-figure-no-image": cell(NO_INLINE) + cell(FIGURE) + "```{glue:figure} encoding-figure\n\nThe table.\n```\n",
    **{f"katex-{name}": f"Attention is ${formula}$.\n" for name, (formula, _) in FORMULAS.items()},
}


@pytest.fixture(scope="module")
def faulty_book(tmp_path_factory):
    """The book of the :data:`FAULTY` chapters, built once: the finished build and a function from a chapter's
    name to its source's path."""
    result, docs = build_shared(tmp_path_factory.mktemp("faulty"), FAULTY)
    return result, lambda name: docs / f"{name}.md"


def test_the_faulty_book_fails_and_reports_every_chapter(faulty_book):
    """Guards the tests below: the build failed, and each of its chapters was read and reported on (a fault
    that stopped the build early would leave the chapters after it unchecked, their tests failing
    without saying why)."""
    result, chapter = faulty_book
    output = ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    silent = [name for name in FAULTY if str(chapter(name)) not in output]
    assert not silent, f"no message names {silent}:\n{output}"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("undefined-glue-key", "never_glued", "WARNING: No key 'never_glued' found in glue data"),
        ("broken-cross-reference", "sec-nowhere", "WARNING: undefined label: 'sec-nowhere'"),
        ("broken-citation", "nobody2099", 'WARNING: could not find bibtex key "nobody2099"'),
    ],
    ids=["glue key", "cross-reference", "citation"],
)
def test_a_name_that_leads_nowhere_fails_the_build_at_its_line(faulty_book, name, text, message):
    """A glue key never defined, a label or a citation key that does not exist: named at its line."""
    result, chapter = faulty_book
    path = chapter(name)
    assert_fails_naming(result, f"{path}:{line_of(path, text)}: {message}")


def test_stderr_from_a_cell_fails_the_build(faulty_book):
    result, chapter = faulty_book
    message = "ERROR: stderr was found in the cell outputs of cell 3"
    assert_names_a_line_of_the_cell(result, chapter("stderr"), message, "print('careful'")


@pytest.mark.parametrize("name", PYTHON_WARNINGS)
def test_a_python_warning_from_a_cell_fails_the_build(faulty_book, name):
    result, chapter = faulty_book
    message = "ERROR: stderr was found in the cell outputs of cell 3"
    assert_names_a_line_of_the_cell(result, chapter(f"warning-{name}"), message, PYTHON_WARNINGS[name].splitlines()[0])


@pytest.mark.parametrize("name", GLUED_REPRS)
def test_a_glued_numpy_or_torch_repr_fails_the_build(faulty_book, name):
    result, chapter = faulty_book
    path = chapter(f"glued-{name}")
    shown = GLUED_REPRS[name][2]
    line = line_of(path, "glue('x'") - 1
    assert_fails_naming(result, f"{path}: ERROR: glue key 'x' in code cell 2 (line {line}) holds the repr '{shown}'")


@pytest.mark.parametrize("name", OBJECT_REPRS)
def test_an_object_repr_in_an_output_fails_the_build(faulty_book, name):
    result, chapter = faulty_book
    path = chapter(f"repr-{name}")
    source, shown = OBJECT_REPRS[name]
    line = line_of(path, source.splitlines()[0]) - 1
    assert_fails_naming(result, f"{path}: ERROR: code cell 2 (line {line}) shows the object repr '{shown}")


def test_a_glued_figure_that_is_no_image_fails_the_build(faulty_book):
    result, chapter = faulty_book
    path = chapter("glued-figure-no-image")
    line = line_of(path, "import torch") - 1
    assert_fails_naming(
        result,
        f"{path}: ERROR: glue key 'encoding-figure' in code cell 2 (line {line}) holds the object repr '<Figure size ",
        " with 2 Axes>', which the page would print instead of an image",
    )


@pytest.mark.parametrize("name", FORMULAS)
def test_a_formula_katex_cannot_typeset_fails_the_build(faulty_book, name):
    """KaTeX typesets the formulas at build time; one it cannot would show as red TeX on the page."""
    result, chapter = faulty_book
    formula, reason = FORMULAS[name]
    assert_fails_naming(result, f'{chapter(f"katex-{name}")}: WARNING: KaTeX could not typeset "{formula}": {reason}')


# -- Parallel builds are refused; a damaged execution cache is set aside ------------------------------


@pytest.mark.parametrize("jobs", [["-j", "2"], ["--jobs", "3"]], ids=["-j 2", "--jobs 3"])
def test_a_parallel_build_is_refused_with_the_reason(sphinx, tmp_path, jobs):
    result, _ = build_chapter(sphinx, tmp_path, cell("x = 1"), *jobs)
    assert_fails_naming(result, f"-j {jobs[1]} (parallel build) is not supported", "jupyter-cache", "SQLite")
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "cache").exists(), "nothing should have been executed"


def test_a_damaged_execution_cache_is_set_aside_and_rebuilt(sphinx, tmp_path):
    body = cell("from myst_nb import glue\n\nglue('answer', 42, display=False)") + "It is {glue:text}`answer`.\n"
    result, chapter = build_chapter(sphinx, tmp_path, body)
    assert result.returncode == 0, result.stdout + result.stderr
    cache = tmp_path / "cache"
    database = cache / "global.db"
    with database.open("r+b") as handle:  # a crash or a full disk in the middle of a write
        handle.truncate(database.stat().st_size // 2)
    chapter.write_text(chapter.read_text() + "\nEdited, so the chapter is read again.\n")
    result = sphinx(
        tmp_path / "docs", tmp_path, "-D", f"nb_execution_cache_path={cache}", "-D", "nb_execution_mode=cache"
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Traceback" not in output
    assert "please report" not in output.lower()
    message = [line for line in result.stderr.splitlines() if "damaged" in line]
    assert len(message) == 1, output
    assert f"the execution cache {cache} is damaged" in message[0]
    assert f"moved it to {cache}.damaged" in message[0]
    assert "re-executing" in message[0]
    assert (cache.parent / "cache.damaged" / "global.db").is_file()
    assert database.is_file(), "a fresh cache should have been written"
    assert database.stat().st_size > 0, "a fresh cache should have been written"
    assert "It is 42." in (tmp_path / "html" / f"{CHAPTER}.html").read_text()
