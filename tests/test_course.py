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
from booktools import parsed

from tinyformer_exercises import EXERCISES

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
            assert f"<../src/tinyformer_exercises/templates/{template}>`" in text
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


def _chapter(tmp_path: Path, body: str) -> Path:
    chapter = tmp_path / "demo.md"
    chapter.write_text("---\njupytext:\n  format_name: myst\n---\n\n(chap-demo)=\n# Demo\n\n" + body)
    return chapter


def test_reading_time_counts_prose_and_code_at_the_stated_rates(tmp_path: Path) -> None:
    prose = " ".join(["word"] * 300)  # 2 minutes at 150 words a minute
    code = "\n".join(f"x{i} = {i}" for i in range(15))  # 3 minutes at 5 lines a minute
    chapter = _chapter(
        tmp_path,
        f"{prose}\n\n$$\nnot counted as words\n$$ (eq-demo)\n\n"
        f"```{{code-cell}} ipython3\n{code}\n```\n\n"
        "## A section\n\nSee {ref}`the demo <chap-demo>`.\n",
    )
    parsed = course.parse_chapter(chapter)
    assert (parsed.title, parsed.label) == ("Demo", "chap-demo")
    assert parsed.words == 1 + 300 + 2 + 3  # "Demo", the prose, "A section", "See the demo" (role reduced to its text)
    assert parsed.code_lines == 15
    assert (course.WORDS_PER_MINUTE, course.CODE_LINES_PER_MINUTE) == (150, 5)
    assert parsed.minutes == round(parsed.words / 150 + 15 / 5) == 5
    assert parsed.sections[0].title == "A section"
    assert "about 5 minutes" in course.reading_time_text(parsed)


@pytest.mark.parametrize("tag", ["remove-cell", "remove-input", "hide-input"])
def test_a_hidden_cell_does_not_change_the_reading_time(tmp_path: Path, tag: str) -> None:
    """Glue calls and claim checks (remove-cell) are never read; nor is code the page does not show."""
    body = "Some prose to read.\n\n```{code-cell} ipython3\nshown = 1\n```\n"
    plain = course.parse_chapter(_chapter(tmp_path, body))
    hidden = "\n".join(f"glue('x{i}', {i}, display=False)" for i in range(40))
    with_hidden = course.parse_chapter(
        _chapter(tmp_path, body + f"\n```{{code-cell}} ipython3\n:tags: [{tag}]\n\n{hidden}\n```\n")
    )
    assert (with_hidden.words, with_hidden.code_lines, with_hidden.minutes) == (
        plain.words,
        plain.code_lines,
        plain.minutes,
    )
    assert plain.code_lines == 1


LISTED = '''"""A module."""


def helper(x):
    """One line of docstring,
    and a second one."""
    # a comment: read as prose
    y = x + 1
    z = y * 2
    return z


def other():
    return 0
'''


def test_an_included_listing_counts_the_lines_it_shows(tmp_path: Path) -> None:
    (tmp_path / "listed.py").write_text(LISTED)
    base = course.parse_chapter(_chapter(tmp_path, "Prose.\n"))
    whole = course.parse_chapter(
        _chapter(tmp_path, "Prose.\n\n```{literalinclude} listed.py\n:pyobject: helper\n```\n")
    )
    # def, three statements, return; the docstring and the comment are prose
    assert whole.code_lines - base.code_lines == 4
    assert whole.words - base.words == 13  # "One line of docstring, and a second one." and "a comment: read as prose"
    part = course.parse_chapter(
        _chapter(
            tmp_path,
            "Prose.\n\n```{literalinclude} listed.py\n:pyobject: helper\n:start-at: y = x\n:end-before: return\n```\n",
        )
    )
    assert part.code_lines - base.code_lines == 2
    lines = course.parse_chapter(
        _chapter(tmp_path, "Prose.\n\n```{literalinclude} listed.py\n:lines: 13-14\n:dedent:\n```\n")
    )
    assert lines.code_lines - base.code_lines == 2
    long = "def long():\n" + "".join(f"    v{i} = {i}\n" for i in range(30))
    (tmp_path / "long.py").write_text(long)
    listed = course.parse_chapter(_chapter(tmp_path, "Prose.\n\n```{literalinclude} long.py\n:pyobject: long\n```\n"))
    assert listed.code_lines - base.code_lines == 31
    assert (base.minutes, listed.minutes) == (1, 6)  # the listing changes the time: 31 lines at 5 a minute
    # A listing of the library's own style ({listing}) counts its signature, its shown lines and its "..."
    listing = course.parse_chapter(
        _chapter(tmp_path, "Prose.\n\n```{listing} listed.py\n:pyobject: helper\n:show-from: z = y\n```\n")
    )
    assert listing.code_lines - base.code_lines == 4  # def, "...", z = y * 2, return z
    broken = course.parse_chapter(
        _chapter(tmp_path, "Prose.\n\n```{literalinclude} listed.py\n:pyobject: missing\n```\n")
    )
    assert broken.problems
    assert broken.code_lines == base.code_lines


def test_solutions_are_not_read_and_the_exercises_are_timed_apart(tmp_path: Path) -> None:
    exercise = " ".join(["task"] * 150)
    solution = " ".join(["answer"] * 600)
    parsed = course.parse_chapter(
        _chapter(
            tmp_path,
            "Prose.\n\n## Recap\n\nIt was short.\n\n## Check your understanding\n\n"
            f":::{{exercise}}\n:label: ex-demo\n\n**Remember.** {exercise}\n\n*Objectives assessed: 1.*\n:::\n\n"
            f":::{{solution}} ex-demo\n:class: dropdown\n\n{solution}\n\n```{{code-cell}} ipython3\nx = 1\n```\n:::\n",
        )
    )
    assert parsed.words == 1 + 1 + 1 + 3  # "Demo", "Prose", "Recap", "It was short": the recap is read
    assert parsed.exercise_minutes == round((3 + 1 + 150 + 3) / 150)  # title, Remember, statement, objectives line
    assert parsed.code_lines == 0
    assert "Reading the exercises takes about 1 minutes more" in course.reading_time_text(parsed)


@pytest.mark.parametrize(
    ("text", "words", "lines", "measured"), course.CALIBRATION, ids=["transformer", "positional+mha"]
)
def test_the_rates_reproduce_the_measured_readings(text, words, lines, measured) -> None:
    """The two readings the rates are calibrated on (issues 14 and 24), within 15 %."""
    computed = words / course.WORDS_PER_MINUTE + lines / course.CODE_LINES_PER_MINUTE
    assert abs(computed / measured - 1) <= 0.15, (text, computed, measured)


def test_the_transformer_chapter_reads_in_about_the_measured_time() -> None:
    """A careful student read chapter 4 in about 75 minutes (issue 24); the count must stay near it."""
    chapter = next(c for c in CHAPTERS if c.docname == "transformer")
    assert abs(chapter.minutes / 75 - 1) <= 0.15, chapter.minutes


#: The sentence that opens a page ``nox -s new-chapter`` wrote (tests/scaffold.py), until its author replaces it.
SCAFFOLD_MARK = "This page was written by `nox -s new-chapter`"


def test_real_chapters_have_plausible_reading_times() -> None:
    """Each chapter is meant for one sitting; the counts are real, not zero, and every listing resolves. A page
    the scaffold wrote is exempt from the sizes (not from the listings) while it opens with its sentence."""
    for chapter in CHAPTERS:
        assert not chapter.problems, (chapter.docname, chapter.problems)
        if SCAFFOLD_MARK in (DOCS / f"{chapter.docname}.md").read_text():
            assert chapter.words > 100, chapter.docname
            continue
        assert chapter.words > 1000, chapter.docname
        assert chapter.code_lines > 20, chapter.docname
        assert 20 <= chapter.minutes <= 120, (chapter.docname, chapter.minutes)
        assert not chapter.problems, (chapter.docname, chapter.problems)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.docname)
def test_every_chapter_marks_one_opening_question_after_its_objectives(chapter) -> None:
    assert len(chapter.opening_questions) == 1, chapter.docname
    question = chapter.opening_questions[0]
    assert question.endswith("?"), question
    assert len(question.split()) >= 10, question
    text = (DOCS / f"{chapter.docname}.md").read_text()
    objectives = text.index(":::{admonition} Learning objectives")
    after = text[text.index("\n:::\n", objectives) + 5 :].lstrip("\n")
    assert after.startswith(":::{admonition} Opening question\n:class: opening-question\n"), chapter.docname


def _plan_spec() -> dict:
    import yaml

    text = (DOCS / "lecturers.md").read_text()
    return yaml.safe_load(re.search(r"```\{course-plans\}\n(.*?)```", text, re.S).group(1))


def test_the_course_plan_covers_the_whole_book() -> None:
    spec = _plan_spec()
    sessions, problems = course.build_plan(CHAPTERS, spec)
    assert problems == []
    assert course.misconception_problems(CHAPTERS, spec["misconceptions"]) == []
    assert 10 <= len(sessions) <= 16
    assert {c.docname for s in sessions for c in s.chapters} == {c.docname for c in CHAPTERS}
    for s in sessions:
        fixed = s.opening + s.practice + s.closing
        assert sum(p.minutes for p in s.taught) + fixed == s.minutes, s.title
        assert s.taught, s.title
        assert s.in_class, s.title
    placed = [e.label for s in sessions for e in (*s.in_class, *s.homework)]
    assert sorted(placed) == sorted(e.label for c in CHAPTERS for e in c.exercises)  # each exactly once
    text = (DOCS / "lecturers.md").read_text()
    assert "course of {{ course_sessions }} sessions of {{ course_minutes }} minutes" in " ".join(text.split())
    assert "over its {{ book_chapters }} chapters" in " ".join(text.split())
    substitutions = course.course_substitutions(DOCS)
    assert substitutions["course_sessions"] == course.number_word(len(sessions))
    assert substitutions["course_minutes"] == str(spec["minutes"])
    assert substitutions["book_chapters"] == course.number_word(len(CHAPTERS))
    assert f"at {course.WORDS_PER_MINUTE} words a minute" in " ".join(text.split())
    assert f"it shows at {course.CODE_LINES_PER_MINUTE} a minute" in " ".join(text.split())


def test_minutes_follow_the_weights_not_the_word_count() -> None:
    assert course.allocate([1, 1, 2], 60) == [15, 15, 30]
    assert course.allocate([3, 0, 3, 1], 50) == [22, 0, 21, 7]  # equal weights, shares a minute apart at most
    assert course.allocate([10, 0.1], 40) == [40, 0]  # a share under 3 minutes is read before class
    assert sum(course.allocate([2, 2, 2, 3, 3, 1], 60)) == 60
    chapter = next(c for c in CHAPTERS if c.docname == "multi-head-attention")
    heavy, light = (
        max(chapter.teaching_sections, key=lambda s: s.words),
        min(chapter.teaching_sections, key=lambda s: s.words),
    )
    spec = {
        "sessions": [
            {
                "title": "t",
                "chapters": {
                    "multi-head-attention": {"objectives": "all", "sections": {heavy.label: 1, light.label: 3}}
                },
                "in_class": [chapter.exercises[0].label],
            }
        ]
    }
    sessions, _ = course.build_plan(CHAPTERS, spec)
    minutes = {p.section.label: p.minutes for p in sessions[0].sections}
    assert minutes[light.label] == 3 * minutes[heavy.label]


def test_a_wrong_name_or_a_gap_in_the_plan_is_a_problem() -> None:
    """Break it on purpose: every kind of mistake the YAML can make is named, so the build fails."""
    spec = {
        "sessions": [
            {
                "title": "t",
                "chapters": {
                    "attention": {
                        "objectives": [1, 2, 9],
                        "sections": {"sec-qkv": 1, "sec-nowhere": 1, "sec-masks": -1},
                    },
                    "no-such-chapter": {},
                },
                "in_class": ["ex-attn-remember", "ex-nowhere"],
                "homework": ["ex-attn-remember"],
                "sectoins": {},
            }
        ]
    }
    _, problems = course.build_plan(CHAPTERS, spec)
    text = "\n".join(problems)
    for expected in (
        "'no-such-chapter' is not a chapter",
        "'sec-nowhere' is not a taught section of attention",
        "the weight of sec-masks must be a number >= 0",
        "objective 9 does not exist",
        "'ex-nowhere' is not an exercise",
        "ex-attn-remember is already set in session 1",
        "unknown key 'sectoins'",
        "section 'sec-scaling' of attention is in no session",
        "objective 3 of attention is covered by no session",
        "chapter 'decoder' is in no session",
    ):
        assert expected in text, expected
    chapter = course.Chapter("demo", objectives=["x"], sections=[course.Section("S", "sec-s")])
    _, problems = course.build_plan(
        [chapter], {"sessions": [{"chapters": {"demo": {"objectives": "all", "sections": {"sec-s": 1}}}}]}
    )
    assert any("marks 0 opening questions" in p for p in problems)
    assert course.misconception_problems(CHAPTERS, {"attention": [{"exposed_by": "ex-nowhere"}], "nope": []}) == [
        "misconceptions: 'ex-nowhere' is not an exercise of attention",
        "misconceptions: 'nope' is not a chapter",
    ]


def test_the_plan_quotes_each_opening_question_once_and_places_each_misconception() -> None:
    spec = _plan_spec()
    sessions, _ = course.build_plan(CHAPTERS, spec)
    markdown = "\n".join(course.render_plan(sessions, spec["misconceptions"]))
    for chapter in CHAPTERS:
        assert markdown.count(chapter.opening_questions[0].replace("|", "\\|")) == 1, chapter.docname
        assert f"reads in about {chapter.minutes} minutes" in markdown
    for items in spec["misconceptions"].values():
        for item in items:
            assert markdown.count(item["misconception"]) == 1, item["misconception"][:60]


@pytest.mark.book
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.docname)
def test_built_chapter_opens_with_its_reading_time_and_offers_the_templates(book, chapter) -> None:
    page = parsed(book / "html" / f"{chapter.docname}.html")
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
        # the student's command first, with the exercise's id and template filled in, then the clone's
        coding = EXERCISES[exercise.coding_id]
        said = " ".join(box.get_text().replace("\\\n", " ").split())
        student = said.find(f"$ python3 -m tinyformer_exercises {coding.id} {coding.template}")
        clone = said.find(f"$ nox -s check -- {coding.id} path/to/{coding.template}")
        assert 0 <= student < clone, f"{coding.id}: the box does not give the student's command, then the clone's"
        # the number the checker accepts (chapters.json) is the one the page gives the exercise
        title = box.select_one(".admonition-title").get_text()
        assert f"Exercise {coding.number} " in title, f"{coding.id} is {coding.number} to the checker: {title}"
        solution = box.find_next("div", class_="solution")
        assert "dropdown" in solution["class"]
        assert "NotImplementedError" not in solution.get_text()


@pytest.mark.book
def test_built_lecturer_page_maps_every_objective_to_an_exercise(book) -> None:
    page = parsed(book / "html" / "lecturers.html")
    table = page.select_one("#objectives-and-the-exercises-that-assess-them table")
    rows = table.select("tbody tr")
    assert len(rows) == sum(len(c.objectives) for c in CHAPTERS)
    for row in rows:
        assert row.select("td")[-1].select("a"), row.get_text(" ")  # at least one exercise, linked
    text = " ".join(page.get_text(" ").split())
    for chapter in CHAPTERS:
        assert f"reads in about {chapter.minutes} minutes" in text
    sessions, _ = course.build_plan(CHAPTERS, _plan_spec())
    for session in sessions:
        assert page.find(id=f"session-{session.number}") is not None
        assert f"Session {session.number}: {session.title}" in text


@pytest.mark.book
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.docname)
def test_built_opening_question_follows_the_objectives_and_the_lecturer_page_quotes_it(book, chapter) -> None:
    page = parsed(book / "html" / f"{chapter.docname}.html")
    boxes = page.select("div.opening-question")
    assert len(boxes) == 1
    assert "Learning objectives" in boxes[0].find_previous_sibling("div").get_text()
    question = " ".join(boxes[0].select_one("p:not(.admonition-title)").get_text(" ").split())
    lecturers = parsed(book / "html" / "lecturers.html")
    assert question in " ".join(lecturers.get_text(" ").split())
