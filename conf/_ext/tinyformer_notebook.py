"""The chapter notebook a reader downloads: glue references replaced by what they show on the page.

A chapter's executed notebook (myst-nb's ``jupyter_execute/<chapter>.ipynb``) keeps its markdown cells
as written, so every ``{glue:text}`key:.2f``` and every ``{glue:figure}`` directive would reach Jupyter
as literal markup: Jupyter knows nothing of myst-nb's glue. myst-nb has no option to write the pasted
values back (its glue roles act only while Sphinx renders the page), so :func:`paste_glue` does what
the roles do, over the notebook's text: a role becomes the glued value, formatted with myst-nb's own
formatter, and a glue figure becomes a Markdown image whose PNG travels in the cell's attachments
(nbformat 4's standard for images in markdown cells), followed by its caption.

Code cells and their outputs are left exactly as executed, so the notebook still runs in Jupyter.
"""

from __future__ import annotations

import copy
import functools
import re

import nbformat
from myst_nb.core.variables import format_plain_text
from myst_nb.ext.glue import extract_glue_data_cell

# {glue}`key`, {glue:}`key`, {glue:any}`key`, {glue:text}`key:fmt`, {glue:md}`key:fmt`
GLUE_ROLE = re.compile(r"\{glue(?::(?P<kind>any|text|md)?)?\}`(?P<content>[^`]+)`")
# ```{glue:figure} key ... ``` or :::{glue:figure} key ... ::: (and the other glue directives)
GLUE_DIRECTIVE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{glue(?::(?P<kind>any|figure|math|md)?)?\}[ \t]+(?P<key>\S+)[ \t]*\n"
    r"(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
OPTION = re.compile(r"^:(?P<name>[\w-]+):[ \t]*(?P<value>.*)$")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")


def glued_outputs(notebook: nbformat.NotebookNode) -> dict[str, nbformat.NotebookNode]:
    """Every glued output of the notebook by key, its MIME bundle without myst-nb's hidden prefix."""
    glued = {}
    for cell in copy.deepcopy(notebook).cells:
        if cell.cell_type == "code":
            glued.update(extract_glue_data_cell(cell))
    return glued


def _split_key(content: str) -> tuple[str, str]:
    key, _, fmt = content.partition(":")
    return key.rpartition("::")[2], fmt


def _role_value(kind: str | None, content: str, glued: dict) -> str:
    key, fmt = _split_key(content)
    if key not in glued:
        raise KeyError(f"glue key {key!r} is not glued in this notebook")
    data = glued[key]["data"]
    if kind == "md" and "text/markdown" in data:
        return data["text/markdown"]
    return format_plain_text(data["text/plain"], fmt)


def _directive_markdown(kind: str | None, key: str, body: str, glued: dict, attachments: dict) -> str:
    if key not in glued:
        raise KeyError(f"glue key {key!r} is not glued in this notebook")
    data = glued[key]["data"]
    lines = body.splitlines()
    options = {}
    while lines and (match := OPTION.match(lines[0].strip())):
        options[match["name"]] = match["value"]
        lines.pop(0)
    caption = "\n".join(lines).strip()
    image_type = next((mime for mime in IMAGE_TYPES if mime in data), None)
    if image_type is not None:
        name = f"{key}.{image_type.split('/')[1].split('+')[0]}"
        attachments[name] = {image_type: data[image_type]}
        alt = " ".join(options.get("alt", caption or key).split()).replace("[", "(").replace("]", ")")
        return f"![{alt}](attachment:{name})" + (f"\n\n{caption}" if caption else "")
    if kind == "math" and "text/latex" in data:
        latex = data["text/latex"].strip().strip("$")
        return f"$$\n{latex}\n$$"
    if kind == "md" and "text/markdown" in data:
        return data["text/markdown"]
    return format_plain_text(data["text/plain"], "")


def _paste_directive(match: re.Match, *, glued: dict, attachments: dict) -> str:
    return _directive_markdown(match["kind"], match["key"], match["body"], glued, attachments)


def paste_glue(notebook: nbformat.NotebookNode, stored: dict | None = None) -> nbformat.NotebookNode:
    """A copy of ``notebook`` whose markdown cells show glued values and figures instead of glue markup.

    Args:
        notebook: the executed notebook.
        stored: glued outputs by key that are no longer in ``notebook``: myst-nb takes the hidden ones
            (``display=False``) out of the notebook it writes and keeps them in ``<page>.glue.json``.

    Raises:
        KeyError: a markdown cell names a key that no code cell of the notebook glued.
    """
    glued = {key: nbformat.from_dict(output) for key, output in (stored or {}).items()}
    glued.update(glued_outputs(notebook))
    pasted = copy.deepcopy(notebook)
    for cell in pasted.cells:
        if cell.cell_type != "markdown" or "{glue" not in cell.source:
            continue
        attachments = dict(cell.get("attachments", {}))
        source = GLUE_DIRECTIVE.sub(
            functools.partial(_paste_directive, glued=glued, attachments=attachments), cell.source
        )
        cell.source = GLUE_ROLE.sub(lambda m: _role_value(m["kind"], m["content"], glued), source)
        if attachments:
            cell.attachments = attachments
    return pasted
