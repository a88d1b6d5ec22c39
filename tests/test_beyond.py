"""The chapter "Position beyond sinusoids": its lab's task and ceiling, every claim it makes from the lab, and
its glued numbers equal to what the library computes now."""

import itertools
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tinyformer.extrapolation import (
    MARKER,
    ExtrapolationConfig,
    MarkerBatch,
    marker_batch,
    marker_logits,
    position_blind_ceiling,
    run_extrapolation,
    train_marker_model,
)
from tinyformer.transformer import POSITIONAL_SCHEMES, TinyTransformer, TransformerConfig

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "conf" / "presets" / "extrapolation.toml"
DOUBLE = torch.float64


@pytest.fixture(scope="module")
def lab_result():
    """The chapter's lab, rerun from its preset."""
    lab = ExtrapolationConfig.from_toml(PRESET)
    config = TransformerConfig.from_toml(PRESET, vocab_size=lab.num_symbols + 2, num_classes=lab.num_symbols)
    return run_extrapolation(config, lab, POSITIONAL_SCHEMES)


# -- the task ----------------------------------------------------------------------------------------------


@given(
    batch_size=st.integers(1, 20),
    seq_len=st.integers(2, 40),
    num_symbols=st.integers(2, 10),
    seed=st.integers(0, 2**31 - 1),
)
def test_marker_batch_asks_for_the_symbol_after_the_single_marker(batch_size, seq_len, num_symbols, seed):
    batch = marker_batch(batch_size, seq_len, num_symbols=num_symbols, generator=torch.Generator().manual_seed(seed))
    assert batch.input_ids.shape == (batch_size, seq_len)
    assert ((batch.input_ids == MARKER).sum(dim=1) == 1).all()
    rows = torch.arange(batch_size)
    assert (batch.input_ids[rows, batch.marker] == MARKER).all()
    assert (batch.marker <= seq_len - 2).all()
    assert (batch.input_ids[rows, batch.marker + 1] - 2 == batch.labels).all()
    assert batch.input_ids.min() >= 1
    assert batch.input_ids.max() <= num_symbols + 1


def test_marker_positions_and_answers_are_uniform():
    batch = marker_batch(40_000, 9, num_symbols=4, generator=torch.Generator().manual_seed(0))
    marker_share = torch.bincount(batch.marker, minlength=8).double() / len(batch)
    label_share = torch.bincount(batch.labels, minlength=4).double() / len(batch)
    torch.testing.assert_close(marker_share, torch.full((8,), 1 / 8, dtype=DOUBLE), rtol=0, atol=0.01)
    torch.testing.assert_close(label_share, torch.full((4,), 1 / 4, dtype=DOUBLE), rtol=0, atol=0.01)


@pytest.mark.parametrize(("seq_len", "num_symbols"), [(3, 2), (4, 3), (5, 2), (5, 3)])
def test_position_blind_ceiling_is_the_best_order_blind_accuracy(seq_len, num_symbols):
    """Exhaustively: every sequence equally likely; group by bag of tokens; the best answer per bag wins its largest share."""
    rows, markers, labels = [], [], []
    for symbols in itertools.product(range(num_symbols), repeat=seq_len - 1):
        for marker in range(seq_len - 1):
            tokens = [s + 2 for s in symbols]
            tokens.insert(marker, MARKER)
            rows.append(tokens)
            markers.append(marker)
            labels.append(symbols[marker])
    batch = MarkerBatch(torch.tensor(rows), torch.tensor(markers), torch.tensor(labels), num_symbols)
    groups: dict[tuple[int, ...], Counter[int]] = {}
    for tokens, label in zip(rows, labels, strict=True):
        groups.setdefault(tuple(sorted(tokens)), Counter())[label] += 1
    best = sum(max(c.values()) for c in groups.values()) / len(rows)
    assert math.isclose(position_blind_ceiling(batch), best, rel_tol=1e-12)
    assert 1 / num_symbols < best < 1


def test_model_without_positions_is_order_blind_at_the_marker():
    """The argument behind the ceiling: permuting the tokens (marker included) leaves the marker's logits unchanged."""
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=10, num_classes=8, d_model=16, num_heads=4, d_ff=32, positional="none")
    model = TinyTransformer(config).to(DOUBLE).eval()
    batch = marker_batch(6, 12, num_symbols=8, generator=torch.Generator().manual_seed(1))
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(2))
    inverse = torch.argsort(perm)
    shuffled = MarkerBatch(batch.input_ids[:, perm], inverse[batch.marker], batch.labels, 8)
    assert (shuffled.input_ids[torch.arange(6), shuffled.marker] == MARKER).all()
    with torch.no_grad():
        torch.testing.assert_close(marker_logits(model, shuffled), marker_logits(model, batch))
        seeing = TinyTransformer(config.replace(positional="rotary")).to(DOUBLE).eval()
        assert not torch.allclose(marker_logits(seeing, shuffled), marker_logits(seeing, batch))


def test_learned_rows_past_the_training_length_keep_their_initial_values():
    lab = ExtrapolationConfig(steps=3, batch_size=8, train_len=6, min_train_len=6)
    config = TransformerConfig(
        vocab_size=10, num_classes=8, d_model=8, num_heads=2, d_ff=16, max_len=24, positional="learned"
    )
    run = train_marker_model(config, lab, seed=0)
    weight, initial = run.model.positional.weight, run.initial_state["positional.weight"]
    torch.testing.assert_close(weight[6:], initial[6:], rtol=0, atol=0)
    assert (weight[:6] - initial[:6]).abs().min() > 0


def test_training_is_reproducible():
    lab = ExtrapolationConfig(steps=4, batch_size=8)
    config = TransformerConfig(vocab_size=10, num_classes=8, d_model=8, num_heads=2, d_ff=16, positional="alibi")
    first, second = train_marker_model(config, lab, seed=3), train_marker_model(config, lab, seed=3)
    assert first.losses == second.losses


def test_lab_config_rejects_bad_values():
    with pytest.raises(ValueError, match="min_train_len=9 exceeds train_len=8"):
        ExtrapolationConfig(train_len=8, min_train_len=9)
    with pytest.raises(ValueError, match="seeds is empty"):
        ExtrapolationConfig(seeds=())
    with pytest.raises(ValueError, match="num_classes == 8"):
        train_marker_model(TransformerConfig(vocab_size=10, num_classes=5), ExtrapolationConfig(), seed=0)
    with pytest.raises(ValueError, match="scheme 'relative'"):
        run_extrapolation(TransformerConfig(vocab_size=10, num_classes=8), ExtrapolationConfig(), ("relative",))
