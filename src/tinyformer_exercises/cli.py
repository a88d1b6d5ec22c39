"""The checker's command line: ``python -m tinyformer_exercises ID FILE``
(``--list`` names the exercises, ``--template ID`` writes one's template
into the current folder; ID is an exercise's id or its number, ``6.7``).

Exit status: 0 every check passed; 1 a check failed, the function is
unfinished, the file does not import, or the student's code exited, crashed
or ran past its time limit; 2 the command line is wrong (unknown exercise, no
such file); 3 the checker itself failed; 130 stopped by Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import re
import secrets
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tinyformer_exercises import CHAPTERS, EXERCISES, get

if TYPE_CHECKING:
    from tinyformer_exercises._sandbox import Student
    from tinyformer_exercises.checking import CheckFailed

# seconds a check may take; the import may take twice as long
DEFAULT_TIME_LIMIT = 10.0
MIN_TIME_LIMIT, MAX_TIME_LIMIT = 0.5, 3600.0


def _list() -> int:
    width = max(len(exercise_id) for exercise_id in EXERCISES)
    print("Coding exercises, in the book's order (number, id, template):")
    chapter = ""
    for exercise in EXERCISES.values():
        if exercise.chapter != chapter:
            chapter = exercise.chapter
            number, title = CHAPTERS[chapter]
            print(f"\nChapter {number}. {title}")
        print(
            f"  {exercise.number:<5}  {exercise.id:<{width}}  {exercise.template}"
        )
    print(
        "\nWrite a template into this folder:  python3 -m tinyformer_exercises --template ID"
        "\nCheck your file:                    python3 -m tinyformer_exercises ID FILE"
        "\nID is the exercise's id or its number (6.7); in a clone of the repository, nox -s check -- ID FILE."
    )
    return 0


def _write_template(exercise_id: str, folder: Path) -> int:
    """Copy the exercise's template into ``folder``; 1, writing nothing,
    where a file of that name is there already."""
    exercise = get(exercise_id)
    target = folder / exercise.template
    status = 0
    if target.exists():
        print(
            f"{target} exists already; nothing was written (move it, or check it with the command below)."
        )
        status = 1
    else:
        target.write_text(exercise.template_path.read_text())
        print(
            f"Wrote {target}: exercise {exercise.number} ({exercise.id}), {exercise.chapter_name}."
        )
    print(
        f"Fill in its body, then:  python3 -m tinyformer_exercises {exercise.id} {exercise.template}"
    )
    return status


@contextlib.contextmanager
def _ctrl_c_after() -> Iterator[None]:
    """Hold a Ctrl-C back until the block is done, then raise it (KeyboardInterrupt).

    For the import of torch: a Ctrl-C while torch's C++ code loads would abort the process (pybind11:
    "terminate called after throwing an instance of error_already_set"). Outside the main thread, where a
    handler cannot be set, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(
        signal.SIGINT, lambda number, frame: pressed.append(number)
    )
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def check(
    exercise_id: str,
    path: Path,
    *,
    time_limit: float = DEFAULT_TIME_LIMIT,
    seed: int | None = None,
) -> int:
    """Run exercise ``exercise_id``'s checks on the file at ``path``, print
    the report, return the exit status (0 only when every check passed).

    The printed cases come first, then cases drawn anew from ``seed``
    (a random one when None; the report gives it, and ``--seed`` draws the
    same cases again). The file is imported and its functions are called in
    a child process (:class:`~tinyformer_exercises._sandbox.Student`); each
    check may take ``time_limit`` seconds, the import twice that. A check
    that runs past its limit ends the run: the checks after it are not run
    (an endless loop costs one limit, not one per check)."""
    # torch is imported for a check only: --list, --template and a wrong command line answer at once
    with _ctrl_c_after():
        import torch

        from tinyformer_exercises._sandbox import (
            Remote,
            Student,
            StudentExit,
        )
        from tinyformer_exercises.checking import CheckFailed, Unfinished
        from tinyformer_exercises.checks import CHECKS, fresh_checks
    exercise = get(exercise_id)
    print(
        f"Exercise {exercise.number} ({exercise.id}, {exercise.chapter_name}): "
        f"{', '.join(exercise.functions)} in {path}"
    )
    print(f"Objective: {exercise.objective}.\n")
    student = Student(
        path,
        f"student_{exercise.id.replace('-', '_')}",
        exercise.functions,
        exercise.references,
        check_limit=time_limit,
        import_limit=2 * time_limit,
    )
    if seed is None:
        seed = secrets.randbelow(1_000_000)
    printed = CHECKS[exercise.id]
    checks = [*printed, *fresh_checks(exercise.id, seed)]
    number = 0
    try:
        problem = student.start()
        if problem:
            print("\n".join(problem))
            print("\nFix this and run the check again.")
            return 1
        _show_printed(student, "  ")
        functions = {
            name: Remote(student, name) for name in exercise.functions
        }
        failures: list[CheckFailed] = []
        for number, item in enumerate(checks, start=1):
            torch.manual_seed(0)
            try:
                student.begin_check()
                item.run(functions)
            except Unfinished as unfinished:
                name = unfinished.args[0]
                print(
                    f"  NOT DONE  {name} still raises NotImplementedError."
                )
                print(
                    f"            Write the body of {name} in {path} (replace the `raise NotImplementedError` line)."
                )
                return 1
            except CheckFailed as failure:
                failures.append(failure)
                print(f"  FAIL  {number}. {item.title}")
                for line in failure.lines:
                    print(f"          {line}")
                _show_printed(student, "          ")
                continue
            except StudentExit as ended:
                print(f"  FAIL  {number}. {item.title}")
                print(f"          {ended.line}")
                _show_printed(student, "          ")
                failures.append(CheckFailed(ended.line))
                if "ran past the time limit" in ended.line and number < len(
                    checks
                ):
                    left = len(checks) - number
                    print(
                        f"  STOP  the {left} check{'s' if left > 1 else ''} after it were not run: "
                        "each would wait for the same limit. Fix the loop and check again."
                    )
                    failures += [CheckFailed("not run")] * left
                    break
                continue
            print(f"  pass  {number}. {item.title}")
            _show_printed(student, "          ")
        print()
        fresh = len(checks) - len(printed)
        drawn = (
            f"Checks {len(printed) + 1} to {len(checks)} were drawn anew with seed {seed}"
            f" (--seed {seed} draws the same ones again)."
        )
        if failures:
            print(f"{len(failures)} of {len(checks)} checks failed.")
            if fresh:
                print(drawn)
            _lessons(failures)
            return 1
        print(f"All {len(checks)} checks passed.")
        if fresh:
            print(drawn)
        print(
            "Each result was compared with the library's in float64, after its shape and, "
            "where the exercise fixes one, its dtype."
        )
        return 0
    except KeyboardInterrupt:
        student.kill()
        where = f" during check {number} of {len(checks)}" if number else ""
        print(f"\nStopped by Ctrl-C{where}; nothing was certified.")
        return 130
    finally:
        student.close()


def _show_printed(student: Student, indent: str) -> None:
    """What the student's code printed since the last report line."""
    for line in student.printed:
        print(f"{indent}your code printed: {line}")
    student.printed = []


def _lessons(failures: list[CheckFailed]) -> None:
    """The common mistakes the failing results match, each once (a mistake
    named again with other numbers counts as the same), then the rule the
    checks test, once."""
    named: dict[str, str] = {}
    for failure in failures:
        for mistake in failure.mistakes:
            named.setdefault(
                re.sub(r"[-+]?\d[\d.e+-]*", "#", mistake), mistake
            )
    mistakes = list(named.values())
    readings = list(dict.fromkeys(f.reading for f in failures if f.reading))
    if mistakes:
        print("\nWhat the failures point to:")
        for mistake in mistakes:
            print(f"  - {mistake}")
    for reading in readings:
        print(f"\nThe rule the checks test: {reading}")


def _known(exercise_id: str) -> bool:
    """Whether ``exercise_id`` names an exercise by id or number; says so
    when it does not."""
    try:
        get(exercise_id)
    except KeyError:
        numbers = ", ".join(
            f"{e.number} {e.id}" for e in EXERCISES.values()
        )
        print(
            f"There is no exercise {exercise_id!r}. The exercises are: {numbers}."
        )
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tinyformer_exercises",
        description="Check your solution of a tinyformer coding exercise against the library.",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the exercises in the book's order, with their numbers",
    )
    parser.add_argument(
        "--template",
        metavar="ID",
        help="write the exercise's template into the current folder",
    )
    parser.add_argument(
        "exercise",
        nargs="?",
        help="the exercise's id or its number in the book, e.g. 6.7 (see --list)",
    )
    parser.add_argument("file", nargs="?", type=Path, help="your .py file")
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="draw the fresh cases from seed N (a report gives the seed it drew them with)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT,
        metavar="SECONDS",
        help=f"seconds each check may take, the import twice that (default {DEFAULT_TIME_LIMIT:g})",
    )
    args = parser.parse_args(argv)
    if args.list:
        return _list()
    if args.template is not None:
        if not _known(args.template):
            return 2
        return _write_template(args.template, Path.cwd())
    if args.exercise is None or args.file is None:
        parser.print_usage()
        print(
            "give an exercise id (or number) and your file, --template ID, or --list"
        )
        return 2
    if not MIN_TIME_LIMIT <= args.time_limit <= MAX_TIME_LIMIT:
        print(
            f"--time-limit must be between {MIN_TIME_LIMIT:g} and {MAX_TIME_LIMIT:g} seconds, not {args.time_limit:g}"
        )
        return 2
    if not _known(args.exercise):
        return 2
    if not args.file.is_file():
        print(f"There is no file {args.file} (looked in {Path.cwd()}).")
        return 2
    try:
        return check(
            args.exercise,
            args.file,
            time_limit=args.time_limit,
            seed=args.seed,
        )
    # a fault of the checker itself: one line, no traceback
    except Exception as error:
        print(
            f"The checker itself failed ({type(error).__name__}: {error}); please report this."
        )
        return 3
