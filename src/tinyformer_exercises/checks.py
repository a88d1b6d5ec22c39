"""The checks of every coding exercise, by id: each exercise module's
``CHECKS`` (:mod:`tinyformer_exercises.exercises`).

A check builds seeded float64 inputs, calls the student's function and
compares with the library's answer; it names its input in the student's
words, and the edge cases are the ones the library's own tests cover (a
query row that may attend to nothing, odd widths, L != S, a batch of one).
"""

from __future__ import annotations

import importlib

from tinyformer_exercises import EXERCISES
from tinyformer_exercises.checking import Check

__all__ = ["CHECKS"]

CHECKS: dict[str, list[Check]] = {
    exercise.id: importlib.import_module(exercise.module).CHECKS
    for exercise in EXERCISES.values()
}
