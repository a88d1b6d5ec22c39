"""Course facts read from the chapters at build time: reading time, objectives, exercises, a course plan (a Sphinx extension).

- Every chapter (the entries of the ``Chapters`` toctree of ``docs/index.md``) gets "Reading time: about
  N minutes" under its title, computed from what a reader reads (:func:`parse_chapter`): prose words at
  :data:`WORDS_PER_MINUTE` and the lines of code the page shows (code cells not hidden, and included
  listings resolved to the lines they show) at :data:`CODE_LINES_PER_MINUTE`. The time covers the
  chapter up to and including its recap; reading the exercises' statements is stated apart.
- ``{course-objectives}`` renders a table of every chapter's learning objectives (the numbered list in
  its ``Learning objectives`` admonition) and the exercises that assess each (the line
  ``*Objectives assessed: 2, 5.*`` that ends every exercise's statement).
- ``{course-plans}`` renders a course: sessions given in the directive's body (YAML, :func:`build_plan`),
  each with its chapters' sections weighted by the lecturer (the extension turns weights into minutes;
  weight 0 means reading before class), the objectives it covers, the exercises done in class and the
  checked homework, the opening question of each chapter (the ``Opening question`` admonition that
  follows its learning objectives) and the misconceptions worth confronting. Everything but the
  weights, the choice of exercises for class and the misconceptions is read from the chapters, and a
  name in the YAML that the chapters do not have, or a chapter, section or objective that no session
  covers, is a build warning.

Both directives note the chapters as dependencies, so the page is rebuilt whenever a chapter changes.
The parsing and planning functions are plain Python, used by the tests as well.
"""

from __future__ import annotations

import importlib.util
import io
import math
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.directives.code import LiteralIncludeReader
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

# A careful first reading of technical prose (formulas read with it, but not counted as words), and of
# the code the page shows, read line by line together with its output. Hidden cells (remove-cell,
# remove-input, hide-input, hide-cell: glue calls, claim checks) are not counted; included listings are,
# by the lines they show; comments and docstrings in code count as prose.
WORDS_PER_MINUTE = 150
CODE_LINES_PER_MINUTE = 5
#: The measured readings the rates are calibrated on: the text a careful student read (its commit),
#: its counts as :func:`parse_chapter` makes them (words, lines of code, up to the recap), the minutes
#: measured. No two positive rates fit both exactly (the second text has more words and about as much
#: code, yet was read faster); these rates put both within 10 %. tests/test_course.py checks them.
CALIBRATION = (
    ("docs/transformer.md at 2c4dce5 (issue 24)", 3156, 259, 75),
    ("docs/multi-head-attention.md at 751a714, positional encoding and multi-head attention (issue 14)", 3881, 249, 70),
)
#: Sections after the recap: read when the student does the exercises, timed apart.
EXERCISE_SECTIONS = ("Check your understanding", "Coding exercises")
#: Sections that are not read in one sitting.
SKIPPED_SECTIONS = ("Recap", *EXERCISE_SECTIONS, "References")
#: Cell tags that keep a code cell's source off the page (or folded out of a first reading).
HIDDEN_CODE_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
#: The title of the admonition that holds a chapter's opening question.
OPENING_QUESTION = "Opening question"

_FENCE = re.compile(r"^(`{3,}|:{3,})\s*(\{[\w:-]+\})?\s*(.*)$")
_ROLE = re.compile(r"\{[\w:-]+\}`([^`<]*)(?:<[^`]*>)?`")
_WORD = re.compile(r"[A-Za-z0-9][\w'’.-]*")
_ASSESSED = re.compile(r"^\*Objectives assessed: ([\d, ]+)\.\*\s*$")
#: Fences whose lines the page shows as code: a plain ```` ```python ```` fence ("code") and the code directives.
_CODE_BLOCKS = ("code", "{code-block}", "{code}", "{sourcecode}")
#: Directives that include lines of a file.
_LISTINGS = ("{literalinclude}", "{listing}")
#: literalinclude options that select or reshape the shown lines (the others only style them).
_INCLUDE_OPTIONS = (
    "pyobject",
    "start-at",
    "start-after",
    "end-at",
    "end-before",
    "lines",
    "dedent",
    "prepend",
    "append",
)


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
    intro: Section = field(default_factory=lambda: Section("", None))
    objectives: list[str] = field(default_factory=list)
    opening_questions: list[str] = field(default_factory=list)
    exercises: list[Exercise] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    #: Listings that could not be resolved (file or object missing): their lines count as 0.
    problems: list[str] = field(default_factory=list)

    def _read(self) -> list[Section]:
        """The parts read in one sitting: the opening, and every section up to and including the recap."""
        return [self.intro, *(s for s in self.sections if s.title not in (*EXERCISE_SECTIONS, "References"))]

    @property
    def words(self) -> int:
        return sum(s.words for s in self._read())

    @property
    def code_lines(self) -> int:
        return sum(s.code_lines for s in self._read())

    @property
    def minutes(self) -> int:
        """Reading time up to and including the recap, in whole minutes (at least 1)."""
        return max(1, round(sum(s.minutes for s in self._read())))

    @property
    def exercise_minutes(self) -> int:
        """Reading the exercises' statements (not their solutions), in whole minutes."""
        return round(sum(s.minutes for s in self.sections if s.title in EXERCISE_SECTIONS))

    @property
    def teaching_sections(self) -> list[Section]:
        """The sections a course teaches: all but the recap, the exercises and the references."""
        return [s for s in self.sections if s.title not in SKIPPED_SECTIONS]

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


def _listing_module():
    """``conf/_ext/tinyformer_listing.py`` (the ``{listing}`` directive), imported from beside this file."""
    if "tinyformer_listing" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "tinyformer_listing", Path(__file__).with_name("tinyformer_listing.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["tinyformer_listing"] = module
        spec.loader.exec_module(module)
    return sys.modules["tinyformer_listing"]


def included_text(directive: str, filename: Path, options: dict[str, str]) -> str:
    """The text that a ``{literalinclude}`` or ``{listing}`` of ``filename`` shows.

    ``literalinclude`` is resolved by Sphinx's own reader (``:pyobject:``, ``:start-at:``,
    ``:end-before:``, ``:lines:``, ``:dedent:`` and the rest); ``{listing}`` by
    ``tinyformer_listing.listing_text``, with its ``...`` lines, since the reader reads them.

    Raises:
        OSError: if the file cannot be read.
        ValueError: if an option selects nothing (an object or a text that the file does not have).
    """
    if directive == "{listing}":
        return _listing_module().listing_text(filename, options)
    chosen: dict[str, object] = {k: v for k, v in options.items() if k in _INCLUDE_OPTIONS}
    if "dedent" in chosen:
        chosen["dedent"] = int(chosen["dedent"]) if str(chosen["dedent"]).strip() else None
    text, _ = LiteralIncludeReader(str(filename), chosen, SimpleNamespace(source_encoding="utf-8")).read()
    return text


def code_counts(text: str) -> tuple[int, int]:
    """``(lines of code, words of prose)`` in Python source: comments and docstrings are read as prose.

    A line counts as code when it holds a token that is neither a comment nor part of a docstring (a
    string that is a statement by itself). Text that is not Python (TOML, a shell session) is all code.
    """
    lines = text.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return sum(1 for line in lines if line.strip()), 0
    code_rows: set[int] = set()
    words = 0
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING}
    previous = tokenize.NEWLINE
    for index, token in enumerate(tokens):
        if token.type == tokenize.COMMENT:
            words += _words(token.string.lstrip("#"))
        elif (
            token.type == tokenize.STRING
            and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL)
            and (index + 1 < len(tokens) and tokens[index + 1].type in (tokenize.NEWLINE, tokenize.ENDMARKER))
        ):
            words += _words(token.string.strip("\"'rbuRBU"))
        elif token.type not in skip:
            code_rows.update(range(token.start[0], token.end[0] + 1))
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return len(code_rows), words


@dataclass
class _Block:
    """An open fence while parsing: its marker, directive, argument, options and (for code) its lines."""

    marker: str
    directive: str
    argument: str
    options: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    in_options: bool = True


def _option_value(text: str) -> str:
    """A directive option's value as MyST reads it: a quoted value (YAML) loses its quotes."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        try:
            return str(yaml.safe_load(text))
        except yaml.YAMLError:
            return text
    return text


def _tags(options: dict[str, str]) -> set[str]:
    return {t.strip().strip("'\"") for t in options.get("tags", "").strip("[] ").split(",") if t.strip()}


def parse_chapter(path: Path) -> Chapter:
    """Count, section by section, what a reader of a MyST chapter reads; collect objectives, questions, exercises.

    Prose is every line outside code, math blocks, directive options and solutions, with roles reduced
    to their text. Code is the non-blank lines of the ``{code-cell}`` blocks whose source the page shows
    (a cell tagged with one of :data:`HIDDEN_CODE_TAGS` is left out) and of the included listings
    (``{literalinclude}``, ``{listing}``), resolved to the lines they show. Solutions, which a student
    reads after trying the exercise, and outputs are not counted.
    """
    lines = path.read_text().splitlines()
    chapter = Chapter(path.stem)
    start = 0
    if lines and lines[0].strip() == "---":  # front matter
        start = next(i for i in range(1, len(lines)) if lines[i].strip() == "---") + 1
    blocks: list[_Block] = []
    section = chapter.intro
    pending_label: str | None = None
    in_objectives = in_math = False
    question: list[str] | None = None
    exercise: Exercise | None = None

    def in_solution() -> bool:
        return any(b.directive == "{solution}" for b in blocks)

    for line in lines[start:]:
        stripped = line.strip()
        match = _FENCE.match(stripped)
        if match and blocks and stripped == blocks[-1].marker:  # a fence closes
            block = blocks.pop()
            if block.directive == "{exercise}" and exercise is not None:
                chapter.exercises.append(exercise)
                exercise = None
            elif block.directive == "{admonition}":
                in_objectives = False
                if question is not None:
                    chapter.opening_questions.append(" ".join(question))
                    question = None
            elif not in_solution() and block.directive in ("{code-cell}", *_CODE_BLOCKS, *_LISTINGS):
                if _tags(block.options) & HIDDEN_CODE_TAGS:
                    continue
                text, python = "\n".join(block.lines), block.directive == "{code-cell}"
                if block.directive in _LISTINGS:
                    filename = (path.parent / block.argument).resolve()
                    python = block.options.get("language", "python" if filename.suffix == ".py" else "") == "python"
                    try:
                        text = included_text(block.directive, filename, block.options)
                    except (OSError, ValueError) as err:
                        chapter.problems.append(f"{block.directive} {block.argument}: {err}")
                        continue
                elif block.directive != "{code-cell}":
                    python = block.argument in ("python", "python3", "ipython3", "py")
                code, words = code_counts(text) if python else (sum(1 for x in text.splitlines() if x.strip()), 0)
                section.code_lines += code
                section.words += words
            continue
        if match and (match.group(2) or match.group(1).startswith("`")):  # a fence opens
            directive = match.group(2) or "code"
            argument = match.group(3).strip()
            blocks.append(_Block(match.group(1), directive, argument))
            if directive == "{admonition}" and argument == "Learning objectives":
                in_objectives = True
            if directive == "{admonition}" and argument == OPENING_QUESTION:
                question = []
            if directive == "{exercise}":
                exercise = Exercise("", argument, [])
            continue
        current = blocks[-1] if blocks else None
        if current and current.directive in ("{code-cell}", *_CODE_BLOCKS, *_LISTINGS) and current.in_options:
            option = re.match(r"^:([\w-]+):\s*(.*)$", stripped)
            if option:
                current.options[option.group(1)] = _option_value(option.group(2))
                continue
            current.in_options = False
        coding = re.search(r"nox -s check -- ([a-z0-9-]+) ", line)
        if coding and exercise is not None:
            exercise.coding_id = coding.group(1)
        if current and current.directive in ("{code-cell}", *_CODE_BLOCKS):
            current.lines.append(line)
            continue
        if current and current.directive == "{math}":
            continue
        if current and current.directive.startswith("{glue") and stripped.startswith(":"):
            if stripped.startswith(":name:"):
                section.figures.append(stripped.split(":", 2)[2].strip())
            continue
        if current and current.directive in _LISTINGS:
            continue
        if stripped.startswith("$$"):  # display math: "$$", "$$ (label)" or one line "$$ x $$"
            if in_math or stripped.count("$$") == 1:
                in_math = not in_math
            continue
        if in_math:
            continue
        if re.match(r"^\((.+)\)=$", stripped):
            pending_label = stripped[1:-2]
            continue
        if stripped.startswith(":") and blocks:  # a directive option
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
        if question is not None and stripped:
            question.append(stripped)
        if exercise is not None:
            assessed = _ASSESSED.match(stripped)
            if assessed:
                exercise.objectives = [int(n) for n in assessed.group(1).replace(" ", "").split(",") if n]
            bold = re.match(r"^\*\*([^*]+)\.\*\*", stripped)
            if bold and not exercise.title:
                exercise.title = bold.group(1)
        if not in_solution():
            section.words += _words(stripped)
    return chapter


_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]


def number_word(n: int) -> str:
    """``12`` as ``"twelve"`` (up to twenty), as the page's prose writes a count; larger as digits."""
    return _NUMBER_WORDS[n] if 0 <= n < len(_NUMBER_WORDS) else str(n)


def course_substitutions(docs: Path) -> dict[str, str]:
    """The counts the lecturers' page writes in its prose, from the sources: ``course_sessions`` (the sessions
    of its ``course-plans`` YAML), ``course_minutes`` (a session's) and ``book_chapters`` (the chapters of the
    table of contents), for ``myst_substitutions`` (conf.py)."""
    text = (docs / "lecturers.md").read_text() if (docs / "lecturers.md").is_file() else ""
    found = re.search(r"```\{course-plans\}\n(.*?)```", text, re.S)
    spec = (yaml.safe_load(found.group(1)) if found else None) or {}
    return {
        "course_sessions": number_word(len(spec.get("sessions") or [])),
        "course_minutes": str(spec.get("minutes", "")),
        "book_chapters": number_word(len(chapter_names(docs))),
    }


def read_chapters(docs: Path) -> list[Chapter]:
    """Every chapter of the book, in the order of the Chapters toctree."""
    return [parse_chapter(docs / f"{name}.md") for name in chapter_names(docs)]


def _rate(value: float) -> str:
    return f"{value:g}"


def reading_time_text(chapter: Chapter) -> str:
    return (
        f"Reading time: about {chapter.minutes} minutes, up to and including the recap ({chapter.words:,} "
        f"words of prose at {_rate(WORDS_PER_MINUTE)} a minute and {chapter.code_lines} lines of code shown, "
        f"listings included, at {_rate(CODE_LINES_PER_MINUTE)} a minute, counted when the book was built). "
        f"Reading the exercises takes about {chapter.exercise_minutes} minutes more, before any time spent "
        "solving them."
    )


def insert_reading_time(app, doctree: nodes.document) -> None:
    """Put the reading time under the title of every chapter."""
    docs = Path(app.srcdir)
    docname = app.env.docname
    if docname not in chapter_names(docs):
        return
    chapter = parse_chapter(docs / f"{docname}.md")
    for problem in chapter.problems:
        logger.warning(f"reading time: {problem} (counted as no lines)", location=docname)
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


# -- The course plan ----------------------------------------------------------------------------------

#: Defaults of the plan's YAML (top level; a session may override ``minutes`` and ``practice``).
PLAN_DEFAULTS = {"minutes": 90, "opening": 5, "practice": 20, "closing": 5}
_SESSION_KEYS = {"title", "chapters", "in_class", "homework", "minutes", "practice", "note"}
_CHAPTER_KEYS = {"objectives", "sections"}


@dataclass
class PlannedSection:
    chapter: Chapter
    section: Section
    weight: float
    minutes: int = 0  # 0: read before class


@dataclass
class Session:
    number: int
    title: str
    minutes: int
    opening: int
    practice: int
    closing: int
    chapters: list[Chapter]
    objectives: list[tuple[Chapter, int]]
    sections: list[PlannedSection]
    in_class: list[Exercise]
    homework: list[Exercise] = field(default_factory=list)
    note: str = ""

    @property
    def taught(self) -> list[PlannedSection]:
        return [p for p in self.sections if p.minutes]

    @property
    def before_class(self) -> list[PlannedSection]:
        return [p for p in self.sections if not p.minutes]


#: A section whose share of a session would be shorter than this is read before class instead.
MIN_TEACHING_MINUTES = 3


def allocate(weights: list[float], minutes: int) -> list[int]:
    """Share ``minutes`` among sections in proportion to ``weights``, in whole minutes that add up to ``minutes``.

    A weight of 0, or a share under :data:`MIN_TEACHING_MINUTES`, gets 0 (reading before class), and its
    time goes to the others (the lightest goes first). Minutes left by rounding down go to the largest
    remainders, so equal weights get shares at most a minute apart.
    """
    active = [i for i, w in enumerate(weights) if w > 0]
    while active and minutes > 0:
        total = sum(weights[i] for i in active)
        exact = {i: weights[i] / total * minutes for i in active}
        short = [i for i in active if exact[i] < MIN_TEACHING_MINUTES]
        if short:
            active.remove(min(short, key=lambda i: (weights[i], -i)))
            continue
        shares = [0] * len(weights)
        for i in active:
            shares[i] = math.floor(exact[i])
        for i in sorted(active, key=lambda i: (-(exact[i] - shares[i]), i))[: minutes - sum(shares)]:
            shares[i] += 1
        return shares
    return [0] * len(weights)


def _numbers(value, count: int, where: str, problems: list[str]) -> list[int]:
    if value == "all":
        return list(range(1, count + 1))
    if not isinstance(value, list) or not all(isinstance(n, int) for n in value):
        problems.append(f"{where}: objectives must be 'all' or a list of numbers, not {value!r}")
        return []
    for n in value:
        if not 1 <= n <= count:
            problems.append(f"{where}: objective {n} does not exist (the chapter has {count})")
    return [n for n in value if 1 <= n <= count]


def build_plan(chapters: list[Chapter], spec: dict) -> tuple[list[Session], list[str]]:
    """The course plan of ``spec`` (the ``{course-plans}`` YAML) for ``chapters``, and its problems.

    A problem is a name the chapters do not have (chapter, section label, exercise label, objective
    number), a chapter, taught section, objective or opening question missing from the plan, or a
    session whose fixed parts leave no time to teach. Exercises not chosen for class go to the homework
    of the first session by which all their objectives have been covered (or of the session ``homework``
    names them in).
    """
    problems: list[str] = []
    settings = {**PLAN_DEFAULTS, **{k: v for k, v in spec.items() if k in PLAN_DEFAULTS}}
    for key in set(spec) - set(PLAN_DEFAULTS) - {"sessions", "misconceptions"}:
        problems.append(f"unknown key {key!r}")
    by_name = {c.docname: c for c in chapters}
    sessions: list[Session] = []
    placed_sections: dict[tuple[str, str], int] = {}
    placed_exercises: dict[str, int] = {}
    for number, item in enumerate(spec.get("sessions") or [], start=1):
        where = f"session {number}"
        for key in set(item) - _SESSION_KEYS:
            problems.append(f"{where}: unknown key {key!r}")
        session_chapters, objectives, planned = [], [], []
        for docname, plan in (item.get("chapters") or {}).items():
            chapter = by_name.get(docname)
            if chapter is None:
                problems.append(f"{where}: {docname!r} is not a chapter")
                continue
            plan = plan or {}
            for key in set(plan) - _CHAPTER_KEYS:
                problems.append(f"{where}, {docname}: unknown key {key!r}")
            session_chapters.append(chapter)
            numbers = _numbers(plan.get("objectives", []), len(chapter.objectives), f"{where}, {docname}", problems)
            objectives += [(chapter, n) for n in numbers]
            labels = {s.label: s for s in chapter.teaching_sections}
            for label, weight in (plan.get("sections") or {}).items():
                if label not in labels:
                    problems.append(f"{where}: {label!r} is not a taught section of {docname}")
                    continue
                if not isinstance(weight, int | float) or weight < 0:
                    problems.append(f"{where}: the weight of {label} must be a number >= 0, not {weight!r}")
                    continue
                if (docname, label) in placed_sections:
                    problems.append(f"{where}: {label} is already in session {placed_sections[docname, label]}")
                placed_sections[docname, label] = number
                planned.append(PlannedSection(chapter, labels[label], float(weight)))
        exercises = {e.label: e for c in session_chapters for e in c.exercises}
        chosen: dict[str, list[Exercise]] = {}
        for key in ("in_class", "homework"):
            chosen[key] = []
            for label in item.get(key) or []:
                if label not in exercises:
                    problems.append(f"{where}: {label!r} is not an exercise of its chapters")
                elif label in placed_exercises:
                    problems.append(f"{where}: {label} is already set in session {placed_exercises[label]}")
                else:
                    placed_exercises[label] = number
                    chosen[key].append(exercises[label])
        minutes = item.get("minutes", settings["minutes"])
        practice = item.get("practice", settings["practice"]) if chosen["in_class"] else 0
        teaching = minutes - settings["opening"] - practice - settings["closing"]
        if teaching <= 0:
            problems.append(f"{where}: {minutes} minutes leave no time to teach")
        for planned_section, share in zip(
            planned, allocate([p.weight for p in planned], max(teaching, 0)), strict=True
        ):
            planned_section.minutes = share
        if planned and not any(p.minutes for p in planned):
            problems.append(f"{where}: every section is set as reading before class")
        session = Session(
            number,
            str(item.get("title", "")),
            minutes,
            settings["opening"],
            practice,
            settings["closing"],
            session_chapters,
            objectives,
            planned,
            chosen["in_class"],
            list(chosen["homework"]),
            str(item.get("note", "")).strip(),
        )
        sessions.append(session)
    # Every chapter, taught section and objective in the plan; every chapter with one opening question.
    covered = {(c.docname, n) for s in sessions for c, n in s.objectives}
    for chapter in chapters:
        if not any(chapter in s.chapters for s in sessions):
            problems.append(f"chapter {chapter.docname!r} is in no session")
            continue
        for s in chapter.teaching_sections:
            if (chapter.docname, s.label) not in placed_sections:
                problems.append(f"section {s.label or s.title!r} of {chapter.docname} is in no session")
        for n in range(1, len(chapter.objectives) + 1):
            if (chapter.docname, n) not in covered:
                problems.append(f"objective {n} of {chapter.docname} is covered by no session")
        if len(chapter.opening_questions) != 1:
            problems.append(
                f"{chapter.docname} marks {len(chapter.opening_questions)} opening questions "
                f"(an admonition titled {OPENING_QUESTION!r}), not one"
            )
    # The remaining exercises: homework of the first session by which their objectives are all covered.
    for chapter in chapters:
        own = [s for s in sessions if chapter in s.chapters]
        for exercise in chapter.exercises:
            if exercise.label in placed_exercises or not own:
                continue
            seen: set[int] = set()
            target = own[-1]
            for session in own:
                seen |= {n for c, n in session.objectives if c is chapter}
                if set(exercise.objectives) <= seen:
                    target = session
                    break
            target.homework.append(exercise)
    order = {e.label: i for c in chapters for i, e in enumerate(c.exercises)}
    for session in sessions:
        session.homework.sort(key=lambda e: order[e.label])
    return sessions, problems


def _minutes_of(minutes: float) -> str:
    return f"about {max(1, round(minutes))} minute{'s' if round(minutes) > 1 else ''}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _quote(question: str) -> str:
    return question.replace("|", "\\|")


def render_plan(sessions: list[Session], misconceptions: dict) -> list[str]:
    """The markdown of the course plan: an overview table, then one part per session."""
    out = [
        "| Session | Chapters | Taught in class | Read before class | In class | Homework |",
        "| ---: | --- | --- | --- | --- | --- |",
    ]
    for s in sessions:
        chapters = ", ".join(_ref(c.label, c.title) for c in s.chapters)
        before = sum(p.section.minutes for p in s.before_class)
        before_text = _minutes_of(before) if s.before_class else "nothing"
        coding = sum(1 for e in s.homework if e.coding_id)
        out.append(
            f"| [{s.number}](#session-{s.number}) | {chapters} | {sum(p.minutes for p in s.taught)} min, "
            f"{_count(len(s.taught), 'section')} | {before_text} | {_count(len(s.in_class), 'exercise')}, "
            f"{s.practice} min | {_count(len(s.homework), 'exercise')} ({coding} coding) |"
        )
    out.append("")
    first_session = {}
    for s in sessions:
        for c in s.chapters:
            first_session.setdefault(c.docname, s.number)
    where_done = {e.label: s for s in sessions for e in (*s.in_class, *s.homework)}
    for s in sessions:
        out += [f"(session-{s.number})=", f"### Session {s.number}: {s.title}", ""]
        if s.note:
            out += [f"*Why these minutes.* {s.note}", ""]
        for c in s.chapters:
            if first_session[c.docname] == s.number:
                out += [
                    f"{_ref(c.label, c.title)} reads in about {c.minutes} minutes up to its recap, and its "
                    f"exercises in about {c.exercise_minutes} more.",
                    "",
                ]
        objectives = [f"{n}. {c.objectives[n - 1]}" for c, n in s.objectives]
        names = ", ".join(_ref(c.label, c.title) for c in s.chapters)
        out += [f"Objectives of {names} covered:", "", *objectives, ""]
        if s.before_class:
            reading = ", ".join(
                f"{_ref(p.section.label, p.section.title)} ({_minutes_of(p.section.minutes)})" for p in s.before_class
            )
            out += [f"**Before class**, the students read {reading}.", ""]
        out += [f"**In class** ({s.minutes} minutes)", "", "| Minutes | Activity |", "| --- | --- |"]
        for c in s.chapters:
            if first_session[c.docname] == s.number and c.opening_questions:
                out.append(
                    f"| {s.opening} | Opening question, asked before any teaching, answers collected and left open: "
                    f"*{_quote(c.opening_questions[0])}* Then the objectives. |"
                )
            else:
                back = f"session {first_session[c.docname]}"
                out.append(
                    f"| {s.opening} | The homework of the last session; the opening question of {back}: what is answered, what is still open |"
                )
        for p in s.taught:
            figures = ", ".join(f"{{numref}}`{name}`" for name in p.section.figures)
            show = f"; show {figures}" if figures else ""
            out.append(f"| {p.minutes} | {_ref(p.section.label, p.section.title)} (weight {p.weight:g}){show} |")
        if s.in_class:
            out.append(f"| {s.practice} | Exercises in class: {', '.join(_exercise_ref(e) for e in s.in_class)} |")
        out.append(f"| {s.closing} | The opening question again, answered; the chapter's recap; the homework |")
        out.append("")
        coding = [e for e in s.homework if e.coding_id]
        written = [e for e in s.homework if not e.coding_id]
        out += ["**Homework, checked**", ""]
        if coding:
            items = ", ".join(f"{_exercise_ref(e)} (`nox -s check -- {e.coding_id} FILE`)" for e in coding)
            out += [f"- Coding, graded by the checker on the students' files: {items}.", ""]
        if written:
            out += [
                f"- Written, marked against the solution folded under each: {', '.join(_exercise_ref(e) for e in written)}.",
                "",
            ]
        if not s.homework:
            out += ["- None set in this session.", ""]
        confront = [
            (item, e)
            for c in s.chapters
            for item in misconceptions.get(c.docname) or []
            for e in c.exercises
            if e.label == item.get("exposed_by") and where_done.get(e.label) is s
        ]
        if confront:
            out += ["**Misconceptions to confront**", ""]
            out += [f"- {item['misconception']} *Exposed by* {_exercise_ref(e)}." for item, e in confront]
            out.append("")
    return out


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


def misconception_problems(chapters: list[Chapter], misconceptions: dict) -> list[str]:
    """Names in the misconceptions that the chapters do not have."""
    problems = []
    by_name = {c.docname: c for c in chapters}
    for docname, items in misconceptions.items():
        if docname not in by_name:
            problems.append(f"misconceptions: {docname!r} is not a chapter")
            continue
        labels = {e.label for e in by_name[docname].exercises}
        for item in items or []:
            if item.get("exposed_by") not in labels:
                problems.append(f"misconceptions: {item.get('exposed_by')!r} is not an exercise of {docname}")
    return problems


class CoursePlans(_CourseDirective):
    """The course: sessions from the YAML body, timed by the weights given, with everything else read from the chapters."""

    has_content = True

    def run(self) -> list[nodes.Node]:
        spec = yaml.safe_load("\n".join(self.content)) or {}
        chapters = self.chapters()
        misconceptions = spec.get("misconceptions") or {}
        sessions, problems = build_plan(chapters, spec)
        for problem in problems + misconception_problems(chapters, misconceptions):
            logger.warning(f"course-plans: {problem}", location=self.get_location())
        return self.render(render_plan(sessions, misconceptions))


def add_substitutions(app, config) -> None:
    """``config-inited``: the lecturers' page's counts, from the sources (:func:`course_substitutions`)."""
    config.myst_substitutions = {**config.myst_substitutions, **course_substitutions(Path(app.srcdir))}


def setup(app):
    app.connect("config-inited", add_substitutions)
    app.connect("doctree-read", insert_reading_time)
    app.add_directive("course-objectives", CourseObjectives)
    app.add_directive("course-plans", CoursePlans)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
