"""The course facts the book computes from its chapters: objectives, exercises, reading time, lecturer page.

The parsing is ``conf/_ext/tinyformer_course.py``, the extension that writes the reading time under
each chapter's title and the tables of ``docs/lecturers.md``; the book tests check the built pages.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tinyformer.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_spec = importlib.util.spec_from_file_location("tinyformer_course", ROOT / "conf" / "_ext" / "tinyformer_course.py")
course = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("tinyformer_course", course)  # dataclasses look their module up there
_spec.loader.exec_module(sys.modules["tinyformer_course"])
course = sys.modules["tinyformer_course"]

CHAPTERS = course.read_chapters(DOCS)


def test_chapters_come_from_the_chapters_toctree(tmp_path: Path) -> None:
    index = tmp_path / "index.md"
    index.write_text(
        "# Book\n\n```{toctree}\n:caption: Chapters\n:numbered:\n\nfirst\nsecond.md\n```\n\n"
        "```{toctree}\n:caption: Reference\n\nglossary\n```\n"
    )
    assert course.chapter_names(tmp_path) == ["first", "second"]
    assert course.chapter_names(DOCS)[0] == "attention"
    assert "glossary" not in course.chapter_names(DOCS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.docname)
def test_every_objective_is_assessed_by_an_exercise(chapter) -> None:
    assert chapter.objectives, f"{chapter.docname}: no numbered list in its Learning objectives admonition"
    unassessed = [n for n in range(1, len(chapter.objectives) + 1) if not chapter.assessing(n)]
    assert not unassessed, f"{chapter.docname}: objectives {unassessed} are assessed by no exercise"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.docname)
def test_every_exercise_states_valid_objectives(chapter) -> None:
    assert chapter.exercises
    for exercise in chapter.exercises:
        assert exercise.objectives, f"{chapter.docname}: {exercise.label} has no '*Objectives assessed: ...*' line"
        assert set(exercise.objectives) <= set(range(1, len(chapter.objectives) + 1)), exercise.label


def test_every_coding_exercise_is_in_the_book_once_with_its_template_and_solution() -> None:
    placed = [e.coding_id for chapter in CHAPTERS for e in chapter.exercises if e.coding_id]
    assert sorted(placed) == sorted(EXERCISES)
    for chapter in CHAPTERS:
        text = (DOCS / f"{chapter.docname}.md").read_text()
        for exercise in (e for e in chapter.exercises if e.coding_id):
            template = EXERCISES[exercise.coding_id].template
            assert f"<../src/tinyformer/exercises/templates/{template}>`" in text
            assert f"../tests/exercise_solutions/{template}" in text
            assert (ROOT / "tests" / "exercise_solutions" / template).is_file()
            # the coding exercises sit in their own section, after the read-and-reveal ones
            assert text.index("## Check your understanding") < text.index("## Coding exercises")
            assert text.index("## Coding exercises") < text.index(f":label: {exercise.label}")


def test_unassessed_objective_is_detected(tmp_path: Path) -> None:
    """Break it on purpose: a chapter whose second objective no exercise names."""
    chapter = tmp_path / "demo.md"
    chapter.write_text(
        "# Demo\n\n:::{admonition} Learning objectives\n:class: tip\n\n1. one thing;\n2. another,\n   continued.\n:::\n\n"
        "## Check your understanding\n\n:::{exercise}\n:label: ex-demo\n\n**Remember.** Say it.\n\n"
        "*Objectives assessed: 1.*\n:::\n"
    )
    parsed = course.parse_chapter(chapter)
    assert parsed.objectives == ["one thing;", "another, continued."]
    assert [(e.label, e.title, e.objectives) for e in parsed.exercises] == [("ex-demo", "Remember", [1])]
    assert parsed.assessing(1)
    assert not parsed.assessing(2)


def test_reading_time_counts_prose_and_code_at_the_stated_rates(tmp_path: Path) -> None:
    chapter = tmp_path / "demo.md"
    prose = " ".join(["word"] * 240)  # 2 minutes at 120 words a minute
    code = "\n".join(f"x{i} = {i}" for i in range(15))  # 3 minutes at 5 lines a minute
    chapter.write_text(
        "---\njupytext:\n  format_name: myst\n---\n\n(chap-demo)=\n# Demo\n\n"
        f"{prose}\n\n$$\nnot counted as words\n$$ (eq-demo)\n\n"
        f"```{{code-cell}} ipython3\n:tags: [hide-input]\n{code}\n```\n\n"
        "## A section\n\nSee {ref}`the demo <chap-demo>`.\n"
    )
    parsed = course.parse_chapter(chapter)
    assert (parsed.title, parsed.label) == ("Demo", "chap-demo")
    assert parsed.words == 1 + 240 + 2 + 3  # "Demo", the prose, "A section", "See the demo" (role reduced to its text)
    assert parsed.code_lines == 15
    assert parsed.minutes == round(parsed.words / 120 + 15 / 5)
    assert parsed.sections[0].title == "A section"
    assert "about 5 minutes" in course.reading_time_text(parsed)


def test_real_chapters_have_plausible_reading_times() -> None:
    """Each chapter is meant for one sitting (issue 14: 45-60 minutes); the counts are real, not zero."""
    for chapter in CHAPTERS:
        assert chapter.words > 1000, chapter.docname
        assert chapter.code_lines > 20, chapter.docname
        assert 10 <= chapter.minutes <= 150, (chapter.docname, chapter.minutes)


def test_lecturer_misconceptions_name_existing_exercises() -> None:
    import yaml

    text = (DOCS / "lecturers.md").read_text()
    body = re.search(r"```\{course-plans\}\n(.*?)```", text, re.S).group(1)
    misconceptions = yaml.safe_load(body)
    by_name = {c.docname: c for c in CHAPTERS}
    for docname, items in misconceptions.items():
        labels = {e.label for e in by_name[docname].exercises}
        for item in items:
            assert item["exposed_by"] in labels, item


@pytest.mark.book
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.docname)
def test_built_chapter_opens_with_its_reading_time_and_offers_the_templates(book, chapter) -> None:
    from bs4 import BeautifulSoup

    page = BeautifulSoup((book / "html" / f"{chapter.docname}.html").read_text(), "html.parser")
    reading = page.select_one("p.reading-time")
    assert reading is not None
    title = reading.find_previous_sibling()
    assert title.name == "h1"  # right under the chapter's title
    assert chapter.title in title.get_text()
    assert f"Reading time: about {chapter.minutes} minutes" in reading.get_text()
    for exercise in (e for e in chapter.exercises if e.coding_id):
        box = page.find(id=exercise.label)
        link = box.select_one("a.reference.download")
        downloaded = book / "html" / link["href"]
        assert downloaded.read_text() == EXERCISES[exercise.coding_id].template_path.read_text()
        assert f"nox -s check -- {exercise.coding_id} " in box.get_text()
        solution = box.find_next("div", class_="solution")
        assert "dropdown" in solution["class"]
        assert "NotImplementedError" not in solution.get_text()


@pytest.mark.book
def test_built_lecturer_page_maps_every_objective_to_an_exercise(book) -> None:
    from bs4 import BeautifulSoup

    page = BeautifulSoup((book / "html" / "lecturers.html").read_text(), "html.parser")
    table = page.select_one("#objectives-and-the-exercises-that-assess-them table")
    rows = table.select("tbody tr")
    assert len(rows) == sum(len(c.objectives) for c in CHAPTERS)
    for row in rows:
        assert row.select("td")[-1].select("a"), row.get_text(" ")  # at least one exercise, linked
    text = " ".join(page.get_text(" ").split())
    for chapter in CHAPTERS:
        assert f"reads in about {chapter.minutes} minutes" in text
