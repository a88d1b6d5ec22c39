"""``nox -s new-chapter`` (tests/scaffold.py): in a copy of the project, the chapter it writes builds in a small
book of its own, its exercise is listed and checked (the solution passes, the template fails by name), and
the project's own tests of chapters, exercises, the course plan and the package layout pass with it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from booktools import copy_project
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("tinyformer_scaffold", ROOT / "tests" / "scaffold.py")
scaffold = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scaffold)

TITLE = "A probe chapter"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project with the chapter ``probe`` added by the scaffold."""
    root = copy_project(tmp_path_factory.mktemp("project"))
    written = scaffold.new_chapter(root, "probe", TITLE)
    assert {p.relative_to(root).as_posix() for p in written} == {
        path.format(slug="probe", module="probe") for path in scaffold.WRITTEN
    }
    return root


def in_copy(project: Path) -> dict[str, str]:
    """The environment that imports the copy's library and checker (the installed ones lack the new module)."""
    return os.environ | {"PYTHONPATH": str(project / "src")}


def test_the_chapter_is_in_the_table_of_contents_and_its_number_and_title_in_the_package(project):
    index = (project / "docs" / "index.md").read_text()
    chapters = index.split(":caption: Chapters\n")[1].split("```")[0].split()
    before = (ROOT / "docs" / "index.md").read_text().split(":caption: Chapters\n")[1].split("```")[0].split()
    assert chapters == [*before, "probe"]  # the new chapter comes last, after every chapter of the book
    data = json.loads((project / "src" / "tinyformer_exercises" / "chapters.json").read_text())
    number, title, templates = data["probe"]
    assert (number, title, list(templates)) == (len(data), TITLE, ["probe_scores.py"])
    assert re.fullmatch(rf"{len(data)}\.\d+", templates["probe_scores.py"])  # the exercise's number on the page
    assert (project / "docs" / "probe.md").read_text().count(f"# {TITLE}\n") == 1


def test_the_checker_lists_the_exercise_and_checks_it(project):
    env = in_copy(project)
    run = [sys.executable, "-m", "tinyformer_exercises"]
    listed = subprocess.run([*run, "--list"], capture_output=True, text=True, env=env, check=False)
    assert listed.returncode == 0, listed.stderr
    number = json.loads((project / "src" / "tinyformer_exercises" / "chapters.json").read_text())["probe"][0]
    assert f"Chapter {number}. {TITLE}" in listed.stdout
    assert "probe-scores" in listed.stdout.split(f"Chapter {number}. {TITLE}")[1]
    solution = project / "tests" / "exercise_solutions" / "probe_scores.py"
    passed = subprocess.run([*run, "probe-scores", solution], capture_output=True, text=True, env=env, check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "All 6 checks passed." in passed.stdout  # 3 printed cases and 3 drawn anew
    template = project / "src" / "tinyformer_exercises" / "templates" / "probe_scores.py"
    assert template.read_text().startswith(f'"""Coding exercise probe-scores (chapter {number}, "{TITLE}").')
    failed = subprocess.run([*run, "probe-scores", template], capture_output=True, text=True, env=env, check=False)
    assert failed.returncode == 1
    assert "NOT DONE  probe_scores still raises NotImplementedError." in failed.stdout


def test_the_projects_tests_pass_with_the_new_chapter(project):
    """The chapter's own tests, and those that read every chapter, exercise and module from the sources
    (objectives assessed, opening question, course plan, listings, templates, wrong solutions, layout)."""
    tests = project / "tests"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not book"]
    runs = [
        [
            tests / "test_probe.py",
            tests / "test_course.py",
            tests / "test_assignable.py",
            tests / "test_layout.py",
            f"{tests / 'test_checker_sandbox.py'}::test_chapter_numbers_and_titles_are_the_sites",
        ],
        # every exercise's tests, for the new one (and the registry-wide ones)
        [tests / "test_exercises.py", "-k", "probe or templates_folder or two_wrong_solutions"],
    ]
    for selected in runs:
        done = subprocess.run(
            [*command, *map(str, selected)],
            capture_output=True,
            text=True,
            env=in_copy(project),
            cwd=project,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert " passed" in done.stdout, done.stdout[-2000:]
        assert " failed" not in done.stdout, done.stdout[-2000:]


@pytest.mark.book
def test_a_book_of_the_new_chapter_alone_builds(project, sphinx, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(
        "# A probe book\n\n```{toctree}\n:caption: Chapters\n:numbered:\n\nprobe\n```\n\n```{bibliography}\n```\n"
    )
    (docs / "probe.md").write_text((project / "docs" / "probe.md").read_text())
    # The templates the page links are the copy's, found from docs/ as in the book.
    (tmp_path / "src").symlink_to(project / "src", target_is_directory=True)
    (tmp_path / "tests").symlink_to(project / "tests", target_is_directory=True)
    result = sphinx(
        docs,
        tmp_path / "out",
        "-D",
        f"nb_execution_cache_path={tmp_path / 'cache'}",
        conf=project / "conf",
        env={"PYTHONPATH": str(project / "src")},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not result.stderr, result.stderr
    page = BeautifulSoup((tmp_path / "out" / "html" / "probe.html").read_text(), "html.parser").get_text()
    assert TITLE in page
    glued = json.loads((tmp_path / "out" / "jupyter_execute" / "probe.glue.json").read_text())
    shown = f"{float(glued['probe_score_std']['data']['text/plain']):.3f}"
    assert shown in page
    assert "probe_scores.py" in page
    assert "nox -s check -- probe-scores" in page
