"""The chapter notebook a reader downloads, made to run and read in any Jupyter.

A chapter's executed notebook (myst-nb's ``jupyter_execute/<chapter>.ipynb``) keeps its markdown cells
as MyST: Jupyter would show ``{glue:text}`` roles, ``{numref}`` and ``{cite:t}`` as literal text,
``{math}`` directives as code and exercises as fenced blocks, and would not show included listings at
all. :func:`reader_notebook` writes each markdown cell anew from the page's resolved doctree, the one
Sphinx renders to HTML, with sphinx-markdown-builder's Markdown translator: so cross-references carry
the numbers the page shows and link to the published page, citations read as on the page, glued values
and figures are pasted (a figure as a PNG in the cell's attachments, nbformat 4's standard for images in
markdown cells), formulas are ``$``/``$$`` math with their equation numbers, included listings are code
blocks, exercises are headed paragraphs and each solution is folded in a ``<details>`` element.

Which doctree nodes make which markdown cell is decided by their source lines: myst-nb's reader gives
the first line of every cell (``source_map``), and every node carries the line it came from.

Code cells and their outputs are kept as executed, except that the import of myst-nb's ``glue`` falls
back to a function that shows its value (or nothing, when ``display=False``) where myst-nb is not
installed, so the notebook needs only tinyformer and its requirements; a glued figure is shown
where the cell runs, and a cell that glues one keeps its outputs unfolded, so a reader who changes
the code sees the figure redrawn.
"""

from __future__ import annotations

import base64
import bisect
import copy
import posixpath
import textwrap
from pathlib import Path
from urllib.parse import urljoin

import nbformat
from docutils import nodes
from docutils.utils import new_document
from myst_nb.core.read import read_myst_markdown_notebook
from sphinx_markdown_builder.contexts import IndentContext, SubContext, SubContextParams, TableContext, WrappedContext
from sphinx_markdown_builder.translator import MarkdownTranslator
from tabulate import tabulate

#: The import of myst-nb's glue in a chapter, and what the downloaded notebook has instead.
GLUE_IMPORT = "from myst_nb import glue"
GLUE_FALLBACK = """\
try:  # in the book's build, myst-nb pastes each glued value into the text
    from myst_nb import glue
except ImportError:  # in any other Jupyter the text already shows the values

    def glue(name, variable, display=True):
        \"\"\"Show ``variable`` where the book would show it, or nothing when ``display=False``;
        a figure is always shown, drawn anew from what this run computed.\"\"\"
        if display or hasattr(variable, "savefig"):
            from IPython.display import display as show

            show(variable)"""

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml"}


class NotebookError(ValueError):
    """A chapter's doctree has something the reader's notebook cannot show."""


class _Settings:
    """The configuration the Markdown translator reads (sphinx-markdown-builder's, with its defaults)."""

    markdown_http_base = ""
    markdown_uri_doc_suffix = ".html"
    markdown_anchor_sections = False
    markdown_anchor_signatures = False
    markdown_docinfo = False
    markdown_bullet = "-"
    markdown_flavor = ""

    def __init__(self, config):
        self._config = config

    def __getattr__(self, name):
        return getattr(self._config, name)


class _Builder:
    """What the translator asks of its builder, answered for one page of the HTML build."""

    def __init__(self, app, docname: str):
        self.app = app
        self.env = app.env
        self.config = _Settings(app.config)
        self.current_doc_name = docname
        self.download_dir = "_downloads"

    def get_target_uri(self, docname: str, typ: str | None = None) -> str:
        return self.app.builder.get_target_uri(docname, typ)


class _Table(TableContext):
    """sphinx-markdown-builder's table, with every cell's text as written: tabulate would read "1.000"
    as a number and print "1", losing the precision the page shows."""

    def make(self):
        ctx = SubContext()
        prefix = self.internal_context.make()
        if prefix:
            ctx.add(prefix)
        content = [*self.headers, *self.body]
        if content:
            headers = self.make_row(content[0])
            body = [self.make_row(row) for row in content[1:]]
            ctx.add(tabulate(body, headers=headers, tablefmt="github", disable_numparse=True), prefix_eol=2)
        return ctx.make()


class _Translator(MarkdownTranslator):
    """sphinx-markdown-builder's translator, for a cell of a chapter: links to the published page,
    numbered figures and equations, images as attachments, exercises and solutions; an unknown node
    stops the build rather than vanish."""

    def __init__(self, document, builder: _Builder, *, page_url: str, attachments: dict):
        super().__init__(document, builder)
        self.page_url = page_url
        self.attachments = attachments
        self.fignumbers = builder.env.toc_fignumbers.get(builder.current_doc_name, {})
        self.numfig_format = builder.app.config.numfig_format

    def unknown_visit(self, node):
        raise NotebookError(
            f"{self.builder.current_doc_name}: the downloaded notebook cannot show a {type(node).__name__} node "
            f"(line {node.line}); teach conf/_ext/tinyformer_notebook.py how"
        )

    def _number(self, kind: str, node) -> str | None:
        for node_id in node.get("ids", []):
            if node_id in self.fignumbers.get(kind, {}):
                return ".".join(map(str, self.fignumbers[kind][node_id]))
        return None

    # Links: every internal reference points at the published page; external ones stay as they are.
    def _url(self, node) -> str:
        if "refid" in node:
            return f"{self.page_url}#{node['refid']}"
        uri = node.get("refuri", "")
        if node.get("internal") or not ("://" in uri or uri.startswith("mailto:")):
            return urljoin(self.page_url, uri)
        return uri

    def visit_reference(self, node):
        self._push_context(WrappedContext("[", f"]({self._url(node)})"))

    def depart_reference(self, node):
        self._pop_context()

    def visit_download_reference(self, node):
        target = node.get("refuri") or posixpath.join("_downloads", node.get("filename", node.get("reftarget", "")))
        self._push_context(WrappedContext("[", f"]({urljoin(self.page_url, target)})"))

    def depart_download_reference(self, node):
        self._pop_context()

    def visit_target(self, node):
        raise nodes.SkipNode

    def visit_raw(self, node):
        raise nodes.SkipNode

    # Figures, numbered as on the page; the image travels in the cell's attachments.
    def visit_container(self, node):
        if node.get("nb_element") == "mime_bundle":
            images = [child for child in node.children if child.get("mime_type", "").startswith("image/")]
            if not images:
                raise NotebookError(f"a glued output without an image (line {node.line})")
            preferred = next((c for c in images if c["mime_type"] == "image/png"), images[0])
            preferred.walkabout(self)
            raise nodes.SkipNode

    def depart_container(self, node):
        pass

    def visit_image(self, node):
        uri = node.get("candidates", {}).get("*", node["uri"])
        path = (Path(self.builder.app.srcdir) / uri).resolve()
        mime = IMAGE_TYPES.get(path.suffix.lower())
        if mime is None or not path.is_file():
            raise NotebookError(f"image {uri!r} (line {node.line}) is not a PNG, JPEG or SVG file that exists")
        name = f"{path.stem[:16]}{path.suffix}"
        data = path.read_bytes()
        self.attachments[name] = {mime: data.decode() if mime == "image/svg+xml" else base64.b64encode(data).decode()}
        alt = " ".join(node.get("alt", "figure").split()).replace("[", "(").replace("]", ")")
        self.ensure_eol(2)
        self.add(f"![{alt}](attachment:{name})", suffix_eol=2)
        raise nodes.SkipNode

    def visit_caption(self, node):
        number = self._number("figure", node.parent)
        self.ensure_eol(2)
        self.add(f"*{self.numfig_format['figure'] % number}.* " if number else "")

    def depart_caption(self, node):
        self.ensure_eol(2)

    def visit_legend(self, node):
        pass

    def depart_legend(self, node):
        pass

    def visit_table(self, node):
        number = self._number("table", node)
        titles = [child for child in node.children if isinstance(child, nodes.title)]
        if titles:
            label = f"{self.numfig_format['table'] % number}. " if number else ""
            self.ensure_eol(2)
            self._push_status(escape_text=True)
            self.add(f"*{label}")
            for child in titles[0].children:
                child.walkabout(self)
            self.add("*", suffix_eol=2)
            self._pop_status()
            node.remove(titles[0])
        self._push_context(_Table(params=SubContextParams(2, 1)))

    def depart_table(self, node):
        self._pop_context()

    # Listings: Sphinx's "default" highlighting (a literalinclude without :language:) is Python.
    def visit_literal_block(self, node):
        if node.get("language") in {"default", "python3", "ipython3"}:
            node = node.copy()
            node["language"] = "python"
        super().visit_literal_block(node)

    # Formulas: $$ ... $$ with the page's equation number.
    def visit_math_block(self, node):
        number = self._number("displaymath", node)
        latex = node.astext().strip()
        if number:
            latex += f" \\tag{{{number}}}"
        self.ensure_eol(2)
        self.add(f"$$\n{latex}\n$$", suffix_eol=2)
        raise nodes.SkipNode

    # Admonitions, exercises and solutions: a bold title, then the body; a solution folded. Not in a
    # blockquote: JupyterLab's math pass protects only code fences at the start of a line, so a "$" in a
    # fenced console block inside "> " was read as math.
    def _titled(self, node, prefix: str = ""):
        title = node.children[0] if node.children and isinstance(node.children[0], nodes.title) else None
        self.ensure_eol(2)
        self._push_context(IndentContext(prefix, empty=True))
        if title is not None:
            self.add("**")
            for child in title.children:
                child.walkabout(self)
            self.add("**", suffix_eol=2)
        for child in node.children[1 if title is not None else 0 :]:
            child.walkabout(self)
        self._pop_context()
        self.ensure_eol(2)
        raise nodes.SkipNode

    def visit_admonition(self, node):
        self._titled(node)

    visit_note = visit_tip = visit_hint = visit_important = visit_warning = visit_admonition

    def visit_exercise_enumerable_node(self, node):
        number = self._number("exercise", node)
        title = node.children[0]
        heading = nodes.title("", "", nodes.Text(self.numfig_format["exercise"] % number), *title.children)
        node = node.deepcopy()
        node.children[0] = heading
        self._titled(node, prefix="")

    visit_exercise_node = visit_exercise_enumerable_node

    def visit_solution_node(self, node):
        self.ensure_eol(2)
        self.add("<details>\n<summary>" + _plain(node.children[0]) + "</summary>", suffix_eol=2)
        for child in node.children[1:]:
            child.walkabout(self)
        self.ensure_eol(2)
        self.add("</details>", suffix_eol=2)
        raise nodes.SkipNode


def _plain(node) -> str:
    """A title as plain text for HTML (``<summary>``), with its characters escaped."""
    from html import escape

    return escape(" ".join(node.astext().split()))


def _blocks(node, depth: int):
    """The blocks of a doctree in reading order: ``(node, depth)``, a section as its title."""
    for child in node.children:
        if isinstance(child, nodes.section):
            yield child, depth + 1
            yield from _blocks(child, depth + 1)
        elif isinstance(child, nodes.title) and isinstance(node, nodes.section):
            continue
        else:
            yield child, depth


def _line(node) -> int | None:
    if node.line is not None:
        return node.line
    return next((n.line for n in node.findall(nodes.Element) if n.line is not None), None)


def _section_number(builder: _Builder, section) -> str:
    """The section's number as the page shows it ("1.5. "), or "" for an unnumbered one."""
    numbers = builder.env.toc_secnumbers.get(builder.current_doc_name, {})
    anchors = [f"#{node_id}" for node_id in section.get("ids", [])]
    if section.parent is not None and isinstance(section.parent, nodes.document):
        anchors.append("")  # the chapter's own heading
    number = next((numbers[anchor] for anchor in anchors if anchor in numbers), None)
    return ".".join(map(str, number)) + ". " if number else ""


def _render(blocks, *, builder: _Builder, settings, page_url: str, attachments: dict) -> str:
    """The Markdown of a cell's blocks; a section becomes a heading of its depth."""
    parts = []
    for block, depth in blocks:
        translator = _Translator(new_document("", settings), builder, page_url=page_url, attachments=attachments)
        if isinstance(block, nodes.section):
            title = block.next_node(nodes.title)
            nodes.paragraph("", "", *[child.deepcopy() for child in title.children]).walkabout(translator)
            parts.append("#" * depth + " " + _section_number(builder, block) + " ".join(translator.astext().split()))
        else:
            block.deepcopy().walkabout(translator)
            parts.append(translator.astext().strip())
    return "\n\n".join(part for part in parts if part)


def _glues_a_figure(cell) -> bool:
    """Whether the executed code ``cell`` glued an image (myst-nb's glue record of a figure)."""
    return any(
        "scrapbook" in output.get("metadata", {}) and any(key.endswith("image/png") for key in output.get("data", {}))
        for output in cell.get("outputs", [])
    )


def reader_notebook(
    app, docname: str, doctree, executed: nbformat.NotebookNode, install: str = "", setup: str = ""
) -> nbformat.NotebookNode:
    """The notebook a reader downloads for the chapter ``docname``: ``executed`` (myst-nb's executed
    notebook) with every markdown cell written from ``doctree`` (the page's resolved doctree) as
    Jupyter Markdown, and the glue import made to work without myst-nb. ``install`` (Markdown, with
    ``{page}`` for the page's URL) is added to the first markdown cell: how to get what the notebook
    imports; ``setup`` (Python), when given, becomes a code cell after it, which installs that where it is
    missing (Colab). Cells the page removes are folded in Jupyter and keep no outputs, and a cell that raises
    on purpose (``raises-exception``) prints its error, so "Run all" runs to the end.

    Raises:
        NotebookError: the notebook's cells do not match the page's source, or the doctree has a node
            the notebook cannot show.
    """
    source = Path(app.env.doc2path(docname)).read_text()
    parsed = read_myst_markdown_notebook(source, add_source_map=True)
    starts = [line + 1 for line in parsed.metadata["source_map"]]  # 1-based, as docutils counts
    kinds = [cell.cell_type for cell in parsed.cells]
    if kinds != [cell.cell_type for cell in executed.cells]:
        raise NotebookError(f"{docname}: the executed notebook's cells differ from those of {docname}.md")
    by_cell: dict[int, list] = {index: [] for index, kind in enumerate(kinds) if kind == "markdown"}
    line = 0
    for block, depth in _blocks(doctree, 0):
        if isinstance(block, nodes.container) and block.get("nb_element") == "cell_code":
            line = _line(block) or line
            continue
        line = _line(block) or line
        index = bisect.bisect_right(starts, line) - 1
        if index not in by_cell:
            raise NotebookError(f"{docname}: line {line} ({type(block).__name__}) is in no markdown cell")
        by_cell[index].append((block, depth))
    builder = _Builder(app, docname)
    page_url = urljoin(app.config.html_baseurl, app.builder.get_target_uri(docname))
    notebook = copy.deepcopy(executed)
    first_markdown = True
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            attachments: dict = {}
            cell.source = _render(
                by_cell[index], builder=builder, settings=doctree.settings, page_url=page_url, attachments=attachments
            )
            if first_markdown and install:
                cell.source = f"{cell.source}\n\n{install.format(page=page_url)}"
                first_markdown = False
            cell.pop("attachments", None)
            if attachments:
                cell.attachments = attachments
            continue
        tags = set(cell.metadata.get("tags", []))
        # What the page hides, Jupyter folds (JupyterLab's and Notebook 7's cell metadata): the glue and
        # claim-check cells, which also compute exercise answers, are not in a student's face.
        hidden = {"source_hidden": bool(tags & {"remove-cell", "remove-input", "hide-input", "hide-cell"})}
        hidden["outputs_hidden"] = bool(tags & {"remove-cell", "remove-output", "hide-output", "hide-cell"})
        if _glues_a_figure(cell):
            hidden["outputs_hidden"] = False  # run again, the cell draws its figure from the reader's numbers
        if any(hidden.values()):
            cell.metadata["jupyter"] = {key: value for key, value in hidden.items() if value}
        if "remove-cell" in tags:
            cell.outputs = []  # glue records: the values are in the text; running the cell makes them again
        if "raises-exception" in tags:
            # The book shows this error on purpose; in Jupyter an error stops "Run all", so it is printed.
            body = textwrap.indent(cell.source, "    ")
            cell.source = f'try:\n{body}\nexcept Exception as error:  # the error this cell shows\n    print(f"{{type(error).__name__}}: {{error}}")'
        if GLUE_IMPORT in cell.source.splitlines():
            lines = cell.source.splitlines()
            cell.source = "\n".join(GLUE_FALLBACK if line == GLUE_IMPORT else line for line in lines)
    if setup:
        first = next(index for index, cell in enumerate(notebook.cells) if cell.cell_type == "markdown")
        cell = nbformat.v4.new_code_cell(setup, metadata={"tags": ["tinyformer-setup"]})
        cell.id = "tinyformer-setup"  # a fixed id: two builds of one commit give the same bytes
        notebook.cells.insert(first + 1, cell)
    return notebook
