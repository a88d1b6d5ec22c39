"""The built book: executed from scratch, free of warnings and errors, its glued numbers equal to the library's.

The ``book`` fixture (tests/conftest.py) builds it once per test session.
"""

import json
import math
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from myst_nb.core.variables import format_plain_text

from tinyformer.attention import MultiHeadAttention
from tinyformer.positional import pair_wavelengths
from tinyformer.tasks import middle_word_attention

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CHAPTERS = sorted(p.stem for p in DOCS.glob("*.md") if p.read_text().startswith("---\njupytext:"))
GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")
GLUE_FIGURE = re.compile(r"^```\{glue:figure\} (\S+)", re.MULTILINE)

pytestmark = pytest.mark.book


def rendered(book, chapter):
    return BeautifulSoup((book / "html" / f"{chapter}.html").read_text(), "html.parser")


def glued(book, chapter):
    return json.loads((book / "jupyter_execute" / f"{chapter}.glue.json").read_text())


def test_there_is_a_chapter():
    assert "multi-head-attention" in CHAPTERS


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_value_is_rendered_as_formatted(book, chapter):
    source = (DOCS / f"{chapter}.md").read_text()
    data = glued(book, chapter)
    text = " ".join(rendered(book, chapter).get_text().split())
    roles = GLUE_ROLE.findall(source)
    assert roles, "the chapter glues no numbers"
    for key, spec in roles:
        plain = data[key]["data"]["text/plain"]
        assert not plain.startswith(("np.", "tensor(", "array(")), f"{key} was glued as a NumPy/torch repr: {plain}"
        expected = format_plain_text(plain, spec or "")
        assert expected in text, f"glue {key!r} should render as {expected!r}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_error_or_stderr_output(book, chapter):
    page = rendered(book, chapter)
    for cell in page.select("div.cell"):
        expected_error = "tag_raises-exception" in cell.get("class", [])
        assert not cell.select(".output.stderr"), f"stderr output in {chapter}: {cell.get_text()[:300]}"
        if not expected_error:
            assert not cell.select(".output.traceback"), f"a cell raised in {chapter}: {cell.get_text()[:300]}"
    # The one cell that is meant to raise shows its error.
    expected = page.select("div.cell.tag_raises-exception")
    if chapter == "multi-head-attention":
        assert expected, "the odd-width loop cell should be tagged raises-exception"
    assert all(c.select(".output.traceback") for c in expected)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_figure_is_present_with_alt_text_and_caption(book, chapter):
    names = GLUE_FIGURE.findall((DOCS / f"{chapter}.md").read_text())
    page = rendered(book, chapter)
    figures = page.select("figure")
    assert len(figures) == len(names) >= 5
    for figure in figures:
        image = figure.find("img")
        assert image is not None, f"figure without an image: {figure}"
        assert image.get("alt"), f"figure without alt text: {figure}"
        assert (book / "html" / image["src"]).stat().st_size > 10_000
        assert figure.find("figcaption").get_text(strip=True)


def test_results_equal_what_the_library_computes_now(book):
    data = {k: v["data"]["text/plain"] for k, v in glued(book, "multi-head-attention").items()}

    def value(key):
        return float(data[key])

    for result in middle_word_attention(seed=0, d_model=8):
        tag = f"{'pe' if result.with_encoding else 'nope'}_{result.sentence[0]}_first"
        for word, weight in result.weights.items():
            assert value(f"{tag}_{word}") == weight
    for num_heads in (1, 2, 8, 64):
        layer = MultiHeadAttention(512, num_heads)
        assert value(f"params_h{num_heads}") == sum(p.numel() for p in layer.parameters()) == 4 * 512 * 513
        assert value(f"head_dim_h{num_heads}") == 512 // num_heads
    assert value("wl_last") == pair_wavelengths(128)[-1].item()
    assert math.isclose(value("wl_first"), 2 * math.pi)
    assert value("apply_head_dim") == 8
    assert value("nope_gap") == 0.0
    assert value("rotation_gap") < 1e-9
    assert value("jacobian_nonzero") == value("jacobian_size") == 36
    assert (value("moved_concat"), value("moved_out")) == (2, 8)


def test_api_reference_and_bibliography_are_built(book):
    api = rendered(book, "api").get_text()
    for name in ("sinusoidal_positional_encoding", "MultiHeadAttention", "scaled_dot_product_attention", "causal_mask"):
        assert name in api
    assert "Attention Is All You Need" in rendered(book, "bibliography").get_text()
