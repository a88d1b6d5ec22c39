"""``nox -s new-chapter -- SLUG "Title"``: write a new chapter that builds and passes the tests as it stands.

What it writes, for ``SLUG`` (the page's document name, lower case with dashes) and ``MODULE`` (the slug
with underscores), is listed in :data:`WRITTEN` and on the book's page "Contributing a chapter"
(docs/contributing.md): the page ``docs/SLUG.md`` (front matter, learning objectives, opening question,
one section whose code cell calls the library, one glued number checked in a hidden cell, a recap, a
question with its solution and one checked coding exercise); the module ``tinyformer.labs.MODULE`` with
the function the page calls; the exercise ``MODULE-scores`` in one module of the checker
(``tinyformer_exercises/exercises/MODULE_scores.py``: metadata, checks, two wrong solutions) with its
reference solution (``tests/exercise_solutions/MODULE_scores.py``) and the template written from it;
the tests ``tests/test_MODULE.py``; the chapter's entry at the end of the table of contents
(``docs/index.md``) and in ``chapters.json``; the package docstring's entry for the module; and a session
for the chapter at the end of the lecturers' plan (``docs/lecturers.md``).

Standard library only (nox's own Python runs it). Run it from the project's root, or give ``--root``.
Refuses, changing nothing, a slug that is not lower case with dashes, or one whose page, module or
exercise exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import keyword
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLUG = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")

#: What the scaffold writes or edits, relative to the project's root ({slug}, {module} filled in).
WRITTEN = (
    "docs/{slug}.md",
    "src/tinyformer/labs/{module}.py",
    "src/tinyformer_exercises/exercises/{module}_scores.py",
    "tests/exercise_solutions/{module}_scores.py",
    "src/tinyformer_exercises/templates/{module}_scores.py",
    "tests/test_{module}.py",
    "docs/index.md",
    "src/tinyformer_exercises/chapters.json",
    "src/tinyformer/__init__.py",
    "docs/lecturers.md",
)

PAGE = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
notebook_minutes: 1
---

(chap-{slug})=
# {title}

This page was written by `nox -s new-chapter`: it builds, and passes the book's tests, as it stands.
Its one computation is the score of attention, a query's dot product with every key divided by the
square root of their width, from the library's `tinyformer.labs.{module}`. Replace this paragraph by
the chapter's opening: the question it asks, what it builds and what it measures.

:::{{admonition}} Learning objectives
:class: tip

After this chapter you can

1. compute the scaled dot-product scores of a block of queries against a block of keys, and say why
   they are divided by the square root of the width.
:::

:::{{admonition}} Opening question
:class: opening-question

Two vectors of width 64 have a dot product of 8: is that a large score, and what would make a score
mean the same at every width?
:::

Every number on this page is computed while the book is built, from the `tinyformer` library in
`src/tinyformer`. The first cell imports what the chapter uses.

```{{code-cell}} ipython3
import torch

from tinyformer.labs.{module} import {function}

SEED = 0
torch.manual_seed(SEED)
torch.set_printoptions(precision=4, sci_mode=False)
```

```{{code-cell}} ipython3
:tags: [remove-cell]

from myst_nb import glue
```

({section})=
## Scores of queries against keys

The dot product of two vectors with independent entries of variance 1 has variance equal to their
width, so at width 64 a score of 8 is one standard deviation. Dividing by the square root of the width
gives scores of variance 1 at every width:

```{{code-cell}} ipython3
query = torch.randn(256, 64, dtype=torch.float64)
key = torch.randn(256, 64, dtype=torch.float64)
scores = {function}(query, key)
scores.shape, scores.std()
```

```{{code-cell}} ipython3
:tags: [remove-cell]

score_std = scores.std().item()
assert abs(score_std - 1) < 0.05  # the text: "variance 1 at every width"
glue("{module}_score_std", score_std, display=False)
glue("{module}_num_scores", scores.numel(), display=False)
```

Over the {{glue:text}}`{module}_num_scores` scores the standard deviation is
{{glue:text}}`{module}_score_std:.3f`.

({recap})=
## Recap

1. A query's scores are its dot products with the keys divided by $\\sqrt{{d}}$, which gives them
   variance 1 whatever the width $d$.

({exercises})=
## Check your understanding

:::{{exercise}}
:label: ex-{slug}-understand

**Understand.** Without the division, how would the standard deviation of the scores change when the
width grows from 64 to 256, and what would that do to a softmax over them?

*Objectives assessed: 1.*
:::

:::{{solution}} ex-{slug}-understand
:class: dropdown

It would double, from 8 to 16 (the square root of the width), and the softmax of larger scores is
closer to one-hot: the weights would concentrate on fewer keys, and their gradients would shrink.
:::

({coding})=
## Coding exercises

Download the template, fill in the body, and check it as the box below shows; the check runs offline
and needs no built book. `python3 -m tinyformer_exercises --list` lists every exercise.

{{{{ checking }}}}

:::{{exercise}} Scaled scores
:label: ex-code-{slug}-scores

Write `{function}(query, key)`, the scores of queries `(..., L, D)` against keys `(..., S, D)`,
`(..., L, S)`, divided by the square root of `D`. Objective: {objective}. When it passes, measure the
standard deviation of the scores of random queries and keys at widths 16, 64 and 256, with and without
the division.

Template: {{download}}`{module}_scores.py <../src/tinyformer_exercises/templates/{module}_scores.py>`. Check it from its folder
with the first line (in a clone of the repository, the second):

```console
$ python3 -m tinyformer_exercises {exercise_id} {module}_scores.py
$ nox -s check -- {exercise_id} path/to/{module}_scores.py
```

*Objectives assessed: 1.*
:::

:::{{solution}} ex-code-{slug}-scores
:class: dropdown

The reference solution (the checker's own tests run it):

```{{listing}} ../tests/exercise_solutions/{module}_scores.py
:pyobject: {function}
```
:::
"""

MODULE = '''\
"""The computations of the chapter "{title}" (``docs/{slug}.md``).

Written by ``nox -s new-chapter``; replace :func:`{function}` with what the chapter builds.
"""

from __future__ import annotations

import math

from torch import Tensor

__all__ = ["{function}"]


def {function}(query: Tensor, key: Tensor) -> Tensor:
    """The scaled dot-product scores of ``query`` against ``key``.

    Args:
        query: ``(..., L, D)``.
        key: ``(..., S, D)``, the same width ``D``; leading dimensions broadcast.

    Returns:
        ``(..., L, S)``: ``query @ key^T / sqrt(D)`` (Vaswani et al., 2017, Eq. 1, before the softmax).

    Raises:
        TypeError: if ``query`` or ``key`` is not a tensor.
        ValueError: naming both widths, if they differ.
    """
    for name, value in (("query", query), ("key", key)):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{{name}} must be a tensor, got {{type(value).__name__}}"
            )
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query and key must have the same width, got {{query.size(-1)}} and {{key.size(-1)}}"
        )
    return query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
'''

EXERCISE_MODULE = '''\
"""Coding exercise {exercise_id} (the chapter ``{slug}``): its metadata, checks and wrong solutions.

Written by ``nox -s new-chapter``; the reference solution is ``tests/exercise_solutions/{module}_scores.py``.
"""

from __future__ import annotations

from tinyformer.labs.{module} import {function} as reference
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    call,
    compare_close,
    reseedable,
    seeded_randn,
)

EXERCISE = Exercise(
    id="{exercise_id}",
    functions=("{function}",),
    template="{module}_scores.py",
    chapter="{slug}",
    objective="{objective}",
    references=("tinyformer.labs.{module}.{function}",),
)


@reseedable  # each run also checks three of these cases on inputs of fresh seeds
def _scores(
    title: str,
    query_shape: tuple[int, ...],
    key_shape: tuple[int, ...],
    seed: int,
) -> Check:
    def run(functions) -> None:
        query = seeded_randn(*query_shape, seed=seed)
        key = seeded_randn(*key_shape, seed=seed + 1)
        text = f"{function}(query {{tuple(query.shape)}}, key {{tuple(key.shape)}})"
        got = call(functions["{function}"], text, query, key)
        compare_close(text, got, reference(query, key), **FLOAT64_TOLERANCE)

    return Check(title, run)


CHECKS = [
    _scores("4 queries and 4 keys of width 8", (4, 8), (4, 8), seed=1),
    _scores("L != S: 3 queries, 5 keys of width 6", (3, 6), (5, 6), seed=2),
    _scores(
        "a batch of 2 with 2 heads, odd width 5",
        (2, 2, 4, 5),
        (2, 2, 3, 5),
        seed=3,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "divided by the width instead of its square root",
        [("math.sqrt(query.size(-1))", "query.size(-1)")],
        [
            "FAIL  1. 4 queries and 4 keys of width 8",
            "first differing entry",
        ],
    ),
    (
        "not divided at all",
        [(" / math.sqrt(query.size(-1))", "")],
        ["FAIL  1.", "FAIL  3. a batch of 2 with 2 heads"],
    ),
]
'''

SOLUTION = '''\
"""Coding exercise {exercise_id}.

Objective assessed: {objective}.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises {exercise_id} {module}_scores.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- {exercise_id} path/to/{module}_scores.py

The check compares your function with the library's in float64 and says,
for each failing case, what input it used, what it expected and what came
back.
"""

# BEGIN SOLUTION
import math

# END SOLUTION
from torch import Tensor


def {function}(query: Tensor, key: Tensor) -> Tensor:
    """The scores of ``query`` (..., L, D) against ``key`` (..., S, D):
    their dot products divided by sqrt(D), of shape (..., L, S)."""
    # BEGIN SOLUTION
    return query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    # END SOLUTION
'''

TESTS = '''\
"""The chapter "{title}": its module's function against a direct computation in float64, its bad inputs,
and its coding exercise (the solution passes, the template fails by name)."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tinyformer.labs.{module} import {function}
from tinyformer_exercises import EXERCISES

SOLUTION = Path(__file__).resolve().parent / "exercise_solutions" / "{module}_scores.py"
DOUBLE = torch.float64


def test_scores_are_dot_products_over_the_root_of_the_width():
    query = torch.randn(2, 3, 8, dtype=DOUBLE)
    key = torch.randn(2, 5, 8, dtype=DOUBLE)
    scores = {function}(query, key)
    assert scores.shape == (2, 3, 5)
    expected = torch.einsum("bld,bsd->bls", query, key) / math.sqrt(8)
    torch.testing.assert_close(scores, expected, rtol=1e-12, atol=1e-12)


def test_scores_of_unit_variance_entries_have_unit_variance():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(512, 128, dtype=DOUBLE, generator=generator)
    key = torch.randn(512, 128, dtype=DOUBLE, generator=generator)
    assert abs({function}(query, key).std().item() - 1) < 0.02


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="same width, got 4 and 5"):
        {function}(torch.zeros(2, 4), torch.zeros(2, 5))
    with pytest.raises(TypeError, match="key must be a tensor, got list"):
        {function}(torch.zeros(2, 4), [[0.0] * 4])


def check(*args):
    return subprocess.run(
        [sys.executable, "-m", "tinyformer_exercises", *map(str, args)], capture_output=True, text=True, check=False
    )


def test_the_exercise_passes_with_its_solution_and_its_template_fails_by_name():
    exercise = EXERCISES["{exercise_id}"]
    assert exercise.chapter == "{slug}"
    passed = check(exercise.id, SOLUTION)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "All 6 checks passed." in passed.stdout  # 3 printed cases and 3 drawn anew
    unfinished = check(exercise.id, exercise.template_path)
    assert unfinished.returncode == 1
    assert "NOT DONE  {function} still raises NotImplementedError." in unfinished.stdout
'''

SESSION = """\
  - title: "{title}"
    note: >-
      Written by nox -s new-chapter: give the chapter's sections their weights and place the session
      in the course.
    chapters:
      {slug}:
        objectives: all
        sections: {{{section}: 1}}
    in_class: [ex-{slug}-understand]
"""


def _fill(template: str, **names: str) -> str:
    return template.format(**names)


def _authoring(root: Path):
    path = root / "src" / "tinyformer_exercises" / "authoring.py"
    spec = importlib.util.spec_from_file_location("tinyformer_exercises_authoring", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def new_chapter(root: Path, slug: str, title: str) -> list[Path]:
    """Write the chapter ``slug`` titled ``title`` into the project at ``root``; the files written or edited.

    Raises:
        ValueError: naming the slug or the title, for a slug that is not lower case with dashes (or makes a
            Python keyword), a title that is empty or holds a double quote, or a chapter, module or exercise
            that exists already. Nothing is written then.
    """
    if not isinstance(slug, str) or not SLUG.fullmatch(slug):
        raise ValueError(
            f"slug must be lower case letters, digits and single dashes, like 'induction-heads'; got {slug!r}"
        )
    module = slug.replace("-", "_")
    if keyword.iskeyword(module):
        raise ValueError(f"slug {slug!r} makes the module name {module!r}, a Python keyword")
    title = " ".join(str(title).split())
    if not title or '"' in title:
        raise ValueError(f"title must be a non-empty line without double quotes; got {title!r}")
    names = {
        "slug": slug,
        "module": module,
        "title": title,
        "function": f"{module}_scores",
        "exercise_id": f"{slug}-scores",
        "objective": "compute the scaled dot-product scores of queries against keys",
        "section": f"sec-{slug}-scores",
        "recap": f"sec-{slug}-recap",
        "exercises": f"sec-{slug}-exercises",
        "coding": f"sec-{slug}-coding",
    }
    written = [root / _fill(path, **names) for path in WRITTEN]
    page, library, exercise, solution, _template, tests, index, _chapters, package, lecturers = written
    existing = [p for p in (page, library, exercise, solution, tests) if p.exists()]
    if existing:
        raise ValueError(f"slug {slug!r} is taken: {', '.join(str(p.relative_to(root)) for p in existing)} exist")
    index_text = index.read_text()
    toctree = re.search(r"^```\{toctree\}\n:caption: Chapters\n(?:(?!```).*\n)*?(?=```)", index_text, re.M)
    if toctree is None:
        raise ValueError(f"{index}: no toctree captioned Chapters")
    package_text = package.read_text()
    floor_below = package_text.index("Floor 2, :mod:`tinyformer.bridges`")
    lecturers_text = lecturers.read_text()
    misconceptions = lecturers_text.index("# Each misconception")

    page.write_text(_fill(PAGE, **names))
    library.write_text(_fill(MODULE, **names))
    exercise.write_text(_fill(EXERCISE_MODULE, **names))
    solution.write_text(_fill(SOLUTION, **names))
    tests.write_text(_fill(TESTS, **names))
    index.write_text(index_text[: toctree.end()] + f"{slug}\n" + index_text[toctree.end() :])
    entry = f'    ``{module}`` (the chapter "{title}").\n'
    package.write_text(package_text[:floor_below] + entry.lstrip(" ").rjust(len(entry)) + package_text[floor_below:])
    lecturers.write_text(lecturers_text[:misconceptions] + _fill(SESSION, **names) + lecturers_text[misconceptions:])
    _authoring(root).write_exercise_files(root)  # chapters.json and the new template
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s new-chapter --", description=__doc__.split("\n\n")[0])
    parser.add_argument("slug", help="the page's document name: lower case, dashes (e.g. induction-heads)")
    parser.add_argument("title", help="the chapter's title, as its heading and the table of contents show it")
    parser.add_argument("--root", type=Path, default=ROOT, help="the project's root (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        written = new_chapter(args.root.resolve(), args.slug, args.title)
    except ValueError as error:
        print(f"new-chapter: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(args.root.resolve())}")
    print("Next: docs/contributing.md says what to change first; `nox -s docs` builds the book with it.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
