"""Templates made from reference solutions: one file per exercise, the
reference solution with its answer between solution markers, as
otter-grader marks them::

    def causal_mask(seq_len: int) -> Tensor:
        \"\"\"...\"\"\"
        # BEGIN SOLUTION
        return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
        # END SOLUTION

:func:`template_from_solution` gives the student's template: a marked
block inside a function becomes ``raise NotImplementedError`` (at the
block's indentation), and a marked block at the top level (an import or a
helper only the answer needs) goes. The reference solutions live in the
repository's ``tests/exercise_solutions/`` (the book shows them, folded);
the templates in ``templates/`` are written from them by ``nox -s
templates``, and a test fails when one is not what its solution gives.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["BEGIN", "END", "template_from_solution", "write_templates"]

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
_MARKER = re.compile(
    r"^(?P<indent>[ ]*)# (?P<kind>BEGIN|END) SOLUTION[ ]*$"
)


def template_from_solution(text: str, *, name: str = "<solution>") -> str:
    """The template of the reference solution ``text``.

    Raises:
        ValueError: naming ``name`` and the line, for a marker without its
            pair, nested markers, an ``END`` at another indentation than
            its ``BEGIN``, or a file with no marked block at all.
    """
    out: list[str] = []
    opened: tuple[int, str] | None = None  # (line number, indentation)
    blocks = 0
    gaps: list[int] = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        marker = _MARKER.match(line.rstrip("\n"))
        if marker is None:
            if opened is None:
                out.append(line)
            continue
        indent = marker["indent"]
        if marker["kind"] == "BEGIN":
            if opened is not None:
                raise ValueError(
                    f"{name}:{number}: {BEGIN} inside the block opened at line {opened[0]}"
                )
            opened = (number, indent)
            continue
        if opened is None:
            raise ValueError(f"{name}:{number}: {END} without a {BEGIN}")
        if indent != opened[1]:
            raise ValueError(
                f"{name}:{number}: {END} is not indented as its {BEGIN} (line {opened[0]})"
            )
        if indent:  # inside a function: the student writes it
            out.append(f"{indent}raise NotImplementedError\n")
        else:
            gaps.append(len(out))  # where a top-level block was
        opened = None
        blocks += 1
    if opened is not None:
        raise ValueError(f"{name}:{opened[0]}: {BEGIN} is never closed")
    if blocks == 0:
        raise ValueError(
            f"{name}: no {BEGIN} ... {END} block: nothing for a student to write"
        )
    for at in reversed(gaps):  # two blank lines where the block stood
        start, stop = at, at
        while start > 0 and not out[start - 1].strip():
            start -= 1
        while stop < len(out) and not out[stop].strip():
            stop += 1
        if stop - start > 2:
            out[start:stop] = ["\n", "\n"]
    return "".join(out)


def write_templates(
    solutions: Path, templates: Path, names: list[str]
) -> list[str]:
    """Write ``templates/NAME`` from ``solutions/NAME`` for each file name;
    the names whose template changed."""
    changed = []
    for file_name in names:
        made = template_from_solution(
            (solutions / file_name).read_text(), name=file_name
        )
        target = templates / file_name
        if not target.exists() or target.read_text() != made:
            target.write_text(made)
            changed.append(file_name)
    return changed
