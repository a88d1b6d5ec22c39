"""Coding exercises of the tinyformer book and the checker that grades them,
offline, against the library.

Each exercise asks for one or two functions of the library, written from
scratch in a template file (``templates/``, shipped with the package) whose
bodies raise ``NotImplementedError``. The checker imports the student's
file, runs the exercise's checks (one module an exercise, in
:mod:`tinyformer_exercises.exercises`) and says, check by check, what it
used, what it expected and what came back::

    python -m tinyformer_exercises --list          # or: nox -s check -- --list
    python -m tinyformer_exercises ID FILE         # or: nox -s check -- ID FILE

The exit status is 0 only when every check passes.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHAPTERS",
    "CHAPTER_TEMPLATES",
    "EXERCISES",
    "EXERCISE_MODULES",
    "EXERCISE_NUMBERS",
    "TEMPLATES",
    "Exercise",
    "get",
]

TEMPLATES = Path(__file__).resolve().parent / "templates"

# The book's chapters, by document name: (number, title) as the site numbers
# and titles them, and the templates of their coding exercises in the order
# the page sets them. Written from docs/index.md's toctree and the pages
# (``nox -s templates``: authoring.write_chapters); a test checks it.
_CHAPTERS_DATA: dict[str, list] = json.loads(
    (Path(__file__).resolve().parent / "chapters.json").read_text()
)
CHAPTERS: dict[str, tuple[int, str]] = {
    name: (number, title)
    for name, (number, title, _templates) in _CHAPTERS_DATA.items()
}
#: Each chapter's coding exercises, by template file name, in page order.
CHAPTER_TEMPLATES: dict[str, tuple[str, ...]] = {
    name: tuple(templates)
    for name, (_number, _title, templates) in _CHAPTERS_DATA.items()
}
#: Each coding exercise's number on its page (``"6.7"``), by template file
#: name.
EXERCISE_NUMBERS: dict[str, str] = {
    template: number
    for (_chapter, _title, templates) in _CHAPTERS_DATA.values()
    for template, number in templates.items()
}


@dataclass(frozen=True)
class Exercise:
    """A coding exercise.

    Attributes:
        id: the name given to the checker, e.g. ``"causal-mask"``.
        functions: the names of the functions the student writes, in the
            order the checks call them.
        template: file name of the template in :data:`TEMPLATES`.
        chapter: the chapter's document name (``docs/<chapter>.md``) that
            sets the exercise.
        objective: the learning objective it assesses, in words (the chapter
            numbers it).
        references: dotted names of the library's functions and methods
            that answer the exercise. While the student's code runs, they
            refuse to run (:mod:`tinyformer_exercises._sandbox`), and a file
            whose function is one of them, or wraps one, is refused by name.
        variant_of: those of ``references`` that the chapter lists in full
            above the exercise, because the exercise asks for another form
            of them (empty for most: the page shows only the lines that
            carry the idea; tests/test_assignable.py checks it).
        variant_differs: for a variant, how it differs from the listing.
    """

    id: str
    functions: tuple[str, ...]
    template: str
    chapter: str
    objective: str
    references: tuple[str, ...]
    variant_of: tuple[str, ...] = ()
    variant_differs: str = ""

    @property
    def chapter_name(self) -> str:
        """``chapter 4, "A miniature Transformer from scratch"``, as the
        site numbers and titles it."""
        number, title = CHAPTERS[self.chapter]
        return f'chapter {number}, "{title}"'

    @property
    def number(self) -> str:
        """The exercise's number on its page (``"6.7"``), or ``""`` for an
        exercise its page does not link yet."""
        return EXERCISE_NUMBERS.get(self.template, "")

    @property
    def template_path(self) -> Path:
        """Where the template is installed."""
        return TEMPLATES / self.template

    @property
    def module(self) -> str:
        """The module that holds the exercise's checks and wrong solutions,
        ``tinyformer_exercises.exercises.NAME``."""
        return f"tinyformer_exercises.exercises.{Path(self.template).stem}"


#: Where the exercises are, one module each: ``exercises/NAME.py`` holds the
#: exercise whole but for its reference solution: ``EXERCISE =
#: Exercise(...)`` (its metadata, in literals), its ``CHECKS`` and its
#: ``WRONG_SOLUTIONS``. The reference solution, from which the template
#: ``templates/NAME.py`` is written, is ``tests/exercise_solutions/NAME.py``
#: (``nox -s new-chapter`` writes a chapter's first exercise). The registry
#: reads ``EXERCISE`` from the file without importing it, so it needs no
#: torch (``nox -s templates`` loads it by path).
EXERCISE_MODULES = Path(__file__).resolve().parent / "exercises"


def _module_exercise(path: Path) -> Exercise:
    """The ``EXERCISE = Exercise(...)`` of the exercise module at ``path``, read with :mod:`ast`.

    Raises:
        ValueError: naming the file, when it has no such assignment or its arguments are not literals.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets]
            == ["EXERCISE"]
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "Exercise"
        ):
            try:
                args = [ast.literal_eval(a) for a in node.value.args]
                kwargs = {
                    k.arg: ast.literal_eval(k.value)
                    for k in node.value.keywords
                }
            except ValueError as error:
                raise ValueError(
                    f"{path}: EXERCISE's arguments must be literals ({error})"
                ) from None
            return Exercise(*args, **kwargs)
    raise ValueError(
        f"{path}: no EXERCISE = Exercise(...) at the top level"
    )


def _read_exercises(
    folder: Path = EXERCISE_MODULES,
) -> dict[str, Exercise]:
    """The ``EXERCISE`` of every exercise module in ``folder``, by id, in the
    book's order: by chapter, then as the chapter's page sets them (an
    exercise its page does not link yet comes last in its chapter).

    Raises:
        ValueError: naming the file, for an id that two modules give, or a
            module whose ``template`` is not its own file name.
    """
    found: dict[str, Exercise] = {}
    for path in sorted(folder.glob("[a-z]*.py")):
        exercise = _module_exercise(path)
        if exercise.template != path.name:
            raise ValueError(
                f"{path}: template must be {path.name!r}, the module's own "
                f"file name; got {exercise.template!r}"
            )
        if exercise.id in found:
            raise ValueError(
                f"{path}: exercise id {exercise.id!r} is taken"
            )
        found[exercise.id] = exercise

    def place(exercise: Exercise) -> tuple[int, int, str]:
        number = CHAPTERS.get(exercise.chapter, (len(CHAPTERS) + 1, ""))[0]
        templates = CHAPTER_TEMPLATES.get(exercise.chapter, ())
        if exercise.template in templates:
            return number, templates.index(exercise.template), ""
        return number, len(templates), exercise.template

    return {e.id: e for e in sorted(found.values(), key=place)}


EXERCISES: dict[str, Exercise] = _read_exercises()


def get(exercise_id: str) -> Exercise:
    """The exercise called ``exercise_id``, or numbered so on its page
    (``"6.7"``, or ``"Exercise 6.7"``).

    Raises:
        KeyError: naming the id and the known ids.
    """
    if exercise_id in EXERCISES:
        return EXERCISES[exercise_id]
    number = exercise_id.strip().removeprefix("Exercise").strip()
    for exercise in EXERCISES.values():
        if exercise.number and exercise.number == number:
            return exercise
    try:
        return EXERCISES[exercise_id]
    except KeyError:
        raise KeyError(
            f"no exercise {exercise_id!r}; the exercises are {', '.join(EXERCISES)}"
        ) from None
