"""tinyformer.models.encoder and tinyformer.labs.training against PyTorch in float64, and their errors."""

import dataclasses
import functools
import inspect
import math
import re
import tomllib
from importlib import resources

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import tinyformer.labs.training
from tinyformer.labs import presets
from tinyformer.labs.presets import preset
from tinyformer.labs.tasks import ITEMS, VOCAB, comparison_split
from tinyformer.labs.training import (
    TrainingConfig,
    accuracy,
    head_ablation_accuracy,
    head_findings,
    head_pair_ablation_accuracy,
    head_statistics,
    heads_switched_off,
    train_classifier,
    verb_query_shares,
)
from tinyformer.models.encoder import EncoderLayer, PositionwiseFeedForward, TinyTransformer, TransformerConfig

DOUBLE = torch.float64


def torch_layer(d_model, num_heads, d_ff, *, norm_first, activation="relu", seed=0):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        d_model, num_heads, d_ff, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True
    )
    with torch.no_grad():  # LayerNorms start at weight 1, bias 0: perturb them so a swapped norm would show
        for norm in (layer.norm1, layer.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return layer.to(DOUBLE)


@pytest.mark.peer
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@given(
    batch_size=st.integers(1, 3),
    seq_len=st.integers(1, 7),
    num_heads=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 2**31 - 1),
)
def test_encoder_layer_matches_torch(norm_first, activation, batch_size, seq_len, num_heads, seed):
    reference = torch_layer(8, num_heads, 16, norm_first=norm_first, activation=activation, seed=seed)
    ours = EncoderLayer.from_torch(reference)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, seq_len, 8, generator=g, dtype=DOUBLE, requires_grad=True)
    lengths = torch.randint(1, seq_len + 1, (batch_size,), generator=g)
    key_padding_mask = torch.arange(seq_len) >= lengths[:, None]  # True = padding
    # Training mode (dropout 0) keeps PyTorch on its explicit path, so gradients can be compared too.
    expected = reference(x, src_key_padding_mask=key_padding_mask)
    actual, _ = ours(x, key_padding_mask=key_padding_mask)
    real = ~key_padding_mask
    torch.testing.assert_close(actual[real], expected[real])
    (grad_expected,) = torch.autograd.grad(expected[real].sum(), x)
    (grad_actual,) = torch.autograd.grad(actual[real].sum(), x)
    torch.testing.assert_close(grad_actual, grad_expected)
    # Causal: PyTorch's float mask (-inf above the diagonal) against our is_causal.
    causal = nn.Transformer.generate_square_subsequent_mask(seq_len, dtype=DOUBLE)
    expected = reference(x, src_mask=causal, is_causal=True)
    actual, _ = ours(x, is_causal=True)
    torch.testing.assert_close(actual, expected)
    # A boolean attn_mask means the opposite in PyTorch (True = blocked): invert it.
    allowed = torch.rand(seq_len, seq_len, generator=g) > 0.3
    allowed.fill_diagonal_(True)
    torch.testing.assert_close(ours(x, attn_mask=allowed)[0], reference(x, src_mask=~allowed))


def test_encoder_layer_eval_fast_path_matches_torch():
    """In eval mode PyTorch takes its fused kernel; ours its fast path: still equal."""
    reference = torch_layer(16, 4, 32, norm_first=False).eval()
    ours = EncoderLayer.from_torch(reference).eval()
    x = torch.randn(2, 5, 16, dtype=DOUBLE)
    key_padding_mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        expected = reference(x, src_key_padding_mask=key_padding_mask)
        actual, _ = ours(x, key_padding_mask=key_padding_mask)
    torch.testing.assert_close(actual[~key_padding_mask], expected[~key_padding_mask])


def test_encoder_layer_returns_per_head_weights_that_sum_to_one():
    layer = EncoderLayer(8, 2, 16).to(DOUBLE)
    _, weights = layer(torch.randn(3, 4, 8, dtype=DOUBLE), need_weights=True)
    assert weights.shape == (3, 2, 4, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 4, dtype=DOUBLE))
    assert layer(torch.randn(1, 4, 8, dtype=DOUBLE))[1] is None


def test_feed_forward_is_the_paper_formula_and_position_wise():
    ffn = PositionwiseFeedForward(6, 12).to(DOUBLE)
    x = torch.randn(2, 5, 6, dtype=DOUBLE)
    w1, b1, w2, b2 = ffn.linear1.weight.T, ffn.linear1.bias, ffn.linear2.weight.T, ffn.linear2.bias
    torch.testing.assert_close(ffn(x), torch.clamp(x @ w1 + b1, min=0) @ w2 + b2)
    perm = torch.randperm(5)
    torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm])
    assert sum(p.numel() for p in ffn.parameters()) == 2 * 6 * 12 + 12 + 6


def test_from_torch_rejects_other_modules_and_activations():
    with pytest.raises(TypeError, match=r"nn\.TransformerEncoderLayer, got Linear"):
        EncoderLayer.from_torch(nn.Linear(2, 2))
    layer = nn.TransformerEncoderLayer(8, 2, 16, activation=torch.tanh, batch_first=True)
    with pytest.raises(ValueError, match=r"activation=<built-in method tanh.* is not supported"):
        EncoderLayer.from_torch(layer)


def copied_torch_pipeline(model: TinyTransformer):
    """The same computation as TinyTransformer.encode, with PyTorch's layers holding our weights."""
    layers = []
    for ours in model.layers:
        theirs = nn.TransformerEncoderLayer(
            model.config.d_model,
            model.config.num_heads,
            model.config.d_ff,
            dropout=0.0,
            norm_first=model.config.norm_first,
            batch_first=True,
            dtype=DOUBLE,
        )
        with torch.no_grad():
            attn = ours.self_attn
            theirs.self_attn.in_proj_weight.copy_(
                torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
            )
            theirs.self_attn.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
            theirs.self_attn.out_proj.load_state_dict(attn.out_proj.state_dict())
            theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
            theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
            theirs.norm1.load_state_dict(ours.norm1.state_dict())
            theirs.norm2.load_state_dict(ours.norm2.state_dict())
        layers.append(theirs.train())
    return layers


@pytest.mark.parametrize("norm_first", [False, True])
def test_tiny_transformer_is_embedding_encoding_and_torch_layers(norm_first):
    config = TransformerConfig(vocab_size=11, num_classes=3, d_model=8, num_heads=2, d_ff=16, norm_first=norm_first)
    torch.manual_seed(0)
    model = TinyTransformer(config).to(DOUBLE)
    ids = torch.randint(1, 11, (2, 6))
    key_padding_mask = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    hidden, _ = model.encode(ids, key_padding_mask=key_padding_mask)
    position = torch.arange(6, dtype=DOUBLE)[:, None] / 10000 ** (torch.arange(0, 8, 2, dtype=DOUBLE) / 8)
    pe = torch.stack((position.sin(), position.cos()), dim=-1).flatten(1)  # (L, E), interleaved
    x = model.embedding(ids) * math.sqrt(8) + pe
    for layer in copied_torch_pipeline(model):
        x = layer(x, src_key_padding_mask=key_padding_mask)
    if norm_first:
        x = model.final_norm(x)
    torch.testing.assert_close(hidden[~key_padding_mask], x[~key_padding_mask])
    # Logits: the classifier applied to the mean over real tokens.
    pooled = torch.stack([hidden[0].mean(0), hidden[1, :4].mean(0)])
    torch.testing.assert_close(model(ids, key_padding_mask=key_padding_mask), model.classifier(pooled))


@given(seed=st.integers(0, 2**31 - 1), seq_len=st.integers(2, 8))
def test_model_without_encoding_is_permutation_invariant_and_with_it_is_not(seed, seq_len):
    torch.manual_seed(seed)
    config = TransformerConfig(vocab_size=20, num_classes=4, d_model=8, num_heads=2, positional_encoding=False)
    blind = TinyTransformer(config).to(DOUBLE).eval()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(20, generator=g)[:seq_len].unsqueeze(0)  # distinct tokens
    perm = torch.randperm(seq_len, generator=g)
    while torch.equal(perm, torch.arange(seq_len)):
        perm = torch.randperm(seq_len, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(blind(ids[:, perm]), blind(ids))
        seeing = TinyTransformer(config.replace(positional_encoding=True)).to(DOUBLE).eval()
        seeing.load_state_dict(blind.state_dict())
        assert (seeing(ids[:, perm]) - seeing(ids)).abs().max() > 1e-6


def test_padding_does_not_change_a_sentences_logits():
    torch.manual_seed(0)
    model = TinyTransformer(TransformerConfig(vocab_size=10, num_classes=3)).to(DOUBLE).eval()
    short = torch.tensor([[3, 4, 5]])
    padded = torch.tensor([[3, 4, 5, 0, 0], [1, 2, 3, 4, 5]])
    key_padding_mask = padded == 0
    with torch.no_grad():
        torch.testing.assert_close(model(padded, key_padding_mask=key_padding_mask)[0], model(short)[0])


def test_embedding_is_scaled_to_unit_variance():
    model = TinyTransformer(TransformerConfig(vocab_size=5000, num_classes=2, d_model=64, num_heads=4))
    scaled = model.embedding.weight * math.sqrt(64)
    assert abs(scaled.std().item() - 1.0) < 0.02


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"vocab_size": 0}, ValueError, "vocab_size=0 must be >= 1"),
        ({"d_model": 30}, ValueError, "d_model=30 is not divisible by num_heads=4"),
        ({"num_heads": 2.0}, TypeError, "num_heads must be an int, got float 2.0"),
        ({"dropout": 1.0}, ValueError, "dropout=1.0 must be a probability"),
        ({"activation": "tanh"}, ValueError, "activation='tanh' must be one of"),
        ({"norm_first": 1}, TypeError, "norm_first must be a bool, got 1"),
        ({"base": 1.0}, ValueError, "base=1.0 must be a number greater than 1"),
        ({"num_layers": True}, TypeError, "num_layers must be an int, got bool True"),
    ],
)
def test_config_errors_name_the_field_and_value(changes, error, message):
    with pytest.raises(error, match=re.escape(message)):
        TransformerConfig(vocab_size=10, num_classes=2).replace(**changes)


def test_config_is_frozen():
    config = TransformerConfig(vocab_size=10, num_classes=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 64


def test_presets_load_and_paper_base_is_table_3():
    base = TransformerConfig.from_toml(preset("paper-base"))
    assert (base.d_model, base.num_heads, base.d_ff, base.num_layers, base.dropout) == (512, 8, 2048, 6, 0.1)
    assert base.head_dim == 64
    assert not base.norm_first
    order = TransformerConfig.from_toml(preset("word-order"), vocab_size=len(VOCAB), num_classes=len(ITEMS))
    assert order.positional_encoding
    assert order.vocab_size == 16
    training = TrainingConfig.from_toml(preset("word-order"))
    assert training.seed == 0
    assert 0 < training.test_fraction < 1


def test_presets_are_package_resources_named_by_their_files():
    """Every preset file ships in the package (importlib.resources), and the list names them all."""
    shipped = sorted(
        p.name.removesuffix(".toml") for p in resources.files(presets).iterdir() if p.name.endswith(".toml")
    )
    assert shipped == sorted(presets.PRESETS)
    for name in presets.PRESETS:
        assert tomllib.loads(preset(name).read_text())  # a non-empty TOML document
    assert TransformerConfig.from_toml(str(preset("paper-base"))).d_model == 512  # a path given as str


def test_preset_and_from_toml_refuse_bad_arguments():
    with pytest.raises(ValueError, match=r"no preset is named 'word_order'; the presets are \['extrapolation'"):
        preset("word_order")
    with pytest.raises(TypeError, match=r"name must be a preset's name \(str\), got int 3"):
        preset(3)
    with pytest.raises(TypeError, match=r"path must be a str, a pathlib.Path or a preset .* got bytes b'x.toml'"):
        TransformerConfig.from_toml(b"x.toml")


def test_toml_errors(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[model]\nvocab_size = 4\nnum_classes = 2\nwidth = 3\n")
    with pytest.raises(ValueError, match=re.escape("unknown TransformerConfig fields: ['width']")):
        TransformerConfig.from_toml(path)
    with pytest.raises(ValueError, match=r"has no \[training\] table; it has \['model'\]"):
        TrainingConfig.from_toml(path)
    path.write_text("[training]\nepochs = 2\nlr = 0.1\n")
    with pytest.raises(ValueError, match=re.escape("unknown TrainingConfig fields: ['lr']")):
        TrainingConfig.from_toml(path)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"epochs": 0}, ValueError, "epochs=0 must be >= 1"),
        ({"learning_rate": 0.0}, ValueError, "learning_rate=0 would never change the model"),
        ({"weight_decay": -1.0}, ValueError, "weight_decay=-1.0 must be a number >= 0.0"),
        ({"test_fraction": 0.0}, ValueError, "test_fraction=0 leaves nothing to test on"),
        ({"batch_size": 1.5}, TypeError, "batch_size must be an int, got float 1.5"),
    ],
)
def test_training_config_errors(changes, error, message):
    with pytest.raises(error, match=re.escape(message)):
        TrainingConfig(**changes)


@pytest.mark.parametrize(
    ("ids", "mask", "error", "message"),
    [
        (torch.zeros(1, 3), None, TypeError, "input_ids must be a 2-D torch.long Tensor"),
        (torch.tensor([[1, 2, 10]]), None, ValueError, "input_ids must lie in [0, vocab_size=10)"),
        (torch.ones(1, 70, dtype=torch.long), None, ValueError, "sequence length 70 exceeds max_len=64"),
        (torch.tensor([[1, 2]]), torch.tensor([[True, True]]), ValueError, "marks every token of some sequence"),
        (torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), TypeError, "key_padding_mask must be a bool Tensor"),
        (torch.tensor([[1, 2]]), torch.tensor([[False]]), ValueError, "key_padding_mask has shape (1, 1)"),
    ],
)
def test_model_input_errors(ids, mask, error, message):
    model = TinyTransformer(TransformerConfig(vocab_size=10, num_classes=2))
    with pytest.raises(error, match=re.escape(message)):
        model(ids, key_padding_mask=mask)


def test_training_is_reproducible_and_learns():
    train, test = comparison_split(test_fraction=0.25, seed=1)
    config = TransformerConfig(vocab_size=len(VOCAB), num_classes=len(ITEMS), max_len=16)
    recipe = TrainingConfig(epochs=2, batch_size=128, seed=3)
    first = train_classifier(config, recipe, train, test)
    second = train_classifier(config, recipe, train, test)
    assert first.train_loss == second.train_loss
    assert first.test_accuracy == second.test_accuracy
    assert first.train_loss[-1] < first.train_loss[0] < math.log(len(ITEMS)) + 0.5
    assert not first.model.training
    other = train_classifier(config, dataclasses.replace(recipe, seed=4), train, test)
    assert other.train_loss != first.train_loss


def test_head_statistics_of_uniform_attention_equal_the_uniform_baseline():
    _, test = comparison_split(test_fraction=0.25, seed=0)
    model = TinyTransformer(TransformerConfig(vocab_size=len(VOCAB), num_classes=len(ITEMS), max_len=16))
    with torch.no_grad():
        for layer in model.layers:  # zero queries and keys: every score 0, every real key the same weight
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                proj.weight.zero_()
                proj.bias.zero_()
    stats = head_statistics(model, test)
    for share in (stats.first_item, stats.second_item, stats.verb):
        torch.testing.assert_close(share, torch.full((2, 4), stats.uniform_item, dtype=DOUBLE))
    torch.testing.assert_close(stats.previous, torch.full((2, 4), stats.uniform_previous, dtype=DOUBLE))
    # The baselines by hand: 1/L per key, averaged over real queries (those with a predecessor for `previous`).
    lengths = (~test.key_padding_mask).sum(1).double()
    assert math.isclose(stats.uniform_item, len(test) / lengths.sum().item())
    assert math.isclose(stats.uniform_previous, ((lengths - 1) / lengths).sum().item() / (lengths - 1).sum().item())


def test_verb_query_shares_read_the_verb_row_of_each_map():
    _, test = comparison_split(test_fraction=0.25, seed=0)
    torch.manual_seed(0)
    model = TinyTransformer(TransformerConfig(vocab_size=len(VOCAB), num_classes=len(ITEMS), max_len=16)).eval()
    shares = verb_query_shares(model, test)
    with torch.no_grad():
        _, maps = model.encode(test.input_ids, key_padding_mask=test.key_padding_mask, need_weights=True)
    for layer, weights in enumerate(maps):  # (N, H, L, S)
        for name, position in (("first_item", test.first_item), ("second_item", test.second_item)):
            by_hand = torch.stack(
                [weights[n, :, test.verb[n], position[n]] for n in range(len(test))]
            ).double()  # (N, H)
            torch.testing.assert_close(getattr(shares, name)[layer], by_hand.mean(0))


def test_head_ablation_equals_zeroing_the_heads_columns_of_the_output_projection():
    _, test = comparison_split(test_fraction=0.25, seed=0)
    torch.manual_seed(1)
    model = TinyTransformer(TransformerConfig(vocab_size=len(VOCAB), num_classes=len(ITEMS), max_len=16)).eval()
    ablated = head_ablation_accuracy(model, test)
    assert ablated.shape == (2, 4)
    head_dim = model.layers[0].self_attn.head_dim
    for layer, head in ((0, 1), (1, 3)):
        copy = TinyTransformer(model.config).eval()
        copy.load_state_dict(model.state_dict())
        with torch.no_grad():  # W^O's columns for this head's features: the same as zeroing its output
            copy.layers[layer].self_attn.out_proj.weight[:, head * head_dim : (head + 1) * head_dim] = 0.0
        assert ablated[layer, head].item() == accuracy(copy, test)
    # The hooks are removed afterwards: the model has no hooks left and scores as before.
    before = accuracy(model, test)
    head_ablation_accuracy(model, test)
    assert not model.layers[0].self_attn.out_proj._forward_pre_hooks
    assert accuracy(model, test) == before


@functools.cache
def briefly_trained():
    """A word-order model after two epochs: accurate enough that switching heads off changes its score."""
    train, test = comparison_split(test_fraction=0.25, seed=0)
    config = TransformerConfig(vocab_size=len(VOCAB), num_classes=len(ITEMS), max_len=16)
    return train_classifier(config, TrainingConfig(epochs=2, seed=5), train, test).model, test


def without_heads(model, heads):
    """A copy of ``model`` with W^O's columns of each ``(layer, head)`` zeroed: the heads switched off by hand."""
    copy = TinyTransformer(model.config).eval()
    copy.load_state_dict(model.state_dict())
    for layer, head in heads:
        head_dim = copy.layers[layer].self_attn.head_dim
        with torch.no_grad():
            copy.layers[layer].self_attn.out_proj.weight[:, head * head_dim : (head + 1) * head_dim] = 0.0
    return copy


def test_head_pair_ablation_equals_switching_both_heads_off_by_hand():
    model, test = briefly_trained()
    pairs = head_pair_ablation_accuracy(model, test)
    assert pairs.shape == (2, 4, 2, 4)
    assert pairs.dtype == DOUBLE
    assert len(pairs.unique()) > 4  # the heads matter unequally, so the comparisons below can fail
    for one, other in (((0, 0), (0, 3)), ((0, 2), (1, 1)), ((1, 0), (1, 2))):  # same layer and across layers
        assert pairs[(*one, *other)].item() == accuracy(without_heads(model, [one, other]), test)
    torch.testing.assert_close(pairs, pairs.permute(2, 3, 0, 1), rtol=0, atol=0)  # symmetric
    single = head_ablation_accuracy(model, test)
    torch.testing.assert_close(pairs.reshape(8, 8).diagonal().reshape(2, 4), single, rtol=0, atol=0)
    # The hooks are removed afterwards.
    assert not any(layer.self_attn.out_proj._forward_pre_hooks for layer in model.layers)


def test_head_findings_name_the_fetch_heads_partner_and_the_worst_pair(monkeypatch):
    model, test = briefly_trained()
    findings = head_findings(model, test)
    pairs = head_pair_ablation_accuracy(model, test)
    single = head_ablation_accuracy(model, test)
    partner = findings.fetch_partner
    assert partner != (0, findings.fetch_head)
    drops = findings.accuracy - pairs[0, findings.fetch_head]  # (layers, H), with each partner
    drops[0, findings.fetch_head] = -1.0  # the fetch head is not its own partner
    assert math.isclose(findings.fetch_pair_drop, drops.max().item())
    assert math.isclose(findings.fetch_pair_drop, drops[partner].item())
    assert math.isclose(findings.fetch_partner_drop, findings.accuracy - single[partner].item())
    one, other = findings.pair_max_heads
    assert one != other
    assert math.isclose(findings.pair_max_drop, findings.accuracy - pairs[(*one, *other)].item())
    distinct = pairs.reshape(8, 8)[~torch.eye(8, dtype=torch.bool)]
    assert math.isclose(findings.pair_max_drop, findings.accuracy - distinct.min().item())
    assert findings.fetch_pair_drop <= findings.pair_max_drop
    # A head is no partner of itself, nor a pair of one head, even where single heads would cost the most.
    worst_singles = pairs.clone()
    worst_singles.view(8, 8).fill_diagonal_(0.0)
    monkeypatch.setattr(tinyformer.labs.training, "head_pair_ablation_accuracy", lambda model, batch: worst_singles)
    findings = head_findings(model, test)
    assert findings.fetch_partner != (0, findings.fetch_head)
    assert findings.pair_max_heads[0] != findings.pair_max_heads[1]
    assert math.isclose(findings.pair_max_drop, findings.accuracy - distinct.min().item())


def test_head_ablations_refuse_bad_input():
    model, test = briefly_trained()
    for ablation in (head_ablation_accuracy, head_pair_ablation_accuracy, head_findings):
        with pytest.raises(TypeError, match=r"model must be a TinyTransformer, got Linear"):
            ablation(nn.Linear(2, 2), test)
        with pytest.raises(TypeError, match=r"batch must be a ComparisonBatch, got tuple"):
            ablation(model, (test.input_ids, test.labels))
        empty = dataclasses.replace(
            test, sentences=(), **{f: getattr(test, f)[:0] for f in ("input_ids", "key_padding_mask", "labels")}
        )
        with pytest.raises(ValueError, match=r"batch has no sentences"):
            ablation(model, empty)
    for heads, error, message in (
        ([(0, 4)], ValueError, r"head \(layer=0, head=4\) is outside the model's 2 layers of 4 heads"),
        ([(0, 1), (2, 0)], ValueError, r"head \(layer=2, head=0\) is outside"),
        ([(0, 1.0)], TypeError, r"head must be an int, got float"),
        ([(-1, 0)], ValueError, r"layer=-1 must be >= 0"),
    ):
        with pytest.raises(error, match=message), heads_switched_off(model, heads):
            pass
    assert not any(layer.self_attn.out_proj._forward_pre_hooks for layer in model.layers)


# -- Faithful copies: every constructor option of nn.TransformerEncoderLayer reproduced or refused ----

REPRODUCED = None
# For each constructor parameter of nn.TransformerEncoderLayer, non-default values to build it with,
# and either REPRODUCED (the copy computes the same to float64 round-off) or the ValueError's text.
LAYER_OPTIONS = {
    "d_model": [(12, REPRODUCED)],
    "nhead": [(4, REPRODUCED)],
    "dim_feedforward": [(24, REPRODUCED)],
    "dropout": [(0.25, REPRODUCED)],
    "activation": [
        ("gelu", REPRODUCED),
        (F.gelu, REPRODUCED),
        (nn.GELU(), REPRODUCED),
        (nn.ReLU(), REPRODUCED),
        (torch.relu, REPRODUCED),
        (nn.GELU(approximate="tanh"), r"activation=GELU\(approximate='tanh'\) is not supported"),
        (functools.partial(F.gelu, approximate="tanh"), r"activation=functools.partial.* is not supported"),
        (torch.tanh, r"activation=<built-in method tanh.* is not supported"),
        (nn.SiLU(), r"activation=SiLU\(\) is not supported"),
    ],
    "layer_norm_eps": [(1e-2, REPRODUCED)],
    "batch_first": [(False, r"batch_first=False is not supported")],
    "norm_first": [(True, REPRODUCED)],
    "bias": [(False, r"bias=False is not supported")],
    "device": [("cpu", REPRODUCED)],
    "dtype": [(DOUBLE, REPRODUCED)],
}


def test_every_encoder_layer_option_is_listed():
    assert set(inspect.signature(nn.TransformerEncoderLayer).parameters) == set(LAYER_OPTIONS)


@pytest.mark.parametrize(
    ("option", "value", "outcome"),
    [(option, value, outcome) for option, cases in LAYER_OPTIONS.items() for value, outcome in cases],
    ids=lambda v: re.sub(r" at 0x[0-9a-f]+", "", repr(v))[:40] if not isinstance(v, str) else v,
)
def test_encoder_layer_from_torch_reproduces_or_refuses_each_option(option, value, outcome):
    kwargs = {"d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.0, "batch_first": True}
    torch.manual_seed(0)
    reference = nn.TransformerEncoderLayer(**(kwargs | {option: value})).to(DOUBLE)
    if outcome is not REPRODUCED:
        with pytest.raises(ValueError, match=outcome):
            EncoderLayer.from_torch(reference)
        return
    with torch.no_grad():  # LayerNorms and attention biases start at 1 and 0: perturb them so they show
        for norm in (reference.norm1, reference.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
        reference.self_attn.in_proj_bias.uniform_(-1, 1)
    for training in (True, False):
        reference.train(training)
        ours = EncoderLayer.from_torch(reference)
        assert ours.training is training
    assert ours.self_attn.dropout == ours.ffn.dropout.p == ours.dropout1.p == reference.dropout.p
    assert ours.norm1.eps == ours.norm2.eps == reference.norm1.eps
    assert {p.dtype for p in ours.parameters()} == {DOUBLE}
    d_model = reference.self_attn.embed_dim
    g = torch.Generator().manual_seed(1)
    # Large inputs, so that the activation's negative side and tanh-vs-erf GELU differences would show.
    x = 3 * torch.randn(3, 5, d_model, generator=g, dtype=DOUBLE, requires_grad=True)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[0, 3:] = True
    # Eval mode with gradients on keeps PyTorch off its fused inference path (a different computation).
    expected = reference(x, src_key_padding_mask=padding)
    output, _ = ours(x, key_padding_mask=padding)
    torch.testing.assert_close(output, expected)


# -- Compiles cleanly: value checks do not break the graph ---------------------------------------------


def test_tiny_transformer_compiles_with_fullgraph():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TinyTransformer(TransformerConfig(vocab_size=10, num_classes=3, d_model=8, num_heads=2)).eval()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    ids = torch.randint(0, 10, (2, 6))
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, 4:] = True
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, key_padding_mask=padding), model(ids, key_padding_mask=padding))
        # The value checks still hold inside the graph, as assertions.
        with pytest.raises(RuntimeError, match=r"input_ids must lie in \[0, vocab_size=10\)"):
            compiled(ids + 10, key_padding_mask=padding)
        with pytest.raises(RuntimeError, match="marks every token of some sequence as padding"):
            compiled(ids, key_padding_mask=torch.ones(2, 6, dtype=torch.bool))
    # A training step compiles too.
    model.train()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    compiled(ids, key_padding_mask=padding).sum().backward()
    assert all(p.grad is not None for p in model.classifier.parameters())
