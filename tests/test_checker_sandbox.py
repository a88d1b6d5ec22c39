"""The checker from the student's side, given files written as a student trying their luck would write them.

The student's file runs in a child process (``tinyformer_exercises._sandbox``): it cannot pass with the library's
own code, cannot reach the comparisons or the verdict, and cannot end, crash or hang the checker.

What is about the checker's own process runs ``python -m tinyformer_exercises`` as a subprocess with a timeout
(:func:`cli`): its exit status on Ctrl-C, running from any folder, a student's code that reaches for the report
or patches the checker's modules, a wrong command line. The rest calls the command line's ``main`` in this
process (:func:`checker`): the same report and exit status, the student's file in a child all the same, without
a new interpreter and fork server loading torch for each file (about 3 s of CPU a run).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tinyformer_exercises import CHAPTER_TEMPLATES, CHAPTERS, EXERCISES, TEMPLATES
from tinyformer_exercises.authoring import read_chapters
from tinyformer_exercises.checking import FRESH_CASES
from tinyformer_exercises.checks import CHECKS
from tinyformer_exercises.cli import main

#: causal-mask's checks in one run: the printed cases and those drawn anew
CAUSAL_CHECKS = len(CHECKS["causal-mask"]) + FRESH_CASES

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = Path(__file__).resolve().parent / "exercise_solutions"
POSIX = os.name == "posix"


def cli(*argv: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tinyformer_exercises", *(str(arg) for arg in argv)]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd, timeout=timeout)


Checker = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def checker(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Checker:
    """:func:`cli` in this process: ``checker(*argv, cwd=folder)`` runs ``main(argv)`` in ``folder`` and returns
    its exit status and what it printed, as a finished process."""

    def run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
        monkeypatch.chdir(cwd)
        status = main([str(arg) for arg in argv])
        printed = capsys.readouterr()
        return subprocess.CompletedProcess(argv, status, printed.out, printed.err)

    return run


def student(tmp_path: Path, source: str, name: str = "mine.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def assert_clean(out: str) -> None:
    """No traceback, no frame of the checker, not a fault of the checker (what the student's own code printed,
    shown as such, aside)."""
    out = "\n".join(line for line in out.splitlines() if not line.strip().startswith("your code printed:"))
    assert "Traceback" not in out, out
    assert "_sandbox.py" not in out, out
    assert "checking.py" not in out, out
    assert "The checker itself failed" not in out, out


MASK = "torch.ones(seq_len, seq_len, dtype=torch.bool).tril()"


# -- the library's own code


def test_a_file_that_only_imports_the_librarys_function_is_refused_by_name(checker: Checker, tmp_path: Path) -> None:
    path = student(tmp_path, "from tinyformer.models.attention import causal_mask\n")
    run = checker("causal-mask", path, cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "causal_mask in mine.py is the library's own tinyformer.models.attention.causal_mask" in run.stdout
    assert "checks passed" not in run.stdout
    assert_clean(run.stdout + run.stderr)


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (
            "a wrapper",
            """
            import tinyformer.models.attention as library

            def causal_mask(seq_len):
                return library.causal_mask(seq_len)
            """,
        ),
        (
            "a decorated wrapper",
            """
            import functools
            from tinyformer import attention

            @functools.lru_cache
            def causal_mask(seq_len):
                return attention.causal_mask(seq_len)
            """,
        ),
    ],
)
def test_calling_the_librarys_function_fails_every_check(
    checker: Checker, tmp_path: Path, kind: str, source: str
) -> None:
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, (kind, run.stdout)
    fails = re.findall(r"^  FAIL  \d", run.stdout, flags=re.M)
    assert len(fails) == CAUSAL_CHECKS, run.stdout
    assert "called the library's own tinyformer.models.attention.causal_mask" in run.stdout, run.stdout
    assert "at mine.py, line" in run.stdout
    assert_clean(run.stdout + run.stderr)


def test_calling_the_module_through_its_class_is_refused(checker: Checker, tmp_path: Path) -> None:
    """The template says that calling the module is refused; ``type(ffn).forward`` is the same call."""
    source = """
    def position_wise_feed_forward(ffn, x):
        return type(ffn).forward(ffn, x)
    """
    run = checker("feed-forward", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "called the library's own tinyformer.models.encoder.PositionwiseFeedForward.forward" in run.stdout
    assert "pass  " not in run.stdout
    assert_clean(run.stdout + run.stderr)


@pytest.mark.parametrize(
    ("kind", "source", "named"),
    [
        (
            "the watch switched off and back on around the call",
            """
            import importlib
            import sys
            import tinyformer.models.attention as library

            def causal_mask(seq_len):
                hook = sys.getprofile()
                sys.setprofile(None)
                try:
                    return importlib.reload(library).causal_mask(seq_len)
                finally:
                    sys.setprofile(hook)
            """,
            "(sys.setprofile()): not allowed, at mine.py, line 8: sys.setprofile(None)",
        ),
        (
            "a reload, the code copied under another name",
            """
            import importlib
            import types
            import tinyformer.models.attention as library

            def causal_mask(seq_len):
                original = importlib.reload(library).causal_mask
                code = original.__code__.replace(co_qualname="mine", co_name="mine")
                return types.FunctionType(code, original.__globals__, "mine", original.__defaults__)(seq_len)
            """,
            "(reading the library's file attention",
        ),
        (
            "a worker thread without the watch",
            """
            import importlib
            import sys
            import threading
            import tinyformer.models.attention as library

            def causal_mask(seq_len):
                out = {}

                def work():
                    sys.setprofile(None)
                    out["mask"] = importlib.reload(library).causal_mask(seq_len)

                worker = threading.Thread(target=work)
                worker.start()
                worker.join()
                return out["mask"]
            """,
            "tried to get past the checker's watch on the library (sys.setprofile())",
        ),
    ],
)
def test_getting_past_the_watch_fails(checker: Checker, tmp_path: Path, kind: str, source: str, named: str) -> None:
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, (kind, run.stdout)
    assert f"{CAUSAL_CHECKS} of {CAUSAL_CHECKS} checks failed." in run.stdout, run.stdout
    assert named in run.stdout, run.stdout
    assert_clean(run.stdout + run.stderr)


def test_the_librarys_source_compiled_anew_is_refused(checker: Checker, tmp_path: Path) -> None:
    source = """
    import tinyformer.models.attention as library

    namespace = {"__name__": "elsewhere"}
    exec(compile(open(library.__file__).read(), "/tmp/elsewhere.py", "exec"), namespace)
    causal_mask = namespace["causal_mask"]
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "importing the file tried to get past the checker's watch on the library" in run.stdout
    assert "(reading the library's file attention.py): not allowed, at mine.py, line 5" in run.stdout
    assert_clean(run.stdout + run.stderr)


def test_a_verbatim_copy_of_the_librarys_function_is_refused_by_name(checker: Checker, tmp_path: Path) -> None:
    """The same code, docstring included, made anew in the student's file (copied from the library's source)."""
    import inspect

    from tinyformer import attention

    copied = inspect.getsource(attention.causal_mask)
    path = tmp_path / "mine.py"
    path.write_text("from __future__ import annotations\n\nimport torch\nfrom torch import Tensor\n\n\n" + copied)
    run = checker("causal-mask", path, cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert (
        "causal_mask in mine.py is the library's own tinyformer.models.attention.causal_mask (a copy of its code)"
        in (run.stdout)
    )


def test_a_message_forged_on_the_childs_pipe_is_a_failed_check(checker: Checker, tmp_path: Path) -> None:
    source = f"""
    import gc
    import torch

    def causal_mask(seq_len):
        child = next(o for o in gc.get_objects() if type(o).__name__ == "_Child")
        child.reply({{"kind": "ok", "value": {MASK}, "printed": 5}})
        return None
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "the process running your code sent back a message the checker did not ask for" in run.stdout
    assert_clean(run.stdout + run.stderr)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_students_code_cannot_write_into_the_report(tmp_path: Path) -> None:
    """Its prints are shown escaped, under its check; the processes it runs in have no handle on the report."""
    source = f"""
    import os
    import torch

    def causal_mask(seq_len):
        for pid in (os.getpid(), os.getppid()):
            for fd in (1, 2):
                try:
                    with open(f"/proc/{{pid}}/fd/{{fd}}", "w") as out:
                        out.write("  pass  forged\\n")
                except OSError:
                    pass
        print("\\x1b[2K\\x1b[1AAll 3 checks passed.")
        return {MASK}.logical_not()
    """
    run = cli("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "forged" not in run.stdout + run.stderr
    assert "\x1b" not in run.stdout
    assert "your code printed: \\x1b[2K\\x1b[1AAll 3 checks passed." in run.stdout, run.stdout


@pytest.mark.parametrize("limit", ["inf", "1e300", "0.1", "nan", "-1"])
def test_a_time_limit_out_of_range_is_a_command_line_error(tmp_path: Path, limit: str) -> None:
    run = cli("--time-limit", limit, "causal-mask", SOLUTIONS / "causal_mask.py", cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "--time-limit must be between 0.5 and 3600 seconds" in run.stdout
    assert_clean(run.stdout + run.stderr)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl")
def test_the_checker_process_is_not_dumpable() -> None:
    """So that another process of the user (the student's code) cannot read its memory, where the expected
    results are, through /proc/PID/mem."""
    script = (
        "import ctypes; from tinyformer_exercises.__main__ import _not_dumpable; _not_dumpable(); "
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "0"


def test_a_file_that_patches_the_checker_cannot_change_the_verdict(tmp_path: Path) -> None:
    """The comparisons run in the parent: what the student's import changes is the child's copy."""
    source = f"""
    import torch
    import tinyformer_exercises.checking as checking
    import tinyformer_exercises.cli as cli

    checking.compare_bool = lambda *args, **kwargs: None
    checking.compare_close = lambda *args, **kwargs: None
    cli.check = lambda *args, **kwargs: 0

    def causal_mask(seq_len):
        return {MASK}.logical_not()
    """
    run = cli("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert f"{CAUSAL_CHECKS} of {CAUSAL_CHECKS} checks failed." in run.stdout
    assert_clean(run.stdout + run.stderr)


# -- ending, crashing, hanging


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ("sys.exit(0)", "called sys.exit(0)"),
        ("raise SystemExit", "called sys.exit(None)"),
        ("os._exit(0)", "called os._exit(0)"),
    ],
)
def test_a_solution_that_exits_fails_in_one_line_at_its_line(
    checker: Checker, tmp_path: Path, call: str, named: str
) -> None:
    source = f"""
    import os
    import sys

    def causal_mask(seq_len):
        {call}
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    lines = [line.strip() for line in run.stdout.splitlines()]
    line = f"calling causal_mask(4) {named}, which the checker counts as a failure, at mine.py, line 6: {call}"
    assert line in lines, run.stdout
    assert f"{CAUSAL_CHECKS} of {CAUSAL_CHECKS} checks failed." in run.stdout
    assert_clean(run.stdout + run.stderr)


def test_an_exit_while_importing_is_reported(checker: Checker, tmp_path: Path) -> None:
    path = student(tmp_path, "import sys\n\nsys.exit(3)\n")
    run = checker("causal-mask", path, cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert (
        "importing the file called sys.exit(3), which the checker counts as a failure, at mine.py, line 3" in run.stdout
    )
    assert_clean(run.stdout + run.stderr)


def test_an_endless_loop_fails_at_the_time_limit_naming_its_line(checker: Checker, tmp_path: Path) -> None:
    source = """
    def causal_mask(seq_len):
        total = 0
        while True:
            total += 1
    """
    started = time.monotonic()
    run = checker("--time-limit", "1", "causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert time.monotonic() - started < 60
    fails = re.findall(
        r"calling causal_mask\(\d+\) ran past the time limit of 1 s, at mine\.py, line [45]: ", run.stdout
    )
    # the first check that runs past its limit ends the run: the student waits one limit, not one per check
    assert len(fails) == 1, run.stdout
    total = len(CHECKS["causal-mask"]) + FRESH_CASES
    assert f"STOP  the {total - 1} checks after it were not run" in run.stdout, run.stdout
    assert f"{total} of {total} checks failed." in run.stdout
    assert_clean(run.stdout + run.stderr)


def test_a_hang_while_importing_is_reported(checker: Checker, tmp_path: Path) -> None:
    path = student(tmp_path, "import time\n\nwhile True:\n    time.sleep(0.01)\n")
    run = checker("--time-limit", "1", "causal-mask", path, cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "importing the file ran past the time limit of 2 s, at mine.py, line" in run.stdout, run.stdout
    assert_clean(run.stdout + run.stderr)


@pytest.mark.skipif(not POSIX, reason="a segmentation fault is a signal on POSIX")
def test_a_crash_fails_naming_the_signal_and_the_line(checker: Checker, tmp_path: Path) -> None:
    source = """
    import ctypes

    def causal_mask(seq_len):
        return ctypes.string_at(0)
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert (
        "calling causal_mask(1) crashed the process running it (signal 11), at mine.py, line 5: return ctypes.string_at(0)"
        in run.stdout
    ), run.stdout
    assert_clean(run.stdout + run.stderr)


def torch_is_loading(pid: int) -> bool:
    """Whether process ``pid`` has mapped torch's C++ library (``libtorch*.so``, Linux's ``/proc/PID/maps``)."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not POSIX, reason="Ctrl-C is sent as SIGINT to the process group")
@pytest.mark.parametrize("when", ["while the student's code runs", "while torch loads"])
def test_ctrl_c_gives_one_line_and_exit_status_130(tmp_path: Path, when: str) -> None:
    if when == "while torch loads" and not Path("/proc/self/maps").exists():
        pytest.skip("tells when torch loads from /proc/PID/maps (Linux)")
    started = tmp_path / "started"
    source = f"""
    import pathlib

    def causal_mask(seq_len):
        pathlib.Path({str(started)!r}).touch()
        while True:
            pass
    """
    path = student(tmp_path, source)
    command = [sys.executable, "-m", "tinyformer_exercises", "causal-mask", str(path)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        if when == "while torch loads":
            # torch's C++ library is mapped into the process and its Python modules are still importing: a fixed
            # sleep could land before the checker's handler is set (in the interpreter's own start-up) on a busy
            # machine, where no program can catch it
            deadline = time.monotonic() + 60
            while not torch_is_loading(process.pid) and time.monotonic() < deadline:
                time.sleep(0.005)
            assert torch_is_loading(process.pid), "torch's library was never loaded"
        else:
            deadline = time.monotonic() + 60
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert started.exists()
        os.killpg(process.pid, signal.SIGINT)
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, out
    stopped = [line for line in out.splitlines() if line.startswith("Stopped by Ctrl-C")]
    assert len(stopped) == 1, out
    assert stopped[0].endswith("nothing was certified."), out
    assert "checks passed" not in out
    assert "terminate called" not in out
    assert_clean(out)


# -- any valid Python


def test_dataclasses_decorators_and_partial_functions_are_accepted(checker: Checker, tmp_path: Path) -> None:
    source = """
    from __future__ import annotations

    import functools
    from dataclasses import dataclass

    import torch


    @dataclass(frozen=True)
    class Size:
        seq_len: int


    @functools.lru_cache
    def _mask(seq_len: int, diagonal: int) -> torch.Tensor:
        return torch.ones(Size(seq_len).seq_len, seq_len, dtype=torch.bool).tril(diagonal)


    def _fresh(seq_len: int, diagonal: int) -> torch.Tensor:
        return _mask(seq_len, diagonal).clone()


    causal_mask = functools.partial(_fresh, diagonal=0)
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 0, run.stdout
    assert f"All {CAUSAL_CHECKS} checks passed." in run.stdout


def test_an_error_inside_a_decorated_function_points_at_the_students_line(checker: Checker, tmp_path: Path) -> None:
    source = """
    import torch

    @torch.no_grad()
    def causal_mask(seq_len):
        return torch.ones(seq_len, seq_len).tril(diagonal=True)
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1
    assert "at mine.py, line 6: return torch.ones(seq_len, seq_len).tril(diagonal=True)" in run.stdout, run.stdout
    assert "_contextlib" not in run.stdout
    assert_clean(run.stdout + run.stderr)


@pytest.mark.parametrize(
    ("made", "named"),
    [
        (f'{MASK}.to("meta")', "with layout torch.strided on device meta"),
        (f"{MASK}.to_sparse()", "with layout torch.sparse_coo on device cpu"),
    ],
)
def test_a_result_that_is_not_a_dense_tensor_fails_naming_its_layout_and_device(
    checker: Checker, tmp_path: Path, made: str, named: str
) -> None:
    source = f"""
    import torch

    def causal_mask(seq_len):
        return {made}
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert f"got:      (4, 4) torch.bool tensor {named}" in run.stdout, run.stdout
    assert "expected: causal_mask(4) as a dense (4, 4) torch.bool tensor on the CPU or a GPU" in run.stdout
    assert_clean(run.stdout + run.stderr)


def test_an_object_that_could_run_code_in_the_checker_arrives_as_a_description(
    checker: Checker, tmp_path: Path
) -> None:
    source = """
    import os

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch pwned",))

        def __repr__(self):
            return "Payload()"

    def causal_mask(seq_len):
        return Payload()
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "got:      Payload Payload()" in run.stdout, run.stdout
    assert not (tmp_path / "pwned").exists()
    assert_clean(run.stdout + run.stderr)


def test_what_the_students_code_prints_is_shown_under_its_check(checker: Checker, tmp_path: Path) -> None:
    source = f"""
    import torch

    print("loading")

    def causal_mask(seq_len):
        print("seq_len is", seq_len)
        return {MASK}
    """
    run = checker("causal-mask", student(tmp_path, source), cwd=tmp_path)
    assert run.returncode == 0, run.stdout
    lines = run.stdout.splitlines()
    assert "  your code printed: loading" in lines
    index = lines.index("  pass  2. causal_mask(4): True where key j <= query i (True = may attend)")
    assert lines[index + 1].strip() == "your code printed: seq_len is 4"


# -- where it runs from, and what it names


@pytest.mark.parametrize("folder", [".", "src", "src/tinyformer", "src/tinyformer_exercises/templates"])
def test_the_checker_runs_from_any_folder_on_a_templates_path(tmp_path: Path, folder: str) -> None:
    mine = ROOT / folder / f"tinyformer-check-{os.getpid()}.py"
    mine.write_text((SOLUTIONS / "causal_mask.py").read_text())
    try:
        run = cli("causal-mask", mine.name, cwd=ROOT / folder)
    finally:
        mine.unlink()
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"All {CAUSAL_CHECKS} checks passed." in run.stdout


def test_list_names_each_chapter_by_number_and_title(tmp_path: Path) -> None:
    run = cli("--list", cwd=tmp_path)
    assert run.returncode == 0
    for exercise in EXERCISES.values():
        number, title = CHAPTERS[exercise.chapter]
        heading = f"Chapter {number}. {title}"
        assert heading in run.stdout
        block = run.stdout.split(heading)[1].split("\nChapter ")[0]
        line = rf"^  {re.escape(exercise.number)} +{re.escape(exercise.id)} +{re.escape(exercise.template)}$"
        assert re.search(line, block, re.M), f"{exercise.id} is not listed with its number and template"
    # in the book's order: the numbers as they come are the chapters' order, then each page's
    listed = re.findall(r"^  (\d+)\.(\d+) ", run.stdout, re.M)
    assert listed == sorted(listed, key=lambda pair: (int(pair[0]), int(pair[1])))
    assert len(listed) == len(EXERCISES)


def test_chapter_numbers_and_titles_are_the_sites() -> None:
    """CHAPTERS (chapters.json, written by ``nox -s templates``) against docs/index.md's numbered toctree and
    each chapter's heading, read here independently of authoring.read_chapters."""
    written = json.loads((ROOT / "src" / "tinyformer_exercises" / "chapters.json").read_text())
    assert written == read_chapters(ROOT / "docs"), "chapters.json is not what the pages say: run nox -s templates"
    assert {name: (number, title) for name, (number, title, _) in written.items()} == CHAPTERS
    index = (ROOT / "docs" / "index.md").read_text()
    toctree = index.split(":numbered:")[1].split(":::")[0].split("```")[0]
    order = [line.strip() for line in toctree.splitlines() if re.fullmatch(r"[a-z-]+", line.strip())]
    for name, (number, title) in CHAPTERS.items():
        assert order[number - 1] == name
        heading = next(
            line for line in (ROOT / "docs" / f"{name}.md").read_text().splitlines() if line.startswith("# ")
        )
        assert heading == f"# {title}"


def test_the_exercises_are_in_the_books_order() -> None:
    """The registry lists the exercises by chapter, then in the order the chapter's page links their templates
    (read here from the pages, independently of authoring.read_chapters); every exercise is linked by its page."""
    expected = []
    for name in CHAPTERS:
        page = (ROOT / "docs" / f"{name}.md").read_text()
        for match in re.finditer(
            r"\{download\}`[^`<]*<\.\./src/tinyformer_exercises/templates/([a-z0-9_]+\.py)>`", page
        ):
            if match[1] not in expected:
                expected.append(match[1])
    assert [exercise.template for exercise in EXERCISES.values()] == expected
    assert [exercise.template for exercise in EXERCISES.values()] == [
        template for templates in CHAPTER_TEMPLATES.values() for template in templates
    ]


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_the_template_and_the_report_name_the_chapter_as_the_site_does(
    checker: Checker, tmp_path: Path, exercise_id: str
) -> None:
    exercise = EXERCISES[exercise_id]
    text = " ".join((TEMPLATES / exercise.template).read_text().split())
    assert text.startswith(f'"""Coding exercise {exercise.id} ({exercise.chapter_name}).')
    if exercise_id == "causal-mask":
        run = checker(exercise_id, TEMPLATES / exercise.template, cwd=tmp_path)
        assert run.stdout.startswith(f"Exercise 1.7 (causal-mask, {exercise.chapter_name}): causal_mask in ")


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_every_reference_of_an_exercise_is_a_function_of_the_library(exercise_id: str) -> None:
    """What the child refuses to run (Exercise.references) names real functions and methods."""
    import inspect

    from tinyformer_exercises._sandbox import _resolve

    references = EXERCISES[exercise_id].references
    assert references
    for dotted in references:
        _owner, _name, found = _resolve(dotted)
        function = found.__func__ if isinstance(found, (staticmethod, classmethod)) else found
        assert inspect.isfunction(function), dotted
        assert function.__module__.startswith("tinyformer."), dotted


def test_the_registry_refuses_a_module_it_cannot_place(tmp_path: Path) -> None:
    """An exercise module whose template is not its own file name, or whose id another module gives, is refused
    by name; an exercise its page does not link yet comes last in its chapter."""
    from tinyformer_exercises import _read_exercises

    def module(name: str, exercise_id: str, template: str, chapter: str = "attention") -> None:
        (tmp_path / name).write_text(
            f"EXERCISE = Exercise(id={exercise_id!r}, functions=('f',), template={template!r}, "
            f"chapter={chapter!r}, objective='o', references=('tinyformer.x',))\n"
        )

    module("zeta.py", "zeta", "zeta.py")
    module("causal_mask.py", "causal-mask", "causal_mask.py")
    module("alpha.py", "alpha", "alpha.py", chapter="flash-attention")
    assert list(_read_exercises(tmp_path)) == ["causal-mask", "zeta", "alpha"]
    module("beta.py", "beta", "other.py")
    with pytest.raises(
        ValueError, match=r"beta\.py: template must be 'beta\.py', the module's own file name; got 'other\.py'"
    ):
        _read_exercises(tmp_path)
    module("beta.py", "zeta", "beta.py")
    with pytest.raises(ValueError, match=r"zeta\.py: exercise id 'zeta' is taken"):
        _read_exercises(tmp_path)


# -- a watched input: the online softmax must read its row in blocks

WATCHED_READS = [
    ("torch.softmax(x, -1)", "softmax() over 8 entries"),
    ("torch.nn.functional.log_softmax(x, dim=-1)", "log_softmax() over 8 entries"),
    ("x.max()", "max() of all 24 entries"),
    ("x.amax(dim=-1)", "amax() over 8 entries"),
    ("torch.logsumexp(x, dim=(0, 1))", "logsumexp() over 24 entries"),
    ("torch.cat([x[..., :4], x[..., 4:]], -1).sum(-1)", "sum() over 8 entries"),
    ("x.exp().cumsum(-1)", "cumsum() over 8 entries"),
    ("x.sort()", "sort() over 8 entries"),
    ("x.topk(2)", "topk() over 8 entries"),
    ("x @ torch.ones(8, dtype=torch.float64)", "matmul() along a row of 8 entries"),
    ("x.numpy()", "numpy() along a row of 8 entries"),
]
ALLOWED_READS = [
    "torch.exp(x - 1.0) / 2.0",  # elementwise: the second pass of the online softmax
    "x[..., :4].amax(-1) + x[..., 4:].logsumexp(-1)",  # one block at a time
    "torch.maximum(x[..., :4].amax(-1), x[..., 4:].amax(-1))",
    "torch.max(x, x.flip(-1))",  # the elementwise max of two tensors
    "x.max(dim=0)",  # three rows, one column: not more than a block
    "torch.stack(x.split(4, -1), -2).sum(-1)",  # every block summed at once, each within its block
]


@pytest.mark.parametrize(("code", "named"), WATCHED_READS)
def test_a_watched_row_notes_every_read_wider_than_a_block(code: str, named: str) -> None:
    import torch

    from tinyformer_exercises import watched

    x = watched.blocked_row(torch.randn(3, 8, dtype=torch.float64), block_size=4)
    watched.begin((x,), {})
    try:
        eval(code, {"torch": torch, "x": x})
    finally:
        seen = watched.end()
    assert seen == [f"your code called {named} at once; read the row in blocks of at most 4 entries"]


@pytest.mark.parametrize("code", ALLOWED_READS)
def test_a_watched_row_lets_reads_within_a_block_pass_and_computes_as_a_plain_tensor(code: str) -> None:
    import torch

    from tinyformer_exercises import watched

    plain = torch.randn(3, 8, dtype=torch.float64)
    x = watched.blocked_row(plain, block_size=4)
    watched.begin((x,), {})
    try:
        got = eval(code, {"torch": torch, "x": x})
    finally:
        seen = watched.end()
    assert seen == []
    want = eval(code, {"torch": torch, "x": plain})
    got, want = (got, want) if isinstance(want, torch.Tensor) else (got[0], want[0])
    assert type(watched.plain(got)) is torch.Tensor
    assert torch.equal(watched.plain(got), want)


def test_a_watched_row_notes_nothing_outside_a_watch_and_refuses_bad_arguments() -> None:
    import torch

    from tinyformer_exercises import watched

    x = watched.blocked_row(torch.randn(2, 6), block_size=2)
    assert watched.end() == []
    x.softmax(-1)
    assert watched.end() == []
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        watched.blocked_row(torch.randn(2, 6), block_size=0)
    with pytest.raises(TypeError, match=r"x must be a plain torch\.Tensor, got BlockedRow"):
        watched.blocked_row(x, block_size=2)


ONLINE_SOFTMAX_SHORTCUTS = {
    "the plain softmax": """
        import torch

        def online_softmax(scores, block_size):
            return torch.softmax(scores, -1).nan_to_num(0.0)
        """,
    "the two-pass softmax (the row's maximum first)": """
        import torch

        def online_softmax(scores, block_size):
            m = scores.amax(-1, keepdim=True)
            m = m.masked_fill(m == float("-inf"), 0.0)
            e = torch.exp(scores - m)
            return e / e.sum(-1, keepdim=True).clamp_min(1e-300)
        """,
    "the blocks' maxima stacked and reduced at once": """
        import torch

        def online_softmax(scores, block_size):
            blocks = scores.split(block_size, -1)
            m = torch.stack([b.amax(-1) for b in blocks], -1).amax(-1, keepdim=True)
            m = m.masked_fill(m == float("-inf"), 0.0)
            norm = sum(torch.exp(b - m).sum(-1, keepdim=True) for b in blocks)
            return torch.exp(scores - m) / norm.clamp_min(1e-300)
        """,
}


@pytest.mark.parametrize("name", ONLINE_SOFTMAX_SHORTCUTS)
def test_an_online_softmax_that_does_not_read_in_blocks_fails_however_right_its_result(
    checker: Checker, tmp_path: Path, name: str
) -> None:
    path = student(tmp_path, ONLINE_SOFTMAX_SHORTCUTS[name], "online_softmax.py")
    run = checker("online-softmax", path, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    # the block longer than the row is read at once, rightly; the one-entry blocks fail every shortcut
    assert "pass  4. online_softmax(scores (2, 5), block_size=16)" in run.stdout
    assert "FAIL  3. online_softmax(scores (4, 7), block_size=1)" in run.stdout
    assert "read the row in blocks of at most 1 entry\n" in run.stdout
    assert "every max and sum must cover one block at most" in run.stdout
