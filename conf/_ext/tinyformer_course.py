"""Course facts read from the chapters at build time: reading time, objectives, exercises (a Sphinx extension).

- Every chapter (the entries of the ``Chapters`` toctree of ``docs/index.md``) gets "Reading time: about
  N minutes" under its title, computed from its source: prose words at :data:`WORDS_PER_MINUTE` and
  lines of code at :data:`CODE_LINES_PER_MINUTE`.
- ``{course-objectives}`` renders a table of every chapter's learning objectives (the numbered list in
  its ``Learning objectives`` admonition) and the exercises that assess each (the line
  ``*Objectives assessed: 2, 5.*`` that ends every exercise's statement).
- ``{course-plans}`` renders, per chapter, a 50- and a 90-minute session plan timed from the measured
  reading time of each section, the exercises for class and for homework, and the common
  misconceptions given in the directive's body (YAML: chapter -> list of ``{misconception, exposed_by}``,
  ``exposed_by`` an exercise label).

Both directives note the chapters as dependencies, so the page is rebuilt whenever a chapter changes.
The parsing functions are plain Python, used by the tests as well.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

# A careful first reading of technical prose, and of code read line by line together with its output.
# Calibration: a careful student took about 70 minutes over the chapter on positional encoding and
# multi-head attention (issue 14); at these rates its source (3,900 words, 164 lines of code, counted
# as below) comes to 65 minutes.
WORDS_PER_MINUTE = 120
CODE_LINES_PER_MINUTE = 5
SKIPPED_SECTIONS = ("Recap", "Check your understanding", "Coding exercises", "References")

_FENCE = re.compile(r"^(`{3,}|:{3,})\s*(\{[\w:-]+\})?\s*(.*)$")
_ROLE = re.compile(r"\{[\w:-]+\}`([^`<]*)(?:<[^`]*>)?`")
_WORD = re.compile(r"[A-Za-z0-9][\w'’.-]*")
_ASSESSED = re.compile(r"^\*Objectives assessed: ([\d, ]+)\.\*\s*$")


@dataclass
class Section:
    title: str
    label: str | None
    words: int = 0
    code_lines: int = 0
    figures: list[str] = field(default_factory=list)

    @property
    def minutes(self) -> float:
        return self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE


@dataclass
class Exercise:
    label: str
    title: str
    objectives: list[int]
    coding_id: str | None = None


@dataclass
class Chapter:
    docname: str
    title: str = ""
    label: str | None = None
    words: int = 0
    code_lines: int = 0
    objectives: list[str] = field(default_factory=list)
    exercises: list[Exercise] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    @property
    def minutes(self) -> int:
        """Reading time in whole minutes (at least 1)."""
        return max(1, round(self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE))

    def assessing(self, number: int) -> list[Exercise]:
        return [exercise for exercise in self.exercises if number in exercise.objectives]


def chapter_names(docs: Path) -> list[str]:
    """The document names in the toctree captioned ``Chapters`` of ``docs/index.md``, in order."""
    lines = (docs / "index.md").read_text().splitlines()
    names: list[str] = []
    inside = captioned = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("```{toctree}"):
            inside, captioned, entries = True, False, []
        elif inside and stripped.startswith("```"):
            inside = False
            if captioned:
                names.extend(entries)
        elif inside and stripped.startswith(":caption:"):
            captioned = stripped.split(":", 2)[2].strip() == "Chapters"
        elif inside and stripped and not stripped.startswith(":"):
            entries.append(stripped.removesuffix(".md"))
    return names


def _words(text: str) -> int:
    text = _ROLE.sub(r"\1", text)
    text = re.sub(r"\$[^$]*\$", " ", text)  # inline math is read, but not as words
    return len(_WORD.findall(text))


def parse_chapter(path: Path) -> Chapter:
    """Count, section by section, a MyST chapter's prose words and code lines; collect objectives and exercises.

    Prose is every line outside code cells, math blocks and directive options, with roles reduced to
    their text; code is the non-blank lines of ``{code-cell}`` blocks (options excluded). Outputs and
    included files are not counted.
    """
    lines = path.read_text().splitlines()
    chapter = Chapter(path.stem)
    start = 0
    if lines and lines[0].strip() == "---":  # front matter
        start = next(i for i in range(1, len(lines)) if lines[i].strip() == "---") + 1
    fences: list[tuple[str, str]] = []  # open fences: (marker, directive)
    section: Section | None = None
    pending_label: str | None = None
    in_objectives = in_math = False
    exercise: Exercise | None = None
    for line in lines[start:]:
        stripped = line.strip()
        match = _FENCE.match(stripped)
        closes = match and fences and stripped == fences[-1][0]
        if closes:
            _marker, directive = fences.pop()
            if directive == "{exercise}" and exercise is not None:
                chapter.exercises.append(exercise)
                exercise = None
            if directive == "{admonition}":
                in_objectives = False
            continue
        if match and (match.group(2) or match.group(1).startswith("`")):
            directive = match.group(2) or "code"
            fences.append((match.group(1), directive))
            if directive == "{admonition}" and match.group(3).strip() == "Learning objectives":
                in_objectives = True
            if directive == "{exercise}":
                exercise = Exercise("", match.group(3).strip(), [])
            continue
        current = fences[-1][1] if fences else None
        coding = re.search(r"nox -s check -- ([a-z0-9-]+) ", line)
        if coding and exercise is not None:
            exercise.coding_id = coding.group(1)
        if stripped.startswith("$$"):  # display math: "$$", "$$ (label)" or one line "$$ x $$"
            if in_math or stripped.count("$$") == 1:
                in_math = not in_math
            continue
        if current in ("{code-cell}", "code") or (current and current.startswith("{glue")) or current == "{math}":
            if current == "{code-cell}" and stripped and not stripped.startswith(":"):
                chapter.code_lines += 1
                if section:
                    section.code_lines += 1
            if current and current.startswith("{glue") and stripped.startswith(":name:") and section:
                section.figures.append(stripped.split(":", 2)[2].strip())
            continue
        if in_math:
            continue
        if re.match(r"^\((.+)\)=$", stripped):
            pending_label = stripped[1:-2]
            continue
        if stripped.startswith(":") and fences:  # a directive option
            if exercise is not None and stripped.startswith(":label:"):
                exercise.label = stripped.split(":", 2)[2].strip()
            continue
        if stripped.startswith("# ") and not chapter.title:
            chapter.title, chapter.label = stripped[2:].strip(), pending_label
        elif stripped.startswith("## "):
            section = Section(stripped[3:].strip(), pending_label)
            chapter.sections.append(section)
        pending_label = None
        if in_objectives:
            item = re.match(r"^(\d+)\.\s+(.*)$", stripped)
            if item:
                chapter.objectives.append(item.group(2))
            elif stripped and chapter.objectives and line.startswith(" "):
                chapter.objectives[-1] += " " + stripped
        if exercise is not None:
            assessed = _ASSESSED.match(stripped)
            if assessed:
                exercise.objectives = [int(n) for n in assessed.group(1).replace(" ", "").split(",") if n]
            bold = re.match(r"^\*\*([^*]+)\.\*\*", stripped)
            if bold and not exercise.title:
                exercise.title = bold.group(1)
        count = _words(stripped)
        chapter.words += count
        if section:
            section.words += count
    return chapter


def read_chapters(docs: Path) -> list[Chapter]:
    """Every chapter of the book, in the order of the Chapters toctree."""
    return [parse_chapter(docs / f"{name}.md") for name in chapter_names(docs)]


def reading_time_text(chapter: Chapter) -> str:
    return (
        f"Reading time: about {chapter.minutes} minutes ({chapter.words:,} words of prose at {WORDS_PER_MINUTE} "
        f"a minute and {chapter.code_lines} lines of code at {CODE_LINES_PER_MINUTE} a minute, counted when "
        "the book was built)."
    )


def insert_reading_time(app, doctree: nodes.document) -> None:
    """Put the reading time under the title of every chapter."""
    docs = Path(app.srcdir)
    docname = app.env.docname
    if docname not in chapter_names(docs):
        return
    chapter = parse_chapter(docs / f"{docname}.md")
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    paragraph = nodes.paragraph("", "", nodes.emphasis("", reading_time_text(chapter)), classes=["reading-time"])
    section.insert(1, paragraph)  # right after the title


def _ref(label: str | None, text: str) -> str:
    """A link to ``label`` showing its own title (so math in a title renders as in the chapter), else ``text``."""
    return f"{{ref}}`{label}`" if label else text


def _exercise_ref(exercise: Exercise) -> str:
    name = exercise.coding_id or exercise.title or exercise.label
    return f"{{ref}}`{name} <{exercise.label}>`"


class _CourseDirective(SphinxDirective):
    def chapters(self) -> list[Chapter]:
        docs = Path(self.env.srcdir)
        self.env.note_dependency(str(docs / "index.md"))
        chapters = read_chapters(docs)
        for chapter in chapters:
            self.env.note_dependency(str(docs / f"{chapter.docname}.md"))
        return chapters

    def render(self, markdown: list[str]) -> list[nodes.Node]:
        container = nodes.container(classes=["tinyformer-course"])
        self.state.nested_parse(StringList(markdown, source=self.env.docname), self.content_offset, container)
        return [container]


class CourseObjectives(_CourseDirective):
    """A table of every chapter's learning objectives and the exercises that assess each."""

    def run(self) -> list[nodes.Node]:
        rows = ["| Chapter | Objective | Assessed by |", "| --- | --- | --- |"]
        for chapter in self.chapters():
            for number, objective in enumerate(chapter.objectives, start=1):
                assessing = chapter.assessing(number)
                cell = ", ".join(_exercise_ref(e) for e in assessing) if assessing else "**none**"
                name = _ref(chapter.label, chapter.title) if number == 1 else ""
                rows.append(f"| {name} | {number}. {objective} | {cell} |")
        return self.render(rows)


def _allocate(sections: list[Section], minutes: int) -> tuple[list[tuple[Section, int]], list[Section]]:
    """Share ``minutes`` among the sections in proportion to their reading time; a share under 3 minutes
    leaves that section to reading before class, and its time goes to the others."""
    taught = [s for s in sections if s.minutes > 0]
    while taught:
        total = sum(s.minutes for s in taught)
        shares = [(s, s.minutes / total * minutes) for s in taught]
        small = [s for s, share in shares if share < 3]
        if not small:
            break
        drop = min(small, key=lambda s: s.minutes)
        taught.remove(drop)
    total = sum(s.minutes for s in taught) or 1
    whole = [(s, max(3, math.floor(s.minutes / total * minutes))) for s in taught]
    spare = minutes - sum(m for _, m in whole)
    order = sorted(range(len(whole)), key=lambda i: -(taught[i].minutes / total * minutes - whole[i][1]))
    for i in order[: max(0, spare)]:
        whole[i] = (whole[i][0], whole[i][1] + 1)
    return whole, [s for s in sections if s not in taught]


class CoursePlans(_CourseDirective):
    """Per chapter: 50- and 90-minute plans, exercises for class and homework, misconceptions."""

    has_content = True

    def run(self) -> list[nodes.Node]:
        misconceptions = yaml.safe_load("\n".join(self.content)) or {}
        chapters = self.chapters()
        known = {c.docname for c in chapters}
        for docname in misconceptions:
            if docname not in known:
                logger.warning(f"course-plans: {docname!r} is not a chapter", location=self.get_location())
        markdown: list[str] = []
        for chapter in chapters:
            markdown += self.plan(chapter, misconceptions.get(chapter.docname, []))
        return self.render(markdown)

    def plan(self, chapter: Chapter, misconceptions: list[dict[str, str]]) -> list[str]:
        sections = [s for s in chapter.sections if s.title not in SKIPPED_SECTIONS]
        reading = [e for e in chapter.exercises if not e.coding_id]
        coding = [e for e in chapter.exercises if e.coding_id]
        labels = {e.label for e in chapter.exercises}
        out = [
            f"## {chapter.title}",
            "",
            f"{_ref(chapter.label, chapter.title)} reads in about **{chapter.minutes} minutes** "
            f"({chapter.words:,} words, {chapter.code_lines} lines of code). Objectives:",
            "",
            *[f"{n}. {text}" for n, text in enumerate(chapter.objectives, start=1)],
            "",
        ]
        in_class_50 = reading[:2]
        in_class_90 = reading[:2] + coding[:1]
        for length, teaching, in_class, practice in ((50, 30, in_class_50, 10), (90, 55, in_class_90, 25)):
            allocated, before = _allocate(sections, teaching)
            out += [f"**{length}-minute session**", "", "| Minutes | Activity |", "| --- | --- |"]
            out.append("| 5 | Objectives; ask the class the chapter's opening question |")
            for section, minutes in allocated:
                figures = ", ".join(f"{{numref}}`{name}`" for name in section.figures)
                show = f"; show {figures}" if figures else ""
                out.append(f"| {minutes} | {_ref(section.label, section.title)}{show} |")
            tasks = ", ".join(_exercise_ref(e) for e in in_class) or "a question from the recap"
            out.append(f"| {practice} | In class: {tasks} |")
            out.append("| 5 | Recap; set the homework |")
            out.append("")
            if before:
                out += [
                    "Read before class: " + ", ".join(_ref(s.label, s.title) for s in before) + ".",
                    "",
                ]
        homework = [e for e in chapter.exercises if e not in in_class_50]
        out += ["**Exercises**", "", "| Exercise | When | Objectives |", "| --- | --- | --- |"]
        for exercise in chapter.exercises:
            when = "class (both plans)" if exercise in in_class_50 else "class (90 min), else homework"
            if exercise not in in_class_90:
                when = "homework"
            kind = " (coding, checked by `nox -s check`)" if exercise.coding_id else ""
            objectives = ", ".join(str(n) for n in exercise.objectives) or "none stated"
            out.append(f"| {_exercise_ref(exercise)}{kind} | {when} | {objectives} |")
        out.append("")
        if homework:
            out += [f"Homework: {len(homework)} exercises; the coding ones grade themselves.", ""]
        out += ["**Common misconceptions**", ""]
        if not misconceptions:
            out += ["None recorded yet for this chapter.", ""]
        for item in misconceptions:
            label = item.get("exposed_by", "")
            if label not in labels:
                logger.warning(
                    f"course-plans: {label!r} is not an exercise of chapter {chapter.docname}",
                    location=self.get_location(),
                )
            exposed = next((e for e in chapter.exercises if e.label == label), None)
            ref = _exercise_ref(exposed) if exposed else label
            out += [f"- {item['misconception']} *Exposed by* {ref}.", ""]
        return out


def setup(app):
    app.connect("doctree-read", insert_reading_time)
    app.add_directive("course-objectives", CourseObjectives)
    app.add_directive("course-plans", CoursePlans)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
