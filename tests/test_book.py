"""The built book: executed from scratch, free of warnings and errors, its glued numbers equal to the library's.

The ``book`` fixture (tests/conftest.py) builds it once per test session.
"""

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from booktools import rendered
from myst_nb.core.variables import format_plain_text

from tinyformer.labs.tasks import (
    closest_rows,
    middle_word_attention,
    relative_offset_attention,
    scaling_statistics,
)
from tinyformer.models.attention import MultiHeadAttention
from tinyformer.models.positional import pair_wavelengths, sinusoidal_positional_encoding

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_spec = importlib.util.spec_from_file_location("tinyformer_claims", ROOT / "conf" / "_ext" / "tinyformer_claims.py")
claims = importlib.util.module_from_spec(_spec)
sys.modules["tinyformer_claims"] = claims  # dataclasses look their module up by name
_spec.loader.exec_module(claims)
CHAPTERS = sorted(p.stem for p in DOCS.glob("*.md") if p.read_text().startswith("---\njupytext:"))
GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")
GLUE_FIGURE = re.compile(r"^```\{glue:figure\} (\S+)", re.MULTILINE)

pytestmark = pytest.mark.book


def glued(book, chapter):
    return json.loads((book / "jupyter_execute" / f"{chapter}.glue.json").read_text())


def test_there_is_a_chapter():
    assert {"attention", "positional-encoding", "multi-head-attention", "transformer"} <= set(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_value_is_rendered_as_formatted(book, chapter):
    source = (DOCS / f"{chapter}.md").read_text()
    data = glued(book, chapter)
    text = " ".join(rendered(book, chapter).get_text().split())
    roles = GLUE_ROLE.findall(source)
    assert roles, "the chapter glues no numbers"
    for key, spec in roles:
        # (A glued NumPy/torch repr already fails the build: conf/_ext/tinyformer_build.py, test_build_failures.py.)
        # spaces as the page text above (no-break spaces, as in "0.62 ± 0.05", become plain ones)
        expected = " ".join(format_plain_text(data[key]["data"]["text/plain"], spec or "").split())
        assert expected in text, f"glue {key!r} should render as {expected!r}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_only_the_expected_error_cell_shows_a_traceback(book, chapter):
    """(Stderr and unexpected errors fail the build itself; test_build_failures.py proves it.)"""
    page = rendered(book, chapter)
    for cell in page.select("div.cell:not(.tag_raises-exception)"):
        assert not cell.select(".output.traceback"), f"a cell raised in {chapter}: {cell.get_text()[:300]}"
    # The one cell that is meant to raise shows its error.
    expected = page.select("div.cell.tag_raises-exception")
    if chapter == "multi-head-attention":
        assert expected, "the view-after-transpose cell should be tagged raises-exception"
    assert all(c.select(".output.traceback") for c in expected)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_figure_is_on_the_page_with_a_caption(book, chapter):
    """(Alt text is checked where it matters, in the browser: test_browser.py.)"""
    names = GLUE_FIGURE.findall((DOCS / f"{chapter}.md").read_text())
    page = rendered(book, chapter)
    figures = page.select("figure")
    assert len(figures) == len(names) >= 1
    for figure in figures:
        image = figure.find("img")
        assert image is not None, f"figure without an image: {figure}"
        assert (book / "html" / image["src"]).stat().st_size > 10_000
        assert figure.find("figcaption").get_text(strip=True)


def test_results_equal_what_the_library_computes_now(book):
    positional = {k: v["data"]["text/plain"] for k, v in glued(book, "positional-encoding").items()}
    heads = {k: v["data"]["text/plain"] for k, v in glued(book, "multi-head-attention").items()}

    def value(key):
        return float(positional[key] if key in positional else heads[key])

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
    table = sinusoidal_positional_encoding(2048, 128, dtype=torch.float64)
    first_pair, full_width = closest_rows(table[:1000, :2]), closest_rows(table)
    assert (value("collision_p"), value("collision_q")) == first_pair.positions
    assert value("collision_distance") == first_pair.distance
    assert value("min_row_distance") == full_width.distance
    band = relative_offset_attention(offset=3, d_model=64, seq_len=24, seed=0)
    assert value("band_weight") == band.on_offset
    assert value("band_weight_words") == band.on_offset_words
    queries = torch.arange(3, 24)
    assert value("ch2_band_kept_clean") == value("ch2_band_rows") == len(queries)
    kept = band.weights_words[queries].argmax(-1) == queries - 3
    assert value("ch2_band_kept_words") == kept.sum().item() < len(queries)
    # Ex. 2.2(b): 32 copies of the first pair put the same offset closest, sqrt(32) times as far apart.
    repeated = closest_rows(table[:1000, :2].repeat(1, 32))
    assert value("ch2_ex_repeat_offset") == repeated.positions[1] - repeated.positions[0] == 710
    assert math.isclose(value("ch2_ex_repeat_distance"), math.sqrt(32) * first_pair.distance, rel_tol=1e-6)
    assert value("mem_ratio_length") == 4.0
    assert value("mem_ratio_heads") == 8.0


def test_api_reference_and_bibliography_are_built(book):
    api = rendered(book, "api").get_text()
    for name in ("sinusoidal_positional_encoding", "MultiHeadAttention", "scaled_dot_product_attention", "causal_mask"):
        assert name in api
    assert "Attention Is All You Need" in rendered(book, "bibliography").get_text()


def glued_numbers(book, chapter):
    return {k: v["data"]["text/plain"] for k, v in glued(book, chapter).items()}


def test_attention_chapter_numbers_equal_what_the_library_computes(book):
    data = glued_numbers(book, "attention")
    stats = scaling_statistics([1, 4, 16, 64, 256, 1024], num_keys=16, seed=0)
    for key, column in (
        ("scale_std", "std_raw"),
        ("scale_entropy_raw", "entropy_raw"),
        ("scale_entropy_scaled", "entropy_scaled"),
        ("scale_max_raw", "max_weight_raw"),
        ("scale_jac_raw", "jacobian_raw"),
        ("scale_jac_scaled", "jacobian_scaled"),
    ):
        assert math.isclose(float(data[key]), stats[column][-1], rel_tol=1e-12), key
    assert float(data["causal_future_weight"]) == float(data["padding_weight"]) == 0.0
    assert float(data["padding_content_gap"]) == 0.0
    assert data["empty_row_nan"] == "False"


def test_every_claim_test_has_a_section_on_the_claims_page(book):
    """The chapters' "tested" badges link to docs/claims.md, which is written from the tests' marks: every test of
    tests/test_claims.py carries one chapter's claim mark, and each is shown, under its label, on the built page."""
    import ast

    tree = ast.parse((ROOT / "tests" / "test_claims.py").read_text())
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert len(names) >= 30
    marked = {t.name: t for t in claims.marked_tests(ROOT) if t.kind == "claim"}
    page = rendered(book, "claims")
    assert "literalinclude" not in (DOCS / "claims.md").read_text(), "docs/claims.md lists a test by hand"
    for name in names:
        assert name in marked, f"{name} has no @pytest.mark.claim(chapter)"
        section = page.find(id=marked[name].label)
        assert section is not None, f"{name} has no section on the claims page"
        assert f"def {name}(" in section.get_text(), f"{name}'s source is not shown on the claims page"
    peers = [t for t in claims.marked_tests(ROOT) if t.kind == "peer"]
    assert len(peers) >= 15
    text = page.get_text()
    for test in peers:
        assert f"def {test.name}(" in text, f"the peer test {test.qualname} is not shown on the claims page"
