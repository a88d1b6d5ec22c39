"""Coding exercises of the tinyformer book and the checker that grades them,
offline, against the library.

Each exercise asks for one or two functions of the library, written from
scratch in a template file (``templates/``, shipped with the package) whose
bodies raise ``NotImplementedError``. The checker imports the student's
file, runs the exercise's checks (:mod:`tinyformer_exercises.checks`) and
says, check by check, what it used, what it expected and what came back::

    python -m tinyformer_exercises --list          # or: nox -s check -- --list
    python -m tinyformer_exercises ID FILE         # or: nox -s check -- ID FILE

The exit status is 0 only when every check passes.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHAPTERS",
    "EXERCISES",
    "EXERCISE_MODULES",
    "TEMPLATES",
    "Exercise",
    "get",
]

TEMPLATES = Path(__file__).resolve().parent / "templates"

# The book's chapters, by document name: (number, title) as the site numbers
# and titles them. Written from docs/index.md's toctree and each page's
# heading (``nox -s templates``: authoring.write_chapters); a test checks it.
CHAPTERS: dict[str, tuple[int, str]] = {
    name: (number, title)
    for name, (number, title) in json.loads(
        (Path(__file__).resolve().parent / "chapters.json").read_text()
    ).items()
}


@dataclass(frozen=True)
class Exercise:
    """A coding exercise.

    Attributes:
        id: the name given to the checker, e.g. ``"causal-mask"``.
        functions: the names of the functions the student writes, in the
            order the checks call them.
        template: file name of the template in :data:`TEMPLATES`.
        chapter: the chapter's document name (``docs/<chapter>.md``) that
            sets the exercise.
        objective: the learning objective it assesses, in words (the chapter
            numbers it).
        references: dotted names of the library's functions and methods
            that answer the exercise. While the student's code runs, they
            refuse to run (:mod:`tinyformer_exercises._sandbox`), and a file
            whose function is one of them, or wraps one, is refused by name.
        variant_of: those of ``references`` that the chapter lists in full
            above the exercise, because the exercise asks for another form
            of them (empty for most: the page shows only the lines that
            carry the idea; tests/test_assignable.py checks it).
        variant_differs: for a variant, how it differs from the listing.
    """

    id: str
    functions: tuple[str, ...]
    template: str
    chapter: str
    objective: str
    references: tuple[str, ...]
    variant_of: tuple[str, ...] = ()
    variant_differs: str = ""

    @property
    def chapter_name(self) -> str:
        """``chapter 4, "A miniature Transformer from scratch"``, as the
        site numbers and titles it."""
        number, title = CHAPTERS[self.chapter]
        return f'chapter {number}, "{title}"'

    @property
    def template_path(self) -> Path:
        """Where the template is installed."""
        return TEMPLATES / self.template


EXERCISES: dict[str, Exercise] = {
    exercise.id: exercise
    for exercise in (
        Exercise(
            "causal-mask",
            ("causal_mask",),
            "causal_mask.py",
            "attention",
            "build a causal mask and state its polarity (True = may attend)",
            (
                "tinyformer.models.attention.causal_mask",
                "tinyformer.models.cache.causal_block_mask",
                "tinyformer.models.cache.sliding_window_mask",
            ),
        ),
        Exercise(
            "scaled-dot-product-attention",
            ("scaled_dot_product_attention",),
            "scaled_dot_product_attention.py",
            "attention",
            "write scaled dot-product attention in matrix form, with boolean, additive and causal masks",
            (
                "tinyformer.models.attention.scaled_dot_product_attention",
                "tinyformer.models.attention.MultiHeadAttention.forward",
                "tinyformer.models.attention._merge_masks",
                "tinyformer.models.attention._blocked_rows",
                "tinyformer.models.attention.fused_attention",
                "tinyformer.models.flash.flash_attention",
            ),
        ),
        Exercise(
            "split-half-encoding",
            ("split_half_encoding",),
            "split_half_encoding.py",
            "positional-encoding",
            "write down the sinusoidal encoding and compute it for any width and base",
            (
                "tinyformer.models.positional.sinusoidal_positional_encoding",
                "tinyformer.models.positional.sinusoidal.pair_wavelengths",
            ),
            variant_of=(
                "tinyformer.models.positional.sinusoidal_positional_encoding",
            ),
            variant_differs=(
                "the chapter lists the paper's interleaved table; the exercise asks for the split-half "
                "layout, all the sines and then all the cosines, as Hugging Face's Marian stores it"
            ),
        ),
        Exercise(
            "split-half-shift",
            ("split_half_shift_matrix",),
            "split_half_shift_matrix.py",
            "positional-encoding",
            "build the rotation R_k that shifts every sinusoidal encoding by k positions",
            (
                "tinyformer.models.positional.relative_shift_matrix",
                "tinyformer.models.positional.sinusoidal.pair_wavelengths",
            ),
            variant_of=(
                "tinyformer.models.positional.relative_shift_matrix",
            ),
            variant_differs=(
                "the chapter lists R_k of the interleaved table, block diagonal; the exercise asks for "
                "R_k of the split-half table, where each pair's rows and columns are E/2 apart"
            ),
        ),
        Exercise(
            "fused-qkv-heads",
            ("split_fused_qkv",),
            "fused_qkv_heads.py",
            "multi-head-attention",
            "split a fused query-key-value projection into heads, in the two layouts that models store it in",
            (
                "tinyformer.models.attention.MultiHeadAttention.split_heads",
                "tinyformer.models.attention.MultiHeadAttention.merge_heads",
            ),
            variant_of=(
                "tinyformer.models.attention.MultiHeadAttention.split_heads",
                "tinyformer.models.attention.MultiHeadAttention.merge_heads",
            ),
            variant_differs=(
                "the chapter lists the split of one projection; the exercise splits the output of one "
                "fused projection of all three, in GPT-2's [q | k | v] layout and GPT-NeoX's per-head one"
            ),
        ),
        Exercise(
            "multi-head-from-heads",
            ("multi_head_attention",),
            "multi_head_attention.py",
            "multi-head-attention",
            "assemble multi-head attention from H single heads, each a learned projection of the whole embedding",
            ("tinyformer.models.attention.MultiHeadAttention.forward",),
            variant_of=(
                "tinyformer.models.attention.MultiHeadAttention.forward",
            ),
            variant_differs=(
                "the chapter lists the layer's forward, which projects once and splits; the exercise "
                "computes each head on its own from its block of rows of the projection weights, with "
                "the single-head attention of chapter 1"
            ),
        ),
        Exercise(
            "feed-forward",
            ("position_wise_feed_forward",),
            "position_wise_feed_forward.py",
            "transformer",
            "write the position-wise feed-forward network from its two linear layers",
            ("tinyformer.models.encoder.PositionwiseFeedForward.forward",),
        ),
        Exercise(
            "encoder-layer",
            ("encoder_layer",),
            "encoder_layer.py",
            "transformer",
            "write the encoder layer, with residuals and layer normalisation placed post-LN or pre-LN",
            ("tinyformer.models.encoder.EncoderLayer.forward",),
        ),
        Exercise(
            "apply-rotary",
            ("apply_rotary",),
            "apply_rotary.py",
            "beyond-sinusoids",
            "rotate queries and keys by their position, with the interleaved and the split-half pairing",
            (
                "tinyformer.models.positional.apply_rotary",
                "tinyformer.models.positional.rotary.rotary_angles",
            ),
        ),
        Exercise(
            "alibi-bias",
            ("alibi_slopes", "alibi_bias"),
            "alibi_bias.py",
            "beyond-sinusoids",
            "compute ALiBi's slopes for any number of heads and its distance biases",
            (
                "tinyformer.models.positional.alibi_slopes",
                "tinyformer.models.positional.alibi_bias",
                "tinyformer.models.positional.alibi._geometric_slopes",
                "tinyformer.models.positional.alibi.ALiBiBias.forward",
                "tinyformer.models.positional.alibi._bias_at",
            ),
        ),
        Exercise(
            "repeat-kv-heads",
            ("repeat_kv_heads",),
            "repeat_kv_heads.py",
            "decoder",
            "share each key/value head among a group of query heads, as grouped-query and multi-query attention do",
            ("tinyformer.models.attention.repeat_kv_heads",),
        ),
        Exercise(
            "kv-cache-step",
            ("attend_with_cache",),
            "kv_cache_step.py",
            "decoder",
            "extend a key-value cache with new tokens and let them attend causally to the cached and the new keys",
            (
                "tinyformer.models.cache.causal_block_mask",
                "tinyformer.models.cache.KVCache.update",
                "tinyformer.models.decoder.CausalSelfAttention.forward",
            ),
        ),
        Exercise(
            "alibi-cache-bias",
            ("alibi_cache_bias",),
            "alibi_cache_bias.py",
            "decoder",
            "compute ALiBi's bias for the newest queries under a key-value cache, with the future keys blocked",
            (
                "tinyformer.models.positional.alibi_bias",
                "tinyformer.models.positional.alibi.ALiBiBias.forward",
                "tinyformer.models.positional.alibi._bias_at",
            ),
        ),
        Exercise(
            "scaled-frequencies",
            ("scaled_frequencies",),
            "scaled_frequencies.py",
            "long-context",
            "compute the rotary speeds that position interpolation and NTK-aware scaling give a model stretched past its trained context",
            ("tinyformer.models.positional.rotary_frequencies",),
        ),
        Exercise(
            "yarn-frequencies",
            ("yarn_frequencies",),
            "yarn_frequencies.py",
            "long-context",
            "compute YaRN's blend of kept and interpolated rotary speeds, the ramp over the pair index",
            (
                "tinyformer.models.positional.rotary_frequencies",
                "tinyformer.models.positional.scaling._yarn_ramp",
            ),
        ),
        Exercise(
            "sliding-window-mask",
            ("sliding_window_mask",),
            "sliding_window_mask.py",
            "long-context",
            "build the boolean mask of causal attention within a sliding window, with attention sinks, for the newest queries under a cache",
            ("tinyformer.models.cache.sliding_window_mask",),
        ),
        Exercise(
            "online-softmax",
            ("online_softmax",),
            "online_softmax.py",
            "flash-attention",
            "compute a softmax with its maximum and normaliser found in one pass over blocks of a row, a running maximum and a running sum",
            ("tinyformer.models.flash.online_softmax",),
        ),
        Exercise(
            "tile-update",
            ("tile_update",),
            "tile_update.py",
            "flash-attention",
            "update a query block's running maximum, running sum and unnormalised output with one tile of scores, as FlashAttention's forward does",
            (
                "tinyformer.models.flash.flash_attention",
                "tinyformer.models.flash._FlashAttention.forward",
            ),
        ),
        Exercise(
            "tile-score-gradient",
            ("tile_score_gradient",),
            "tile_score_gradient.py",
            "flash-attention",
            "compute the gradient of one tile's scores in FlashAttention's backward from the tile's recomputed probabilities and the rows' output and output gradient",
            ("tinyformer.models.flash._FlashAttention.backward",),
        ),
    )
}

#: Where exercises that live in one module each are: ``exercises/NAME.py`` holds the exercise's
#: ``EXERCISE = Exercise(...)`` (its metadata, in literals), its ``CHECKS`` and its ``WRONG_SOLUTIONS``;
#: its reference solution, from which the template is written, is ``tests/exercise_solutions/NAME.py``
#: (``nox -s new-chapter`` writes both). The registry reads ``EXERCISE`` from the file without importing it,
#: so the registry needs no torch (``nox -s templates`` loads it by path).
EXERCISE_MODULES = Path(__file__).resolve().parent / "exercises"


def _module_exercise(path: Path) -> Exercise:
    """The ``EXERCISE = Exercise(...)`` of the exercise module at ``path``, read with :mod:`ast`.

    Raises:
        ValueError: naming the file, when it has no such assignment or its arguments are not literals.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets]
            == ["EXERCISE"]
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "Exercise"
        ):
            try:
                args = [ast.literal_eval(a) for a in node.value.args]
                kwargs = {
                    k.arg: ast.literal_eval(k.value)
                    for k in node.value.keywords
                }
            except ValueError as error:
                raise ValueError(
                    f"{path}: EXERCISE's arguments must be literals ({error})"
                ) from None
            return Exercise(*args, **kwargs)
    raise ValueError(
        f"{path}: no EXERCISE = Exercise(...) at the top level"
    )


for _path in sorted(EXERCISE_MODULES.glob("[a-z]*.py")):
    _exercise = _module_exercise(_path)
    if _exercise.id in EXERCISES:
        raise ValueError(f"{_path}: exercise id {_exercise.id!r} is taken")
    EXERCISES[_exercise.id] = _exercise


def get(exercise_id: str) -> Exercise:
    """The exercise called ``exercise_id``.

    Raises:
        KeyError: naming the id and the known ids.
    """
    try:
        return EXERCISES[exercise_id]
    except KeyError:
        raise KeyError(
            f"no exercise {exercise_id!r}; the exercises are {', '.join(EXERCISES)}"
        ) from None
