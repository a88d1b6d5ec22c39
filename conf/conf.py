"""Sphinx configuration of the tinyformer book, used as ``sphinx-build -c conf docs build/html``.

Everything that shapes the build lives in this folder: this file, the build safeguards
(``_ext/tinyformer_build.py``: cache key, provenance, glue checks), the chapter kernels' start-up
(``ipython_kernel_config.py``), the bibliography (``references.bib``), the matplotlib style
(``matplotlibrc``) and the pinned versions (``constraints.txt``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from html import unescape
from pathlib import Path

import nbformat
import sphinxcontrib.katex as sphinxcontrib_katex

import tinyformer

CONF_DIR = Path(__file__).resolve().parent
ROOT = CONF_DIR.parent
BUILD_DIR = ROOT / "build"
sys.path.insert(0, str(CONF_DIR / "_ext"))

import tinyformer_build  # noqa: E402 (lives in conf/_ext, put on the path above)
import tinyformer_notebook  # noqa: E402 (conf/_ext as well)
import tinyformer_site  # noqa: E402 (conf/_ext as well)

# The library the chapters will import (the kernels inherit this interpreter and environment) must be
# the one in src/: a stale installed copy would put old numbers on the pages.
_LIBRARY_DIR = Path(tinyformer.__file__).resolve().parent
tinyformer_build.check_library_is_source(_LIBRARY_DIR, ROOT / "src" / "tinyformer")
# SHA-256 of the library's source, shown on every page.
SOURCE_HASH = tinyformer_build.library_hash(_LIBRARY_DIR)
# What executed chapters depend on besides their own cells (library, conf/, pyproject.toml, the
# installed versions of torch, numpy, matplotlib and the execution stack). myst-nb's cache keys on the
# cells only, so the key names the execution cache (a change means a fresh cache: every chapter
# re-executes) and is a Sphinx config value registered with rebuild="env" by tinyformer_build (a change
# means every page is re-read and re-rendered).
BUILD_KEY = tinyformer_build.build_key(ROOT, CONF_DIR, SOURCE_HASH)
tinyformer_build_key = BUILD_KEY
# The build date, from $SOURCE_DATE_EPOCH or else the last commit; exported for Sphinx, matplotlib and
# the kernels, so two builds of one commit are byte-identical.
SOURCE_DATE_EPOCH = tinyformer_build.source_date_epoch(ROOT)
# The seed every chapter kernel starts from (torch, numpy, random); chapters also set it in their first cell.
SEED = 0
os.environ["TINYFORMER_SEED"] = str(SEED)
# The kernels run conf/kernel_figures.py at start-up (ipython_kernel_config.py): figures for phones.
os.environ["TINYFORMER_CONF"] = str(CONF_DIR)

# -- Project ------------------------------------------------------------------------------------------
project = "tinyformer"
author = "The tinyformer authors"
copyright = "2026, The tinyformer authors"
release = version = tinyformer.__version__
# Where the book is published: the one base URL of the sitemap, the link previews and CITATION.cff.
html_baseurl = "https://tinyformer.github.io/tinyformer/"
# Where its sources are: the one repository address of the home page, the coding exercises, the theme's
# repository button and CITATION.cff's repository-code (checked below).
repository_url = "https://github.com/tinyformer/tinyformer"
# The library as a wheel the site serves at dist/ (conf/_ext/tinyformer_site.py, build_wheel), so a
# reader installs it with pip from the site as well as from the repository.
WHEEL = tinyformer_site.build_wheel(ROOT, BUILD_DIR / "wheel", SOURCE_DATE_EPOCH)
html_extra_path = [str(WHEEL.parent.parent)]
WHEEL_URL = f"{html_baseurl}dist/{WHEEL.name}"

# -- General ------------------------------------------------------------------------------------------
extensions = [
    "myst_nb",
    "tinyformer_build",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxcontrib.katex",  # formulas typeset at build time ("Math" below)
    "sphinxcontrib.bibtex",
    "sphinx_design",
    "sphinx_copybutton",
    "sphinx_exercise",
    "sphinx_togglebutton",
    "tinyformer_course",  # conf/_ext: reading time of each chapter, the lecturer's tables
    "tinyformer_listing",  # conf/_ext: {listing}, a function's def and the lines that carry the idea
    "tinyformer_claims",  # conf/_ext: the claims page, written from the tests' claim and peer marks
]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "jupyter_execute"]
# Template overrides of the theme; each file says which upstream issue it works around. The pages'
# templates are in _templates/pages; the theme imports its macros as "../macros/buttons.html", which
# Sphinx looks up beside each template folder, hence _templates/macros.
templates_path = ["_templates/pages"]
nitpicky = True
# Types from other projects: no inventory is fetched (the build is offline), so these stay unlinked.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|np|matplotlib|collections\.abc|concurrent|importlib|pathlib|typing)(\..*)?"),
    (r"py:class", r"(Tensor|Figure|Module|optional|callable)"),
]
numfig = True
numfig_secnum_depth = 1
math_numfig = True
math_eqref_format = "Eq. {number}"

# -- MyST and notebook execution ---------------------------------------------------------------------
myst_enable_extensions = ["amsmath", "colon_fence", "deflist", "dollarmath", "substitution"]
myst_heading_anchors = 3
nb_execution_mode = "cache"
nb_execution_cache_path = str(BUILD_DIR / ".jupyter_cache" / BUILD_KEY[:16])
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_output_stderr = "error"
nb_merge_streams = True
# Uncached chapters execute side by side, one process per core (at most 4), before Sphinx reads them
# (conf/_ext/tinyformer_build.py, execute_in_parallel); the pages are the same as from one process.
tinyformer_execution_workers = max(1, min(4, os.cpu_count() or 1))
# Started first, slowest first (measured in a clean build on 2 cores, a chapter per core: each takes 30 s or
# more, the others 25 s or less; tests/test_build.py names a chapter of 30 s or more missing here).
tinyformer_slow_chapters = [
    "long-context",
    "induction-heads",
    "serving-attention",
    "beyond-sinusoids",
    "transformer",
    "decoder",
]

# The plot style: every chapter kernel inherits this environment, so every figure uses conf/matplotlibrc.
os.environ["MATPLOTLIBRC"] = str(CONF_DIR / "matplotlibrc")
os.environ.setdefault("PYTHONHASHSEED", "0")
# The kernels' IPython profile: a copy of conf/ipython_kernel_config.py under build/ (IPython writes
# into its profile folder, which must not be conf/).
_profile = BUILD_DIR / "ipython" / "profile_default"
_profile.mkdir(parents=True, exist_ok=True)
shutil.copyfile(CONF_DIR / "ipython_kernel_config.py", _profile / "ipython_kernel_config.py")
os.environ["IPYTHONDIR"] = str(BUILD_DIR / "ipython")

# -- Bibliography -------------------------------------------------------------------------------------
bibtex_bibfiles = ["../conf/references.bib"]
# The list is labelled and sorted the way the text cites, "Vaswani et al., 2017" (conf/_ext/tinyformer_site.py).
bibtex_default_style = tinyformer_site.AUTHOR_YEAR_STYLE
bibtex_reference_style = "author_year"

# -- Autodoc ------------------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
# Types that resolve are shown by their short name (ExtrapolationConfig, not tinyformer.labs.extrapolation.
# ExtrapolationConfig): the long ones made the API page 88 px wider than a 390-px phone.
python_use_unqualified_type_names = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# -- Math, typeset at build time ---------------------------------------------------------------------
# Every formula is typeset while the book builds, by KaTeX under Node.js (sphinxcontrib-katex's
# prerendering), so a page carries finished HTML (with MathML for screen readers) and loads no math
# script: no raw TeX while a page loads, and a chapter page weighs about 1.2 MiB instead of 1.7 with
# MathJax 3's 760 kB of scripts (issue 12). KaTeX itself, its stylesheet and its fonts come from one
# npm package pinned in conf/katex/package-lock.json; nox installs it into build/katex (npm ci), so the
# HTML and the stylesheet that styles it are always one version. The fonts load only when a formula
# on the page uses them.
KATEX_DIST = BUILD_DIR / "katex" / "node_modules" / "katex" / "dist"
tinyformer_site.check_katex(KATEX_DIST, CONF_DIR / "katex" / "package-lock.json")
katex_prerender = True
# sphinxcontrib-katex (0.9.11) gives the Node.js server 5 s to start and 5 s per formula, and has no
# option for either. On a loaded 2-core machine the start took longer: the build stopped, and the server
# it had started kept running with the build's output pipe open, so whatever waited for the build's
# output (the tests' sphinx-build calls) waited for ever. Generous limits; drop once it has options.
# Its start also connected before the server listened (ConnectionRefusedError): robust_katex_start
# retries until the limit and ends the server on any failure (tests/test_build_failures.py).
tinyformer_site.robust_katex_start(sphinxcontrib_katex)
sphinxcontrib_katex.STARTUP_TIMEOUT = 120.0
sphinxcontrib_katex.RENDER_TIMEOUT = 60.0
katex_js_path = str(KATEX_DIST / "katex.min.js")
_katex_static = BUILD_DIR / "katex-static"
tinyformer_site.copy_parts(KATEX_DIST, ["katex.min.css", "fonts"], _katex_static / "katex")
katex_css_path = "katex/katex.min.css"
html_static_path = [str(_katex_static)]

# -- HTML ---------------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "tinyformer: attention and position in Transformers"
html_last_updated_fmt = None
html_theme_options = {
    "use_download_button": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    # No top navbar. sphinx-book-theme keeps its toggles and search in the article header and the
    # sidebar, but pydata-sphinx-theme 0.20 still renders a navbar holding the search field again and a
    # second copy of each sidebar toggle; its script binds the first ``.primary-toggle`` in the page,
    # not the one a phone reader taps, so the menus never open (pydata-sphinx-theme issue 2451,
    # sphinx-book-theme issues 988 and 999; sphinx-book-theme 1.4.0, the newest, pins
    # pydata-sphinx-theme 0.20.0, so no newer pair exists). With every navbar slot empty the theme
    # renders no navbar; drop this once sphinx-book-theme ships a fix for 988.
    "navbar_persistent": [],
    "repository_url": repository_url,
    "repository_branch": "main",
    "path_to_docs": "docs",
    "use_repository_button": True,
    # Provenance in the footer of every page: what computed the numbers, and when.
    "extra_footer": tinyformer_build.provenance_html(
        tinyformer_build.provenance(
            version=tinyformer.__version__, library=SOURCE_HASH, seed=SEED, epoch=SOURCE_DATE_EPOCH
        )
    )
    # The edition a reader cites (CITATION.cff's version), and what changed in it; every page is at the
    # top of the site, so the relative link holds everywhere.
    + f'<p class="tinyformer-edition" data-edition="{release}">Edition {release} of the book; see '
    '<a href="changelog.html">Errata and changes</a>.</p>',
}
# Follow the reader's light/dark setting; left unset, the theme logs a console error on a first visit.
html_context = {"default_mode": "auto"}
html_favicon = "favicon.svg"  # a local icon: without one the browser asks for /favicon.ico and gets a 404
html_static_path += [str(CONF_DIR / "tinyformer.css")]
html_css_files = ["tinyformer.css"]  # the book's own styles: contrast, overflow, figures
# Search: chapters rank above API entries (Sphinx's supported scorer hook), and result snippets are
# made without the theme's buttons or raw TeX (conf/tinyformer-search.js).
html_search_scorer = str(CONF_DIR / "search-scorer.js")
html_static_path += [str(CONF_DIR / "tinyformer-search.js")]
html_static_path += [str(CONF_DIR / "tinyformer-page.js")]  # solution bars, copy buttons' names
html_js_files = [("tinyformer-search.js", {"defer": "defer"}), ("tinyformer-page.js", {"defer": "defer"})]

# -- Reader's side: downloads, sitemap, link previews, citation --------------------------------------
extensions += ["sphinx_sitemap", "sphinxext.opengraph"]
sitemap_url_scheme = "{link}"  # pages at html_baseurl + page, no language or version folder
sitemap_excludes = ["search.html", "genindex.html", "py-modindex.html"]  # no content of their own
ogp_site_url = html_baseurl
ogp_social_cards = {"enable": False}  # the generated cards need matplotlib fonts and bloat the build
# "How to cite" (docs/cite.md) shows BibTeX and APA made from CITATION.cff, so they cannot disagree.
_citation_spec = importlib.util.spec_from_file_location("tinyformer_citation", CONF_DIR / "citation.py")
citation = importlib.util.module_from_spec(_citation_spec)
_citation_spec.loader.exec_module(citation)
CITATION = citation.load(ROOT / "CITATION.cff")
if {CITATION["url"], CITATION["preferred-citation"]["url"]} != {html_baseurl}:
    raise ValueError(f"CITATION.cff url {CITATION['url']!r} differs from html_baseurl {html_baseurl!r}")
if CITATION.get("repository-code") != repository_url:
    raise ValueError(
        f"CITATION.cff repository-code {CITATION.get('repository-code')!r} differs from {repository_url!r}"
    )
# How a reader gets the library, the way the book was built, in one set of lines that the home page, every
# chapter's "Checking a solution" box and every downloaded notebook's first cell show: PyTorch's CPU build
# of the book's torch (conf/constraints.txt) from PyTorch's index first (on Linux the package index's
# torch is a build for NVIDIA GPUs, with CUDA libraries a CPU-only reader does not need), then the wheel,
# every requirement at the version the book was built with: the site serves conf/constraints.txt beside
# the wheel. The addresses are split so that no command line is wider than a page's code column.
SITE_DIST = f"{html_baseurl}dist"
TORCH_VERSION = re.search(r"^torch==(\S+)$", (CONF_DIR / "constraints.txt").read_text(), re.MULTILINE)[1]
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
shutil.copyfile(CONF_DIR / "constraints.txt", WHEEL.parent / "constraints.txt")  # served at dist/
INSTALL_LINES = f"""$ SITE={SITE_DIST}
$ python3 -m pip install torch=={TORCH_VERSION} \\
    --index-url {TORCH_CPU_INDEX}
$ python3 -m pip install -c $SITE/constraints.txt \\
    "tinyformer[hf] @ $SITE/{WHEEL.name}\""""
INSTALL_COMMANDS = f"""```console
{INSTALL_LINES}
```

or, with the same `SITE`, the library as it stands in the repository:

```console
$ python3 -m pip install -c $SITE/constraints.txt \\
    "tinyformer[hf] @ git+{repository_url}@main"
```"""
REBUILD_COMMANDS = f"""```console
$ git clone {repository_url} tinyformer && cd tinyformer
$ python3 -m pip install nox==2026.10.20 && nox -s docs     # the book, into build/html
$ python3 -m pip install nox==2026.10.20 && nox -s tests    # the library's and the book's tests
```"""
# What a downloaded chapter notebook says first: where it comes from, what it needs and how long it runs
# ({minutes}: the bound the chapter's front matter states as notebook_minutes, which the tests check
# against the build's execution time).
NOTEBOOK_INSTALL = f"""*This notebook is a chapter of [tinyformer: attention and position in Transformers]({{page}}), edition
{release}. It runs top to bottom in Jupyter with Python 3.11 or newer{{minutes}}, once the library is
installed as the book was built:*

```console
{INSTALL_LINES.replace("{", "{{").replace("}", "}}")}
```"""
# What a downloaded notebook runs first, in a kernel without tinyformer (Colab, or a fresh environment):
# the install above, from Python, so that "Run all" works there; in an environment that has tinyformer
# (the book's build, a reader who followed the first cell) it installs nothing.
NOTEBOOK_SETUP = f"""\
# Outside the book (Colab, or a kernel without tinyformer): install it as the book was built.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("tinyformer") is None:
    SITE = "{SITE_DIST}"
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "torch=={TORCH_VERSION}", "--index-url", "{TORCH_CPU_INDEX}"], check=True)
    subprocess.run(
        [*pip, "-c", f"{{SITE}}/constraints.txt", f"tinyformer[hf] @ {{SITE}}/{WHEEL.name}"],
        check=True,
    )"""
# Colab opens notebooks from GitHub, not from a site: the hosting workflow (.github/workflows/pages.yml)
# pushes the site's executed notebooks (_sources/*.ipynb) to this branch, and each chapter's launch menu
# opens its notebook there.
NOTEBOOK_BRANCH = "notebooks"
COLAB_URL = "https://colab.research.google.com/github/{repository}/blob/{branch}/{pagename}.ipynb"
# How a student checks a coding exercise (every chapter's coding-exercise section).
CHECKING = f"""```{{admonition}} Checking a solution
Install tinyformer as the book was built (the first three lines below;
[the tinyformer repository on GitHub]({repository_url}) has its sources), write the exercise's template
into a folder (or download it from the exercise), and check your file there. ID is the exercise's name
or its number (`6.7`). In a clone of the repository, `nox -s check -- ID path/to/FILE` does the same.

~~~console
{INSTALL_LINES}
$ python3 -m tinyformer_exercises --template ID   # writes it here
$ python3 -m tinyformer_exercises ID FILE         # checks FILE
~~~
```"""
# The lecturers' page's counts (course_sessions, course_minutes, book_chapters) are added from the sources
# when the build starts (conf/_ext/tinyformer_course.py, course_substitutions).
myst_substitutions = {
    "checking": CHECKING,
    "repository_link": f"[the tinyformer repository on GitHub]({repository_url})",
    "wheel_url": WHEEL_URL,
    "wheel_name": WHEEL.name,
    "install_commands": INSTALL_COMMANDS,
    "rebuild_commands": REBUILD_COMMANDS,
    "citation_bibtex": f"```bibtex\n{citation.bibtex(CITATION)}```",
    "citation_apa": citation.apa_html(CITATION),
}


# -- PDF edition (nox -s pdf): Sphinx's LaTeX builder, latexmk and XeLaTeX --------------------------------
# The PDF is written from the same executed notebooks as the site: the same conf, the same execution
# cache and the same doctrees (build/doctrees), so after `nox -s docs` nothing executes again. Figures
# are vector: the kernels also emit each matplotlib figure as PDF (ipython_kernel_config.py), which
# myst-nb prefers for the LaTeX builder; the site keeps the PNG. The LaTeX of the book's own look is in
# conf/latex/tinyformer.sty.
def _latex_text(html_fragment: str) -> str:
    """An HTML fragment (the APA reference) as LaTeX-escaped plain text; italics kept."""
    from sphinx.util.texescape import escape

    parts = re.split(r"(<i>|</i>)", html_fragment)
    out, italic = [], False
    for part in parts:
        if part in ("<i>", "</i>"):
            italic = part == "<i>"
            out.append(r"\emph{" if italic else "}")
        else:
            out.append(escape(unescape(re.sub(r"<[^>]+>", "", part))))
    return "".join(out)


PROVENANCE = tinyformer_build.provenance(
    version=tinyformer.__version__, library=SOURCE_HASH, seed=SEED, epoch=SOURCE_DATE_EPOCH
)
BUILD_DATE = PROVENANCE["build-date"]
latex_engine = "xelatex"
latex_documents = [("index", "tinyformer.tex", html_title, author, "manual", False)]
latex_toplevel_sectioning = "chapter"
latex_show_pagerefs = True  # every cross-reference also gives its page
latex_show_urls = "footnote"
latex_domain_indices = False  # the index lists glossary terms and API names; no separate module index
latex_additional_files = [str(CONF_DIR / "latex" / "tinyformer.sty")]
latex_elements = {
    "papersize": "a4paper",
    "pointsize": "10pt",
    "extraclassoptions": "openany,oneside",
    "releasename": "Edition",
    "preamble": r"\usepackage{tinyformer}"
    + rf"\hypersetup{{pdftitle={{{html_title}}}, pdfauthor={{{author}}}, pdfsubject={{Edition {release}}}}}",
    # Code and cell output wrap at the margin, long words included; never cut.
    "sphinxsetup": "verbatimwrapslines=true, verbatimforcewraps=true, verbatimhintsturnover=true",
    "printindex": r"\footnotesize\raggedright\printindex",
    # The table of contents is "Contents" (Sphinx would name it after the first toctree's caption).
    "tableofcontents": r"\renewcommand{\contentsname}{Contents}\sphinxtableofcontents",
    "maketitle": rf"""
\begin{{titlepage}}
\centering
\vspace*{{3cm}}
{{\Huge\bfseries tinyformer\par}}
\vspace{{0.8cm}}
{{\LARGE attention and position in Transformers\par}}
\vspace{{0.5cm}}
{{\large An executable textbook\par}}
\vspace{{2.5cm}}
{{\Large {author}\par}}
\vspace{{1.5cm}}
{{\large Edition {release}\par}}
\vspace{{0.3cm}}
{{\large Built {BUILD_DATE}\par}}
\vfill
{{\small Every number and figure in this book was computed by the tinyformer library while the book
was built (torch {PROVENANCE["torch"]},
seed {SEED}, library source {PROVENANCE["source-hash"]}).\par}}
\end{{titlepage}}
\clearpage
\thispagestyle{{empty}}
\noindent\textbf{{How to cite this edition}}\par\medskip
\noindent {_latex_text(citation.apa_html(CITATION))}\par\bigskip
\noindent BibTeX:\par
\begin{{verbatim}}
{citation.bibtex(CITATION).rstrip()}
\end{{verbatim}}
\bigskip
\noindent The changes of each edition are listed in the chapter ``Errata and changes''.
\clearpage
""",
}


def _bibliography_in_its_chapter(app) -> None:
    """Register a LaTeX post-transform: the references go into the "Bibliography" page, not after the index.

    Sphinx gathers every citation into one ``thebibliography`` node at the end of the whole document
    (``BibliographyTransform``, priority 750), which would leave the book's Bibliography page empty.
    """
    from docutils import nodes
    from sphinx.builders.latex.nodes import thebibliography
    from sphinx.transforms.post_transforms import SphinxPostTransform

    class BibliographyInItsChapter(SphinxPostTransform):
        default_priority = 751
        formats = ("latex",)

        def run(self, **kwargs) -> None:
            references = [node for node in self.document.children if isinstance(node, thebibliography)]
            chapter = next(
                (node for node in self.document.findall(nodes.section) if "bibliography" in node["ids"]), None
            )
            if chapter is not None:
                for node in references:
                    node.parent.remove(node)
                    chapter += node

    app.add_post_transform(BibliographyInItsChapter)


def _exercise_labels_for_latex(app) -> None:
    """Register a LaTeX post-transform: each exercise also gets the label its solution's title links to.

    sphinx-exercise 1.2.1 labels an exercise ``exercise:<label>`` in LaTeX, while the title of its
    solution ("Solution to Exercise 1.4 (page 12)") refers to Sphinx's own ``<docname>:<label>``, which
    nothing defines: the link is dead and the page shows "??".
    """
    from docutils import nodes
    from sphinx.transforms.post_transforms import SphinxPostTransform
    from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node

    class ExerciseLabels(SphinxPostTransform):
        default_priority = 900
        formats = ("latex",)

        def run(self, **kwargs) -> None:
            registry = getattr(self.env, "sphinx_exercise_registry", {})
            for node in [*self.document.findall(exercise_enumerable_node), *self.document.findall(exercise_node)]:
                label = node.get("label")
                docname = registry.get(label, {}).get("docname")
                if label and docname:
                    target = rf"\phantomsection\label{{\detokenize{{{docname}:{label}}}}}"
                    node.parent.insert(node.parent.index(node), nodes.raw("", target, format="latex"))

    app.add_post_transform(ExerciseLabels)


def _table_widths_for_latex(app) -> None:
    """Register a LaTeX post-transform: give every table's columns widths from their content.

    Sphinx sets Markdown tables with ``tabulary``, which cannot wrap formulas or long code names, so the
    notation table ran off the page. Each column gets a share of the line proportional to the longer of
    its longest unbreakable word and its average cell, and is set as a fixed-width paragraph column.
    """
    from docutils import nodes
    from sphinx.transforms.post_transforms import SphinxPostTransform

    class TableWidths(SphinxPostTransform):
        default_priority = 900
        formats = ("latex",)

        def run(self, **kwargs) -> None:
            for table in self.document.findall(nodes.table):
                if "colwidths-given" in table["classes"]:
                    continue
                for group in table.findall(nodes.tgroup):
                    specs = [child for child in group.children if isinstance(child, nodes.colspec)]
                    rows = list(group.findall(nodes.row))
                    if not specs or any(len(row.children) != len(specs) for row in rows):
                        continue
                    weights = []
                    for column in range(len(specs)):
                        cells = [row.children[column] for row in rows]
                        texts = [cell.astext() for cell in cells]
                        # A formula does not break at its spaces: it counts as one word of its glyphs, which
                        # are wider than letters of text. Code may break after an underscore (tinyformer.sty).
                        words = [
                            1.3
                            * len(re.sub(r"\\[a-zA-Z]+", "x", re.sub(r"[{}^_ ]|\\(?:text|mathrm)", "", node.astext())))
                            if isinstance(node, nodes.math)
                            else len(word)
                            for cell in cells
                            for node in cell.findall(lambda n: isinstance(n, (nodes.math, nodes.Text)))
                            if not isinstance(node.parent, nodes.math)
                            for word in (re.split(r"[\s_]+", node.astext()) if isinstance(node, nodes.Text) else [""])
                        ]
                        longest = max(words, default=1) + 4  # and the column's padding
                        weights.append(max(longest, 0.7 * sum(map(len, texts)) / len(texts)))
                    for spec, weight in zip(specs, weights, strict=True):
                        spec["colwidth"] = round(100 * weight / sum(weights))
                table["classes"].append("colwidths-given")
                if len(list(table.findall(nodes.row))) > 15:
                    table["classes"].append("longtable")  # may break across pages instead of leaving a gap

    app.add_post_transform(TableWidths)


def _offer_executed_notebook(app, pagename, templatename, context, doctree) -> None:
    """Put a chapter's executed notebook in ``_sources/`` and let the theme's download menu offer it.

    sphinx-book-theme does this only when a launch service (Binder, Colab) is configured, which an
    offline book has none of; the notebook is the one myst-nb wrote to ``jupyter_execute/``.
    """
    executed = Path(app.env.mystnb_config.output_folder) / f"{pagename}.ipynb"
    if doctree is None or not executed.is_file() or "kernelspec" not in app.env.metadata[pagename]:
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    # Markdown cells are written anew from the page as Jupyter Markdown (numbers, links, glued values,
    # figures, listings), and glue works without myst-nb: the notebook runs and reads in any Jupyter.
    # every chapter of the book states it (tests/test_build.py); a small book of the tests may not
    minutes = app.env.metadata[pagename].get("notebook_minutes")
    if minutes is not None and (not str(minutes).isdigit() or int(minutes) < 1):
        raise ValueError(f"docs/{pagename}.md: notebook_minutes must be whole minutes >= 1, not {minutes!r}")
    said = "" if minutes is None else " in under a minute" if minutes == "1" else f" in under {minutes} minutes"
    install = NOTEBOOK_INSTALL.replace("{minutes}", f",{said} on two cores" if said else "")
    notebook = tinyformer_notebook.reader_notebook(
        app, pagename, doctree, nbformat.read(executed, as_version=4), install=install, setup=NOTEBOOK_SETUP
    )
    nbformat.validate(notebook)
    target.write_text(nbformat.writes(notebook) + "\n")
    context["ipynb_source"] = f"{pagename}.ipynb"


def _offer_colab(app, pagename, templatename, context, doctree) -> None:
    """A chapter's launch menu (sphinx-book-theme's rocket): its executed notebook, opened in Colab from the
    branch the hosting workflow pushes the notebooks to. The theme's own Colab button would open the page's
    MyST source (``docs/<chapter>.md``), which Colab cannot read."""
    if context.get("ipynb_source") != f"{pagename}.ipynb":
        return
    repository = repository_url.removeprefix("https://github.com/")
    url = COLAB_URL.format(repository=repository, branch=NOTEBOOK_BRANCH, pagename=pagename)
    context.setdefault("header_buttons", []).append(
        {
            "type": "group",
            "tooltip": "Run this chapter",
            "icon": "fas fa-rocket",
            "label": "launch-buttons",
            "buttons": [
                {
                    "type": "link",
                    "text": "Colab",
                    "tooltip": "Open this chapter's notebook in Colab",
                    "icon": "_static/images/logo_colab.png",
                    "url": url,
                    "label": "colab-button",
                }
            ],
        }
    )


def _bibliography_entries_are_list_items(app, pagename, templatename, context, doctree) -> None:
    """docutils wraps citations in ``role="list"`` but marks each ``role="doc-biblioentry"``, a role
    DPUB-ARIA 1.1 deprecated: screen readers then meet a list with no items (axe-core:
    aria-required-children, critical). Each entry is given the list-item role instead."""
    if "body" in context:
        context["body"] = context["body"].replace('role="doc-biblioentry"', 'role="listitem"')


_CAPTIONED_TABLE = re.compile(
    r'<div class="pst-scrollable-table-container">(?P<table><table[^>]*\bid="(?P<id>[^"]+)"[^>]*>)\s*'
    r"<caption>(?P<caption>.*?)</caption>(?P<rest>.*?</table>\s*)</div>",
    re.DOTALL,
)


def _table_captions_outside_their_scroll_box(app, pagename, templatename, context, doctree) -> None:
    """The theme puts a wide table in a box that scrolls sideways, and the table's caption scrolls with it:
    on a phone, a caption as wide as the table (654 px in a 358 px box) could not be read without scrolling
    each line. Each caption is moved below its box, as the theme shows it, as a paragraph that names the
    table for a screen reader (``aria-labelledby``)."""

    def moved(match: re.Match) -> str:
        label = f"{match['id']}-caption"
        table = match["table"].replace("<table", f'<table aria-labelledby="{label}"', 1)
        return (
            f'<div class="pst-scrollable-table-container">{table}{match["rest"]}</div>\n'
            f'<p class="tinyformer-table-caption" id="{label}">{match["caption"]}</p>'
        )

    if "body" in context:
        context["body"] = _CAPTIONED_TABLE.sub(moved, context["body"])


# The PDF edition in the site: when `nox -s pdf` has written build/pdf/tinyformer.pdf, the site is built
# with a copy of it and every page's download menu links it instead of opening the print dialog.
_PDF = BUILD_DIR / "pdf" / "tinyformer.pdf"
tinyformer_pdf = str(_PDF) if _PDF.is_file() else ""
PDF_NAME = "tinyformer.pdf"


def _offer_pdf_edition(app, pagename, templatename, context, doctree) -> None:
    """Replace the theme's ".pdf" entry (the browser's print dialog, which prints one page) by a link to
    the book's PDF, or, on a site built without it, to the section that says how to make it."""
    if app.config.tinyformer_pdf:
        url, tooltip = context["pathto"](PDF_NAME, 1), f"Download the whole book as PDF (edition {release})"
    else:
        page = context["pathto"]("cite")  # "#" on the cite page itself
        url, tooltip = page.rstrip("#") + "#sec-pdf-edition", "The PDF edition: how to build it"
    for group in context.get("header_buttons", []):
        for index, button in enumerate(group.get("buttons", [])):
            if button.get("label") == "download-pdf-button":
                group["buttons"][index] = {
                    "type": "link",
                    "url": url,
                    "text": ".pdf",
                    "tooltip": tooltip,
                    "icon": "fas fa-file-pdf",
                    "label": "download-pdf-button",
                }


def _copy_pdf_edition(app, exception) -> None:
    if exception is None and app.builder.format == "html" and app.config.tinyformer_pdf:
        shutil.copyfile(app.config.tinyformer_pdf, Path(app.outdir) / PDF_NAME)


def setup(app):
    app.add_config_value("tinyformer_pdf", "", "html", types=[str])
    app.connect("html-page-context", _offer_pdf_edition, priority=502)  # after the theme's buttons (501)
    app.connect("build-finished", _copy_pdf_edition)
    app.connect("html-page-context", _offer_executed_notebook, priority=500)  # before the theme's buttons
    app.connect("html-page-context", _bibliography_entries_are_list_items)
    app.connect("html-page-context", _offer_colab, priority=502)  # after the theme's buttons (501)
    app.connect("html-page-context", _table_captions_outside_their_scroll_box)
    tinyformer_site.setup(app)
    _bibliography_in_its_chapter(app)
    _exercise_labels_for_latex(app)
    _table_widths_for_latex(app)
