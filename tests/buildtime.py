"""How long the book takes to build: clean, unchanged, and after editing one chapter (``nox -s buildtime``).

Works in a temporary copy of the project (``src/``, ``conf/``, ``docs/``, ``pyproject.toml``, ``CITATION.cff``), whose
chapters import the copy's library, and builds it as ``nox -s docs`` does, with the execution cache in
the copy's ``build/``:

1. clean: no cache, no doctrees; every chapter executes;
2. no change: the same command again; nothing executes;
3. one chapter edited (a code cell appended to the first chapter); that chapter alone executes.

Which chapters executed is read from the jupyter-cache records each build added. Writes
``build/buildtime.json`` and exits non-zero if a step executed the wrong chapters or missed the
targets (clean at most 360 s, the book's budget, no-change rebuild at most 15 s, on a 2-core machine).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from booktools import copy_project
from jupyter_cache import get_cache

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"clean": 360.0, "no-change": 15.0}
EDIT = "\n```{code-cell} ipython3\n# a cell appended by nox -s buildtime\n```\n"


def chapters(docs: Path) -> list[str]:
    """The notebooks with code to execute."""
    notebooks = (p for p in docs.glob("*.md") if p.read_text().startswith("---\njupytext:"))
    return sorted(p.stem for p in notebooks if "```{code-cell}" in p.read_text())


def cache_records(project: Path) -> dict[int, tuple[str, float]]:
    """Primary key -> (chapter, execution seconds) of every notebook in the copy's execution cache."""
    records = {}
    for folder in (project / "build" / ".jupyter_cache").glob("*"):
        for record in get_cache(folder).list_cache_records():
            records[record.pk] = (Path(record.uri).stem, record.data.get("execution_seconds", 0.0))
    return records


def build(project: Path, extra: list[str]) -> tuple[float, dict[str, float]]:
    """Build the copy; return the wall-clock seconds and the chapters executed with their seconds."""
    before = cache_records(project)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", "conf", "-d", "build/doctrees", "docs"]
    command += ["build/html", "-W", "--keep-going", "-n", "-q", *extra]
    env = os.environ | {"PYTHONPATH": str(project / "src")}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if result.returncode:
        sys.exit(f"the build failed:\n{result.stdout}\n{result.stderr}")
    after = cache_records(project)
    return seconds, {name: round(run, 2) for pk, (name, run) in sorted(after.items()) if pk not in before}


def main() -> int:
    extra = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="tinyformer-buildtime-") as folder:
        project = copy_project(Path(folder))
        names = chapters(project / "docs")
        edited = names[0]

        steps = {}
        steps["clean"] = build(project, extra)
        steps["no-change"] = build(project, extra)
        with (project / "docs" / f"{edited}.md").open("a") as chapter:
            chapter.write(EDIT)
        steps["one-chapter"] = build(project, extra)

    expected = {"clean": names, "no-change": [], "one-chapter": [edited]}
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "sphinx_extra_args": extra,
        "edited_chapter": edited,
        "targets_s": TARGETS,
        "steps": {
            step: {"seconds": round(seconds, 1), "executed": executed} for step, (seconds, executed) in steps.items()
        },
    }
    out = ROOT / "build" / "buildtime.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    failures = []
    print(f"{'step':<12} {'seconds':>8}  executed chapters (execution seconds)")
    for step, (seconds, executed) in steps.items():
        print(f"{step:<12} {seconds:8.1f}  {executed or '-'}")
        if sorted(executed) != sorted(expected[step]):
            failures.append(f"{step}: executed {sorted(executed)}, expected {expected[step]}")
        if step in TARGETS and seconds > TARGETS[step]:
            failures.append(f"{step}: {seconds:.1f} s, target {TARGETS[step]:.0f} s")
    print(f"{os.cpu_count()} CPUs; report in {out}")
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
