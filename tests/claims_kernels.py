"""Do the chapters' claims hold with other processors' kernels? (``nox -s kernels``)

The small models that the chapters train are sensitive to rounding: the same seeds trained with kernels
that round differently reach accuracies that differ by about the spread of the seeds. A claim checked
only on the machine that wrote it can fail on a reader's (chapter 7 did not build on an AMD EPYC whose
kernels differ from the machine its claims were checked on). This script executes each chapter as the
build does (its kernel configuration: one thread, deterministic algorithms, the book's seed), once per
set of kernels, with PyTorch and oneDNN told to use an older instruction set than the processor has
(``ATEN_CPU_CAPABILITY``, ``DNNL_MAX_CPU_ISA``; MKL's ``MKL_ENABLE_INSTRUCTIONS``), which changes how
the matrix products and reductions round. Every ``assert`` of a chapter is made soft, so that a run
reports all the claims that failed, not only the first.

    python tests/claims_kernels.py                      # every chapter with training, kernels avx2 and sse
    python tests/claims_kernels.py long-context --kernels native,avx2

Exits 1 if any claim failed with any set of kernels; writes ``build/claims_kernels.json``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONF = ROOT / "conf"
# The chapters whose claims are about trained models.
TRAINED = ["transformer", "beyond-sinusoids", "decoder", "long-context", "induction-heads"]
# Environment variables that make PyTorch (ATen's vectorised kernels), oneDNN and MKL use an older
# instruction set; "native" leaves the processor's own.
KERNELS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "sse": {"ATEN_CPU_CAPABILITY": "default", "DNNL_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
MARK = "CLAIM FAILED"
SOFT = f'''def _claim(ok, where, text):
    """A chapter's assert, made soft by tests/claims_kernels.py."""
    if not ok:
        print("{MARK}", where, text, flush=True)
'''


class _Soften(ast.NodeTransformer):
    """``assert test, message`` becomes ``_claim(test, "cell N, line M", "test")``."""

    def __init__(self, cell: int) -> None:
        self.cell = cell

    def visit_Assert(self, node: ast.Assert) -> ast.Expr:
        where = f"cell {self.cell}, line {node.lineno}:"
        call = ast.Call(
            ast.Name("_claim", ast.Load()),
            [node.test, ast.Constant(where), ast.Constant(ast.unparse(node.test))],
            [],
        )
        return ast.copy_location(ast.Expr(call), node)


def soften(source: str, cell: int) -> str:
    """The cell's source with its asserts soft; a cell that is not plain Python (a magic) is kept."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    if not any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
        return source
    return ast.unparse(ast.fix_missing_locations(_Soften(cell).visit(tree)))


def run_chapter(chapter: str) -> None:
    """Executed in a child process whose environment names the kernels: run one chapter, print its claims."""
    import nbformat
    from myst_nb.core.read import read_myst_markdown_notebook
    from nbclient import NotebookClient

    notebook = read_myst_markdown_notebook((DOCS / f"{chapter}.md").read_text())
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for index, cell in enumerate(code):
        cell.source = soften(cell.source, index)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(SOFT))
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(DOCS)}}).execute()
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                for line in output["text"].splitlines():
                    if line.startswith(MARK):
                        print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", default=TRAINED, help=f"chapters (default: {' '.join(TRAINED)})")
    parser.add_argument("--kernels", default="avx2,sse", help=f"comma-separated, of {', '.join(KERNELS)}")
    parser.add_argument("--run-chapter", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_chapter:
        run_chapter(args.run_chapter)
        return 0
    kernels = args.kernels.split(",")
    for name in kernels:
        if name not in KERNELS:
            parser.error(f"--kernels: {name!r} is not one of {list(KERNELS)}")
    for chapter in args.chapters:
        if not (DOCS / f"{chapter}.md").is_file():
            parser.error(f"no chapter {chapter!r} in docs/")
    results = []
    with tempfile.TemporaryDirectory() as ipython:
        # The build's kernel configuration (conf.py copies it the same way).
        (Path(ipython) / "profile_default").mkdir()
        shutil.copyfile(
            CONF / "ipython_kernel_config.py", Path(ipython) / "profile_default" / "ipython_kernel_config.py"
        )
        base = {
            **os.environ,
            "IPYTHONDIR": ipython,
            "TINYFORMER_SEED": "0",
            "TINYFORMER_CONF": str(CONF),
            "MATPLOTLIBRC": str(CONF / "matplotlibrc"),
            "MPLBACKEND": "agg",
            "PYTHONHASHSEED": "0",
        }
        for chapter in args.chapters:
            for name in kernels:
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, __file__, "--run-chapter", chapter],
                    env={**base, **KERNELS[name]},
                    capture_output=True,
                    text=True,
                    check=False,
                )
                failed = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
                error = "" if done.returncode == 0 else done.stderr.strip().splitlines()[-1:]
                seconds = time.perf_counter() - start
                results.append(
                    {
                        "chapter": chapter,
                        "kernels": name,
                        "failed": failed,
                        "error": error,
                        "seconds": round(seconds, 1),
                    }
                )
                verdict = "error: " + " ".join(error) if error else f"{len(failed)} claims failed"
                print(f"{chapter:18} {name:7} {seconds:6.1f} s  {verdict}", flush=True)
                for line in failed:
                    print("    " + line[len(MARK) :].strip(), flush=True)
    out = ROOT / "build" / "claims_kernels.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any(r["failed"] or r["error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
