"""The coding exercises, one module each.

``NAME.py`` holds one exercise whole, but for its reference solution: ``EXERCISE = Exercise(...)``, its
metadata in literals (id, functions, template ``NAME.py``, chapter, objective, the library's answers that
refuse to run while the student's code does), which the registry (:data:`tinyformer_exercises.EXERCISES`)
reads from the file without importing it; ``CHECKS``, the list of :class:`~tinyformer_exercises.checking.Check`
the checker runs (:data:`tinyformer_exercises.checks.CHECKS` gathers them); and ``WRONG_SOLUTIONS``, plausible
slips as text replacements in the reference solution with the report fragments each must produce, which
``tests/test_exercises.py`` runs. The reference solution is ``tests/exercise_solutions/NAME.py`` (not shipped);
``nox -s templates`` writes the template from it. ``nox -s new-chapter`` writes a chapter's first exercise
here. The registry orders the exercises as the book does: by chapter, then as the page links their
templates (``chapters.json``).
"""
