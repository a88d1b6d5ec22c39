"""Check a coding exercise: ``python -m tinyformer.exercises ID FILE``
(``--list`` names the exercises).

Exit status: 0 every check passed; 1 a check failed, the function is
unfinished or the file does not import; 2 the command line is wrong (unknown
exercise, no such file)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from tinyformer.exercises import EXERCISES
from tinyformer.exercises.checking import (
    CheckFailed,
    FileProblem,
    Unfinished,
    load_functions,
)
from tinyformer.exercises.checks import CHECKS


def _list() -> int:
    width = max(len(exercise_id) for exercise_id in EXERCISES)
    print("Coding exercises (id, chapter, template):")
    for exercise in EXERCISES.values():
        print(
            f"  {exercise.id:<{width}}  {exercise.chapter + '.md':<25} {exercise.template_path}"
        )
    print(
        "\nCheck one with:  nox -s check -- ID FILE   (or: python -m tinyformer.exercises ID FILE)"
    )
    return 0


def check(exercise_id: str, path: Path) -> int:
    """Run exercise ``exercise_id``'s checks on the file at ``path``, print
    the report, return the exit status."""
    exercise = EXERCISES[exercise_id]
    print(
        f"Exercise {exercise.id}: {', '.join(exercise.functions)} in {path}"
    )
    print(f"Objective: {exercise.objective}.\n")
    try:
        functions = load_functions(
            path,
            exercise.functions,
            f"student_{exercise.id.replace('-', '_')}",
        )
    except FileProblem as problem:
        print("\n".join(problem.lines))
        print("\nFix this and run the check again.")
        return 1
    checks = CHECKS[exercise.id]
    failed = 0
    for number, item in enumerate(checks, start=1):
        torch.manual_seed(0)
        try:
            item.run(functions)
        except Unfinished as unfinished:
            name = unfinished.args[0]
            print(f"  NOT DONE  {name} still raises NotImplementedError.")
            print(
                f"            Write the body of {name} in {path} (replace the `raise NotImplementedError` line)."
            )
            return 1
        except CheckFailed as failure:
            failed += 1
            print(f"  FAIL  {number}. {item.title}")
            for line in failure.lines:
                print(f"          {line}")
            continue
        print(f"  pass  {number}. {item.title}")
    print()
    if failed:
        print(f"{failed} of {len(checks)} checks failed.")
        return 1
    print(f"All {len(checks)} checks passed.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tinyformer.exercises",
        description="Check your solution of a tinyformer coding exercise against the library.",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the exercises and their templates",
    )
    parser.add_argument(
        "exercise", nargs="?", help="the exercise id (see --list)"
    )
    parser.add_argument("file", nargs="?", type=Path, help="your .py file")
    args = parser.parse_args(argv)
    if args.list:
        return _list()
    if args.exercise is None or args.file is None:
        parser.print_usage()
        print("give an exercise id and your file, or --list")
        return 2
    if args.exercise not in EXERCISES:
        print(
            f"There is no exercise {args.exercise!r}. The exercises are: {', '.join(EXERCISES)}."
        )
        return 2
    if not args.file.is_file():
        print(f"There is no file {args.file} (looked in {Path.cwd()}).")
        return 2
    try:
        return check(args.exercise, args.file)
    # a fault of the checker itself: one line, no traceback
    except Exception as error:
        print(
            f"The checker itself failed ({type(error).__name__}: {error}); please report this."
        )
        return 3


if __name__ == "__main__":
    try:
        sys.exit(main())
    # the report was piped into a command that stopped reading (| head)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
