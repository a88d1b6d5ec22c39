"""The checks of every coding exercise, by id: each exercise module's
``CHECKS`` (:mod:`tinyformer_exercises.exercises`), the printed cases, and
the cases each run draws anew (:func:`fresh_checks`), so that a table of
the printed cases' answers does not pass.

A check builds seeded float64 inputs, calls the student's function and
compares with the library's answer; it names its input in the student's
words, and the edge cases are the ones the library's own tests cover (a
query row that may attend to nothing, odd widths, L != S, a batch of one).
"""

from __future__ import annotations

import importlib
import random

from tinyformer_exercises import EXERCISES
from tinyformer_exercises.checking import Check, fresh_cases

__all__ = ["CHECKS", "fresh_checks"]

CHECKS: dict[str, list[Check]] = {
    exercise.id: importlib.import_module(exercise.module).CHECKS
    for exercise in EXERCISES.values()
}


def fresh_checks(exercise_id: str, seed: int) -> list[Check]:
    """The cases a run draws anew for exercise ``exercise_id`` from ``seed``
    (the checker prints it): the module's ``fresh_checks(rng)`` where it has
    one (an exercise whose inputs are numbers draws the numbers), else its
    seeded checks on inputs of fresh seeds (:func:`fresh_cases`)."""
    exercise = EXERCISES[exercise_id]
    module = importlib.import_module(exercise.module)
    rng = random.Random(f"{exercise_id}:{seed}")
    own = getattr(module, "fresh_checks", None)
    return (
        own(rng)
        if own is not None
        else fresh_cases(CHECKS[exercise_id], rng)
    )
