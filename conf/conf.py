"""Sphinx configuration of the tinyformer book, used as ``sphinx-build -c conf docs build/html``.

Everything that shapes the build lives in this folder: this file, the build safeguards
(``_ext/tinyformer_build.py``: cache key, provenance, glue checks), the chapter kernels' start-up
(``ipython_kernel_config.py``), the bibliography (``references.bib``), the matplotlib style
(``matplotlibrc``) and the pinned versions (``constraints.txt``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import nbformat

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

# -- Project ------------------------------------------------------------------------------------------
project = "tinyformer"
author = "The tinyformer authors"
copyright = "2026, The tinyformer authors"
release = version = tinyformer.__version__

# -- General ------------------------------------------------------------------------------------------
extensions = [
    "myst_nb",
    "tinyformer_build",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinxcontrib.bibtex",
    "sphinx_design",
    "sphinx_copybutton",
    "sphinx_exercise",
    "sphinx_togglebutton",
    "tinyformer_course",  # conf/_ext: reading time of each chapter, the lecturer's tables
]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "jupyter_execute"]
# Template overrides of the theme; each file says which upstream issue it works around. The pages'
# templates are in _templates/pages; the theme imports its macros as "../macros/buttons.html", which
# Sphinx looks up beside each template folder, hence _templates/macros.
templates_path = ["_templates/pages"]
nitpicky = True
# Types from other projects: no inventory is fetched (the build is offline), so these stay unlinked.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|np|matplotlib|collections\.abc|pathlib|typing)(\..*)?"),
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
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# -- Math, offline -----------------------------------------------------------------------------------
# MathJax is served from the book, not a CDN, from the django-static-mathjax wheel (MathJax 3.2.2,
# Apache-2.0), pinned in conf/constraints.txt. Not a combined component: tex-svg.js (2.1 MB, its SVG
# font data alone 1 MB) made the page weigh more than everything else on it together. The page loads
# MathJax's loader, which fetches only the pieces listed in mathjax3_config: TeX input with the
# packages of MathJax's tex component (autoload fetches any other on first use), HTML output with its
# web fonts (each loaded only if a formula needs it) and the assistive MathML for screen readers.
MATHJAX_DIR = Path(importlib.util.find_spec("mathjax").submodule_search_locations[0]) / "static" / "mathjax" / "es5"
MATHJAX_PARTS = [
    "startup.js",
    "core.js",
    "input/tex.js",
    "input/tex/extensions",
    "output/chtml.js",
    "output/chtml/fonts/tex.js",
    "output/chtml/fonts/woff-v2",
    "a11y/assistive-mml.js",
]
_mathjax_static = BUILD_DIR / "mathjax-static"
tinyformer_site.copy_parts(MATHJAX_DIR, MATHJAX_PARTS, _mathjax_static / "mathjax")
html_static_path = [str(_mathjax_static)]
mathjax_path = "mathjax/startup.js"
mathjax3_config = {
    "loader": {"load": ["input/tex", "output/chtml", "a11y/assistive-mml"]},
    "options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"},
}

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
    # Provenance in the footer of every page: what computed the numbers, and when.
    "extra_footer": tinyformer_build.provenance_html(
        tinyformer_build.provenance(
            version=tinyformer.__version__, library=SOURCE_HASH, seed=SEED, epoch=SOURCE_DATE_EPOCH
        )
    ),
}
# Follow the reader's light/dark setting; left unset, the theme logs a console error on a first visit.
html_context = {"default_mode": "auto"}
html_favicon = "favicon.svg"  # a local icon: without one the browser asks for /favicon.ico and gets a 404
# Where the book is published: the one base URL of the sitemap, the link previews and CITATION.cff.
html_baseurl = "https://tinyformer.github.io/tinyformer/"
html_static_path += [str(CONF_DIR / "tinyformer.css")]
html_css_files = ["tinyformer.css"]  # the book's own styles: contrast, overflow, figures
# Search: chapters rank above API entries (Sphinx's supported scorer hook), and result snippets are
# made without the theme's buttons or raw TeX (conf/tinyformer-search.js).
html_search_scorer = str(CONF_DIR / "search-scorer.js")
html_static_path += [str(CONF_DIR / "tinyformer-search.js")]
html_js_files = [("tinyformer-search.js", {"defer": "defer"})]

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
myst_substitutions = {
    "citation_bibtex": f"```bibtex\n{citation.bibtex(CITATION)}```",
    "citation_apa": citation.apa_html(CITATION),
}


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
    # Glue markup becomes the values and figures the page shows, so the notebook reads right in Jupyter.
    glue_file = executed.with_name(f"{Path(pagename).name}.glue.json")
    stored = json.loads(glue_file.read_text()) if glue_file.is_file() else {}
    notebook = tinyformer_notebook.paste_glue(nbformat.read(executed, as_version=4), stored)
    nbformat.validate(notebook)
    target.write_text(nbformat.writes(notebook) + "\n")
    context["ipynb_source"] = f"{pagename}.ipynb"


def _bibliography_entries_are_list_items(app, pagename, templatename, context, doctree) -> None:
    """docutils wraps citations in ``role="list"`` but marks each ``role="doc-biblioentry"``, a role
    DPUB-ARIA 1.1 deprecated: screen readers then meet a list with no items (axe-core:
    aria-required-children, critical). Each entry is given the list-item role instead."""
    if "body" in context:
        context["body"] = context["body"].replace('role="doc-biblioentry"', 'role="listitem"')


def setup(app):
    app.connect("html-page-context", _offer_executed_notebook, priority=500)  # before the theme's buttons
    app.connect("html-page-context", _bibliography_entries_are_list_items)
    tinyformer_site.setup(app)
