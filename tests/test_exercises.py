"""The coding exercises' checker: right solutions pass, plausible wrong ones fail with the message a student needs.

The reference solutions are in ``tests/exercise_solutions/`` (out of the site's sources); each wrong
solution is a reference solution with one realistic slip put in by a text replacement, so the slip is
visible in the exercise's module (``src/tinyformer_exercises/exercises/NAME.py``, ``WRONG_SOLUTIONS``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tinyformer_exercises import EXERCISES, TEMPLATES, get
from tinyformer_exercises.authoring import template_from_solution
from tinyformer_exercises.checks import CHECKS, fresh_checks
from tinyformer_exercises.cli import main

SOLUTIONS = Path(__file__).resolve().parent / "exercise_solutions"

# (exercise id, slip, [(text in the reference solution, replacement)], fragments the report must contain): each
# exercise's WRONG_SOLUTIONS, kept in its module (tinyformer_exercises.exercises) beside its checks.
WRONG = [
    (exercise.id, *row)
    for exercise in EXERCISES.values()
    for row in importlib.import_module(exercise.module).WRONG_SOLUTIONS
]


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    code = main([str(arg) for arg in argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def solution(exercise_id: str) -> Path:
    return SOLUTIONS / EXERCISES[exercise_id].template


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_reference_solution_passes_every_check(capsys: pytest.CaptureFixture[str], exercise_id: str) -> None:
    code, out = run(capsys, exercise_id, solution(exercise_id))
    assert code == 0, out
    total = len(CHECKS[exercise_id]) + len(fresh_checks(exercise_id, 0))
    assert f"All {total} checks passed." in out
    assert "FAIL" not in out


@pytest.mark.parametrize(
    ("exercise_id", "slip", "replacements", "fragments"), WRONG, ids=[f"{row[0]}: {row[1]}" for row in WRONG]
)
def test_wrong_solution_fails_with_a_useful_message(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    exercise_id: str,
    slip: str,
    replacements: list[tuple[str, str]],
    fragments: list[str],
) -> None:
    source = solution(exercise_id).read_text()
    for old, new in replacements:
        assert old in source, f"the reference solution no longer contains {old!r}"
        source = source.replace(old, new)
    wrong = tmp_path / EXERCISES[exercise_id].template
    wrong.write_text(source)
    code, out = run(capsys, exercise_id, wrong)
    assert code == 1, out
    for fragment in fragments:
        assert fragment in out, f"{slip}: {fragment!r} missing from\n{out}"
    assert "Traceback" not in out
    assert "tinyformer_exercises" not in out.replace(str(TEMPLATES), "")  # no frame of the checker
    # a mistake is named once, after the failing checks; the rule the checks test, once
    assert out.count("The rule the checks test:") <= 1
    if "What the failures point to:" in out:
        after = out.split("What the failures point to:")[1]
        assert "FAIL" not in after
        named = [line for line in after.splitlines() if line.startswith("  - ")]
        assert named, out
        assert len(named) == len(set(named)), out


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_every_run_draws_fresh_cases_that_the_reference_solution_passes(exercise_id: str) -> None:
    """Beside the printed cases, each run draws cases anew from a seed (the same seed, the same cases); the
    reference solution passes those of many seeds (run in this process, for speed)."""
    exercise = EXERCISES[exercise_id]
    spec = importlib.util.spec_from_file_location(f"reference_{exercise.template[:-3]}", solution(exercise_id))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Local:
        """The reference function called in this process, as the checks call a student's (``run``)."""

        def __init__(self, function):
            self.function = function

        def run(self, call_text, *args, **kwargs):
            return self.function(*args, **kwargs)

    functions = {name: Local(getattr(module, name)) for name in exercise.functions}
    for seed in range(6):
        fresh = fresh_checks(exercise_id, seed)
        assert len(fresh) >= 3, exercise_id
        assert [check.title for check in fresh] == [check.title for check in fresh_checks(exercise_id, seed)]
        for check in fresh:
            assert check.title.startswith("fresh inputs: ")
            torch.manual_seed(0)
            check.run(functions)  # raises CheckFailed on a mismatch


def lookup_table_solution(
    tmp_path: Path, function: str, table: dict, signature: str, key: str, dtype: str = "None"
) -> Path:
    """A file that answers the printed cases from a table computed beforehand with the library, and raises
    KeyError on any other input."""
    rows = ",\n".join(f"    {case!r}: {answer.tolist()!r}" for case, answer in table.items())
    source = (
        f"import torch\n\nTABLE = {{\n{rows},\n}}\n\n\ndef {function}({signature}):\n"
        f"    return torch.tensor(TABLE[{key}], dtype={dtype})\n"
    )
    path = tmp_path / f"{function}.py"
    path.write_text(source)
    return path


def test_a_table_of_the_printed_cases_fails_the_fresh_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Seen in a student's trial: a table of the printed cases' answers passed sliding-window-mask (6/6) and
    scaled-frequencies (5/5). The printed cases still pass; every fresh case fails, and the report gives the
    seed that draws them again."""
    from tinyformer.models.cache import sliding_window_mask
    from tinyformer.models.positional import RopeScaling, rotary_frequencies

    titles = [check.title for check in CHECKS["sliding-window-mask"]]
    cases = [tuple(int(n) for n in re.search(r"\(([\d, ]+)\)", t)[1].split(", ")) for t in titles]
    cases = [case if len(case) == 4 else (*case, 0) for case in cases]
    table = {case: sliding_window_mask(*case[:3], num_sink_tokens=case[3]) for case in cases}
    path = lookup_table_solution(
        tmp_path,
        "sliding_window_mask",
        table,
        "seq_len_q, seq_len_k, window, num_sink_tokens=0",
        "(seq_len_q, seq_len_k, window, num_sink_tokens)",
    )
    code, out = run(capsys, "sliding-window-mask", path, "--seed", "7")
    assert code == 1
    printed = len(CHECKS["sliding-window-mask"])
    assert out.count("  pass  ") == printed, out
    assert f"Checks {printed + 1} to {printed + 3} were drawn anew with seed 7 (--seed 7 draws" in out
    assert f"3 of {printed + 3} checks failed." in out

    titles = [check.title for check in CHECKS["scaled-frequencies"]]
    keys = [(8, 10000.0, None, 1.0), (8, 10000.0, "linear", 4.0), (8, 10000.0, "ntk", 4.0), (64, 500000.0, "ntk", 8.0)]
    keys += [(16, 10000.0, None, 1.0), (16, 10000.0, "ntk", 3.0)]

    def scaled_frequencies(head_dim, base, rope_type, factor):
        scaling = None if rope_type is None else RopeScaling(rope_type, factor)
        return rotary_frequencies(head_dim, base=base, scaling=scaling)

    table = {key: scaled_frequencies(*key) for key in keys}
    path = lookup_table_solution(
        tmp_path,
        "scaled_frequencies",
        table,
        "head_dim, base=10000.0, rope_type=None, factor=1.0",
        "(head_dim, base, rope_type, factor)",
        dtype="torch.float64",
    )
    code, out = run(capsys, "scaled-frequencies", path, "--seed", "7")
    assert code == 1
    assert out.count("  pass  ") == len(titles), out
    assert out.count("  FAIL  ") == 3, out


# Hints a student's trial met that named the wrong mistake: (exercise, the wrong solution's slip, what the report
# said and must no longer say).
WRONG_HINTS = [
    ("online-softmax", "no guard for a row of -inf (not the rescaling's fault)", "not rescaled"),
    ("sliding-window-mask", "a window without the causal part (no sinks: not the sinks' fault)", "your sinks escape"),
    (
        "repeat-kv-heads",
        "an expand over a new dimension before the heads (tiles them, as .repeat does)",
        ".repeat tiles",
    ),
]


@pytest.mark.parametrize(("exercise_id", "slip", "wrong_hint"), WRONG_HINTS, ids=[row[0] for row in WRONG_HINTS])
def test_a_hint_names_the_mistake_made_not_a_neighbour(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, exercise_id: str, slip: str, wrong_hint: str
) -> None:
    (replacements,) = [row[2] for row in WRONG if row[:2] == (exercise_id, slip)]
    source = solution(exercise_id).read_text()
    for old, new in replacements:
        source = source.replace(old, new)
    wrong = tmp_path / EXERCISES[exercise_id].template
    wrong.write_text(source)
    code, out = run(capsys, exercise_id, wrong, "--seed", "0")
    assert code == 1, out
    assert wrong_hint not in out, out


def test_every_exercise_has_two_wrong_solutions_and_checks_with_edge_cases() -> None:
    for exercise_id in EXERCISES:
        assert sum(row[0] == exercise_id for row in WRONG) >= 2, exercise_id
        assert len(CHECKS[exercise_id]) >= 3, exercise_id


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_unfinished_template_fails_naming_the_function(capsys: pytest.CaptureFixture[str], exercise_id: str) -> None:
    exercise = EXERCISES[exercise_id]
    code, out = run(capsys, exercise_id, exercise.template_path)
    assert code == 1
    assert f"NOT DONE  {exercise.functions[0]} still raises NotImplementedError." in out
    assert "Traceback" not in out


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_template_is_installed_and_states_its_objective(exercise_id: str) -> None:
    """The template ships with the installed package (package data) and names the objective it assesses."""
    exercise = EXERCISES[exercise_id]
    text = exercise.template_path.read_text()
    assert " ".join(text.split()).count(f"Objective assessed: {exercise.objective}.") == 1
    # the student's command first, then the clone's
    student = text.find(f"python3 -m tinyformer_exercises {exercise.id} {exercise.template}")
    assert 0 <= student < text.find(f"nox -s check -- {exercise.id} path/to/{exercise.template}")
    tree = ast.parse(text)
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert defined == list(exercise.functions)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            assert ast.get_docstring(node), node.name
            assert isinstance(node.body[-1], ast.Raise), f"{node.name} must only raise NotImplementedError"
            assert len(node.body) == 2, node.name  # the docstring and the raise


def test_file_that_does_not_import_names_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "my_mask.py"
    broken.write_text(
        "import torch\n\n\ndef causal_mask(seq_len):\n    return torhc.ones(seq_len, seq_len)\n\nx = 1 +\n"
    )
    code, out = run(capsys, "causal-mask", broken)
    assert code == 1
    assert f"Could not import {broken}" in out
    assert "my_mask.py, line 7: x = 1 +" in out
    assert "SyntaxError: invalid syntax" in out

    broken.write_text("import torch\n\nSIZE = torhc.Size([2])\n\ndef causal_mask(seq_len):\n    return None\n")
    code, out = run(capsys, "causal-mask", broken)
    assert code == 1
    assert "my_mask.py, line 3: SIZE = torhc.Size([2])" in out
    assert "NameError: name 'torhc' is not defined" in out
    assert "Traceback" not in out
    assert "checking.py" not in out


def test_error_inside_the_students_function_points_at_their_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = tmp_path / "mask.py"
    broken.write_text(
        "import torch\n\ndef causal_mask(seq_len):\n    ones = torch.ones(seq_len, seq_len)\n    return ones.tril(diagonal=True, k=0)\n"
    )
    code, out = run(capsys, "causal-mask", broken)
    assert code == 1
    assert "calling causal_mask(1) raised TypeError" in out
    assert "at mask.py, line 5: return ones.tril(diagonal=True, k=0)" in out
    assert "Traceback" not in out


def test_missing_function_and_non_tensor_results(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    other = tmp_path / "other.py"
    other.write_text("def causal_mask_v2(seq_len):\n    return None\n")
    code, out = run(capsys, "causal-mask", other)
    assert code == 1
    assert "does not define a function named causal_mask" in out

    other.write_text("def causal_mask(seq_len):\n    return [[True]]\n")
    code, out = run(capsys, "causal-mask", other)
    assert code == 1
    assert "got:      list [[True]]" in out


def test_list_names_every_exercise_and_its_template(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "--list")
    assert code == 0
    for exercise in EXERCISES.values():
        line = next(line for line in out.splitlines() if exercise.id in line.split())
        assert line.split() == [exercise.number, exercise.id, exercise.template]
        assert re.fullmatch(r"\d+\.\d+", exercise.number)
        assert exercise.template_path.is_file()


def test_an_exercise_is_named_by_its_number_as_well(capsys: pytest.CaptureFixture[str]) -> None:
    """``6.7`` (the page's number) and ``Exercise 6.7`` name the exercise its id names; an unknown number is
    a usage error that lists every number and id."""
    for exercise in EXERCISES.values():
        assert get(exercise.number) is exercise
        assert get(f"Exercise {exercise.number}") is exercise
    assert len({exercise.number for exercise in EXERCISES.values()}) == len(EXERCISES)
    code, out = run(capsys, "1.7", solution("causal-mask"))
    assert code == 0, out
    assert out.startswith("Exercise 1.7 (causal-mask, chapter 1,")
    code, out = run(capsys, "99.1", solution("causal-mask"))
    assert code == 2
    assert "There is no exercise '99.1'" in out
    assert "1.7 causal-mask" in out


def test_template_is_written_into_the_current_folder_and_never_over_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    exercise = EXERCISES["gather-blocks"]
    code, out = run(capsys, "--template", exercise.number)
    assert code == 0, out
    written = tmp_path / exercise.template
    assert written.read_text() == exercise.template_path.read_text()
    assert f"python3 -m tinyformer_exercises gather-blocks {exercise.template}" in out
    written.write_text("# my work\n")
    code, out = run(capsys, "--template", "gather-blocks")
    assert code == 1
    assert "exists already; nothing was written" in out
    assert written.read_text() == "# my work\n"
    code, out = run(capsys, "--template", "no-such-exercise")
    assert code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [exercise.template]


def test_command_line_exit_codes(tmp_path: Path) -> None:
    """Through a real interpreter, as nox runs it: usage errors exit 2, failures 1, success 0."""

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tinyformer_exercises", *argv]
        return subprocess.run(command, capture_output=True, text=True, check=False, cwd=tmp_path)

    assert cli("--list").returncode == 0
    unknown = cli("no-such-exercise", str(solution("causal-mask")))
    assert unknown.returncode == 2
    assert "There is no exercise 'no-such-exercise'" in unknown.stdout
    missing = cli("causal-mask", "nowhere.py")
    assert missing.returncode == 2
    assert missing.stdout.startswith("There is no file nowhere.py")
    assert cli("causal-mask", str(EXERCISES["causal-mask"].template_path)).returncode == 1
    passed = cli("causal-mask", str(solution("causal-mask")))
    assert passed.returncode == 0, passed.stdout
    assert re.search(r"All \d+ checks passed", passed.stdout)


def test_the_list_the_template_and_a_wrong_command_line_answer_before_torch_loads(tmp_path: Path) -> None:
    """``--list``, ``--template`` and a wrong command line are answered without importing torch (its import is
    most of a check's start-up: about 2 s on 2 cores); a check imports it."""
    probe = "import sys; from tinyformer_exercises.cli import main; main(sys.argv[1:]); print('torch' in sys.modules)"

    def loads_torch(*argv: str) -> bool:
        command = [sys.executable, "-c", probe, *argv]
        run = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        return run.stdout.splitlines()[-1] == "True"

    assert not loads_torch("--list")
    assert not loads_torch("--template", "causal-mask")
    assert not loads_torch("no-such-exercise", "mine.py")
    assert not loads_torch("--time-limit", "0", "causal-mask", "mine.py")
    assert not loads_torch("causal-mask", "nowhere.py")
    assert loads_torch("causal-mask", str(solution("causal-mask")))


# ---------------------------------------------------------------------------------------------------------------
# One file per exercise: the template is made from the reference solution (tinyformer_exercises.authoring)


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_template_is_what_its_reference_solution_gives(exercise_id: str) -> None:
    """Each template is its solution with the marked answer taken out (``nox -s templates`` writes them), so
    the two are never kept by hand: a template edited alone, or a solution changed without ``nox -s
    templates``, fails here."""
    exercise = EXERCISES[exercise_id]
    solution = (SOLUTIONS / exercise.template).read_text()
    assert "# BEGIN SOLUTION" in solution
    made = template_from_solution(solution, name=exercise.template, chapter=exercise.chapter_name)
    assert (TEMPLATES / exercise.template).read_text() == made, f"run nox -s templates ({exercise.template})"
    assert made.count("raise NotImplementedError") >= len(exercise.functions)
    assert "SOLUTION" not in made


def test_templates_folder_holds_exactly_the_exercises_templates() -> None:
    assert sorted(p.name for p in TEMPLATES.glob("*.py")) == sorted({e.template for e in EXERCISES.values()})


def test_a_top_level_block_goes_and_a_function_block_becomes_not_implemented() -> None:
    solution = (
        "import a\n\n# BEGIN SOLUTION\nimport b\n\n\ndef helper():\n    return 2\n# END SOLUTION\n\n\n"
        'def f():\n    """Doc."""\n    # BEGIN SOLUTION\n    return helper()\n    # END SOLUTION\n'
    )
    assert template_from_solution(solution) == 'import a\n\n\ndef f():\n    """Doc."""\n    raise NotImplementedError\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def f():\n    return 1\n", "no # BEGIN SOLUTION ... # END SOLUTION block"),
        ("def f():\n    # BEGIN SOLUTION\n    return 1\n", "s.py:2: # BEGIN SOLUTION is never closed"),
        ("def f():\n    return 1\n    # END SOLUTION\n", "s.py:3: # END SOLUTION without a # BEGIN SOLUTION"),
        (
            "def f():\n    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n",
            "s.py:3: # BEGIN SOLUTION inside the block opened at line 2",
        ),
        ("def f():\n    # BEGIN SOLUTION\n    x = 1\n# END SOLUTION\n", "s.py:4: # END SOLUTION is not indented"),
    ],
)
def test_badly_marked_solutions_are_refused_naming_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        template_from_solution(text, name="s.py")


def test_a_template_names_its_chapter_from_the_table_of_contents() -> None:
    solution = '"""Coding exercise probe.\n\nMore.\n"""\n\n\ndef f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n'
    made = template_from_solution(solution, chapter='chapter 9, "A probe chapter with a title long enough to wrap"')
    assert made.startswith(
        '"""Coding exercise probe (chapter 9, "A probe chapter with a title long enough\nto wrap").\n\nMore.\n'
    )
    with pytest.raises(ValueError, match=re.escape('s.py:1: the docstring does not open with """Coding exercise ID.')):
        template_from_solution(
            '"""Exercise."""\ndef f():\n    # BEGIN SOLUTION\n    pass\n    # END SOLUTION\n', name="s.py", chapter="x"
        )
