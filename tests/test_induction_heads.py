"""The chapter "What attention learns: induction heads": repeated tokens, the two head scores on constructed
weights, the in-context score, head ablation, the attention-only decoder and its weights, the lab's training
loop on small settings, and the chapter's claims about its trained models, read from the numbers the book's
build computed."""

import math

import pytest
import torch
from booktools import glued_values

from tinyformer.labs.induction import (
    BOS,
    InductionLabConfig,
    ablate_heads,
    chance_loss,
    copy_accuracy,
    copy_loss,
    drop_step,
    in_context_score,
    induction_score,
    previous_token_score,
    repeated_tokens,
    run_induction_lab,
    train_induction_model,
)
from tinyformer.models.attention import scaled_dot_product_attention
from tinyformer.models.decoder import TinyDecoder
from tinyformer.models.decoder_config import DecoderConfig

DOUBLE = torch.float64


def causal_uniform(batch_size: int, num_heads: int, seq_len: int) -> torch.Tensor:
    """Each query attends evenly to itself and every key before it."""
    weights = torch.ones(seq_len, seq_len, dtype=DOUBLE).tril()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.expand(batch_size, num_heads, seq_len, seq_len).clone()


def small_model(positional: str = "rotary", *, attention_only: bool = True, seed: int = 0) -> TinyDecoder:
    config = DecoderConfig(
        vocab_size=12,
        d_model=16,
        num_heads=4,
        d_ff=24,
        num_layers=2,
        positional=positional,
        max_len=64,
        attention_only=attention_only,
    )
    torch.manual_seed(seed)
    model = TinyDecoder(config).to(DOUBLE).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)  # wider than at initialisation: every head matters
    return model


# -- repeated tokens ----------------------------------------------------------------------------------------


def test_repeated_tokens_copy_exactly_after_bos():
    ids = repeated_tokens(5, 7, 10, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (5, 15)
    assert ids.dtype == torch.int64
    assert (ids[:, 0] == BOS).all()
    torch.testing.assert_close(ids[:, 1:8], ids[:, 8:], rtol=0, atol=0)
    assert int(ids[:, 1:].min()) >= 1
    assert int(ids[:, 1:].max()) <= 9
    again = repeated_tokens(5, 7, 10, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ids, again, rtol=0, atol=0)


def test_repeated_tokens_draw_every_token_but_bos_evenly():
    ids = repeated_tokens(4000, 5, 5, generator=torch.Generator().manual_seed(1))
    counts = torch.bincount(ids[:, 1:6].flatten(), minlength=5)
    assert counts[0] == 0
    shares = counts[1:].double() / counts.sum()
    assert (shares - 0.25).abs().max() < 0.01  # 20,000 draws: the standard error is 0.003


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((2, 1, 10), ValueError, "n=1 must be >= 2"),
        ((2, 4, 1), ValueError, "vocab_size=1 must be >= 2"),
        ((0, 4, 10), ValueError, "batch_size=0 must be >= 1"),
        ((2, 4.0, 10), TypeError, "n must be an int, got float 4.0"),
    ],
)
def test_repeated_tokens_refuse_bad_sizes_by_name(args, error, message):
    with pytest.raises(error, match=message):
        repeated_tokens(*args)


# -- the two scores ------------------------------------------------------------------------------------------


def test_a_perfect_previous_token_head_scores_one_and_a_uniform_head_its_average():
    seq_len = 9
    weights = torch.zeros(2, 2, seq_len, seq_len, dtype=DOUBLE)
    weights[:, 0, 0, 0] = 1
    weights[:, 0, 1:, :-1] = torch.eye(seq_len - 1, dtype=DOUBLE)
    weights[:, 1] = torch.eye(seq_len, dtype=DOUBLE)  # each query on itself
    torch.testing.assert_close(previous_token_score(weights), torch.tensor([1.0, 0.0], dtype=DOUBLE))
    # query t spreads 1/(t + 1) over t + 1 keys: the mean over t = 1 .. L - 1 of 1/(t + 1)
    expected = sum(1 / (t + 1) for t in range(1, seq_len)) / (seq_len - 1)
    torch.testing.assert_close(
        previous_token_score(causal_uniform(3, 2, seq_len)), torch.full((2,), expected, dtype=DOUBLE)
    )


def test_a_perfect_induction_stripe_scores_one_and_a_uniform_head_its_average():
    n = 6
    size = 2 * n + 1
    weights = torch.zeros(1, 2, size, size, dtype=DOUBLE)
    for t in range(size):
        weights[0, 0, t, max(t - 1, 0)] = 1  # a previous-token head
        weights[0, 1, t, max(t - 1, 0)] = 1
    for j in range(1, n):
        weights[0, 1, n + j] = 0
        weights[0, 1, n + j, j + 1] = 1  # the token after the earlier occurrence
    torch.testing.assert_close(induction_score(weights, n), torch.tensor([0.0, 1.0], dtype=DOUBLE))
    # query n + j spreads 1/(n + j + 1) evenly: the mean over j = 1 .. n - 1
    expected = sum(1 / (n + j + 1) for j in range(1, n)) / (n - 1)
    torch.testing.assert_close(induction_score(causal_uniform(2, 3, size), n), torch.full((3,), expected, dtype=DOUBLE))


def test_the_induction_score_reads_the_token_after_the_earlier_occurrence_on_real_rows():
    """On rows of repeated_tokens, a head that attends to the key holding the token the query will see next
    (found from the ids, not the formula) scores 1."""
    n = 5
    ids = repeated_tokens(3, n, 50, generator=torch.Generator().manual_seed(2))
    size = 2 * n + 1
    weights = torch.zeros(3, 1, size, size, dtype=DOUBLE)
    for b in range(3):
        for t in range(size):
            weights[b, 0, t, t] = 1
        for t in range(n + 1, 2 * n):
            # the first position of the current token, then the one after it
            first = int((ids[b, : n + 1] == ids[b, t]).nonzero()[0])
            weights[b, 0, t, t] = 0
            weights[b, 0, t, first + 1] = 1
            assert ids[b, first + 1] == ids[b, t + 1]  # it holds the next token
    assert induction_score(weights, n).item() == 1.0


@pytest.mark.parametrize(
    ("weights", "n", "error", "message"),
    [
        (torch.zeros(2, 3, 5), None, ValueError, r"shape \(N, H, L, L\), got \(2, 3, 5\)"),
        (torch.zeros(1, 1, 5, 4), None, ValueError, r"got \(1, 1, 5, 4\)"),
        (torch.zeros(1, 1, 5, 5, dtype=torch.int64), None, TypeError, "floating-point Tensor, got torch.int64"),
        ([[1.0]], None, TypeError, "floating-point Tensor, got list"),
        (torch.zeros(1, 1, 1, 1), None, ValueError, "L >= 2 positions, got L=1"),
        (torch.zeros(1, 1, 9, 9), 5, ValueError, r"L=9 positions; rows of n=5 repeated tokens have 2n \+ 1 = 11"),
        (torch.zeros(1, 1, 3, 3), 1, ValueError, "n=1 must be >= 2"),
    ],
)
def test_bad_weights_are_refused_by_name(weights, n, error, message):
    def score():
        return previous_token_score(weights) if n is None else induction_score(weights, n)

    with pytest.raises(error, match=message):
        score()


def test_in_context_score_is_the_loss_drop_between_two_positions():
    loss = torch.tensor([[4.0, 3.0, 2.0, 0.5], [4.0, 3.0, 1.0, 0.5]], dtype=DOUBLE)
    assert in_context_score(loss, 1, 3) == pytest.approx(2.5)
    assert in_context_score(loss[0], 3, 0) == pytest.approx(-3.5)
    with pytest.raises(ValueError, match=r"late=4 lies outside the 4 positions \[0, 4\)"):
        in_context_score(loss, 0, 4)
    with pytest.raises(ValueError, match=r"early=-1 lies outside"):
        in_context_score(loss, -1, 2)
    with pytest.raises(TypeError, match="loss_per_position must be a floating-point Tensor"):
        in_context_score([1.0, 2.0], 0, 1)


# -- ablation -----------------------------------------------------------------------------------------------


def test_ablating_a_head_is_zeroing_its_columns_of_the_output_projection():
    """Zeroing head h's output before out_proj equals zeroing the D columns of out_proj's weight that read
    it, in float64; every other head and layer is untouched."""
    model = small_model()
    ids = repeated_tokens(2, 6, 12, generator=torch.Generator().manual_seed(3))
    head_dim = model.config.head_dim
    heads = {0: [1], 1: [0, 3]}
    with torch.no_grad(), ablate_heads(model, heads):
        ablated = model(ids)
    copy = small_model()
    with torch.no_grad():
        for layer, chosen in heads.items():
            for head in chosen:
                copy.layers[layer].attn.out_proj.weight[:, head * head_dim : (head + 1) * head_dim] = 0
        expected = copy(ids)
        plain = model(ids)
    torch.testing.assert_close(ablated, expected, rtol=1e-12, atol=1e-12)
    assert (ablated - plain).abs().max() > 1e-3  # the ablation changed the output


def test_ablation_changes_only_the_chosen_heads_and_restores_the_model():
    model = small_model("alibi", attention_only=False)
    ids = repeated_tokens(2, 6, 12, generator=torch.Generator().manual_seed(4))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        plain = model(ids)
        # layer 0's other heads and layer 1's attention weights before its output projection
        _, weights = model(ids, need_weights=True)
        with ablate_heads(model, {1: [2]}):
            ablated, ablated_weights = model(ids, need_weights=True)
        after = model(ids)
    torch.testing.assert_close(ablated_weights[0], weights[0], rtol=0, atol=0)  # layer 0 untouched
    torch.testing.assert_close(ablated_weights[1], weights[1], rtol=0, atol=0)  # the head's pattern kept
    assert (ablated - plain).abs().max() > 1e-3
    torch.testing.assert_close(after, plain, rtol=0, atol=0)
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    for layer in model.layers:
        assert not layer.attn.out_proj._forward_pre_hooks


def test_ablation_is_undone_when_the_block_raises():
    model = small_model()
    ids = repeated_tokens(1, 4, 12, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        plain = model(ids)
        with pytest.raises(RuntimeError, match="stop"), ablate_heads(model, {0: [0, 1, 2, 3]}):
            raise RuntimeError("stop")
        torch.testing.assert_close(model(ids), plain, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("heads", "error", "message"),
    [
        ({2: [0]}, ValueError, r"layer 2 does not exist: the model has layers 0 \.\. 1"),
        ({1: [4]}, ValueError, r"head 4 of layer 1 does not exist: each layer has heads 0 \.\. 3"),
        ({0: [-1]}, ValueError, "head -1 of layer 0 does not exist"),
        ([(0, [1])], TypeError, "heads must map a layer to its heads"),
        ({0: 1}, TypeError, r"heads\[0\] must be a sequence of heads, got int"),
        ({"0": [1]}, TypeError, "layer must be an int, got str"),
    ],
)
def test_bad_ablations_are_refused_by_name(heads, error, message):
    model = small_model()
    with pytest.raises(error, match=message), ablate_heads(model, heads):
        pass
    assert not any(layer.attn.out_proj._forward_pre_hooks for layer in model.layers)


def test_only_a_tiny_decoder_can_be_ablated():
    with (
        pytest.raises(TypeError, match="model must be a TinyDecoder, got Linear"),
        ablate_heads(torch.nn.Linear(2, 2), {}),
    ):
        pass


# -- the attention-only decoder and its weights -----------------------------------------------------------


def test_an_attention_only_decoder_has_no_feed_forward_network():
    model = small_model(attention_only=True)
    assert all(layer.ffn is None and layer.ffn_norm is None for layer in model.layers)
    assert not any(".ffn" in name for name in model.state_dict())
    full = small_model(attention_only=False)
    assert {name for name in full.state_dict() if ".ffn" not in name} == set(model.state_dict())
    assert "attention_only=True" in repr(model)
    with pytest.raises(TypeError, match="attention_only must be a bool, got 1"):
        DecoderConfig(vocab_size=4, attention_only=1)


@pytest.mark.parametrize("positional", ["none", "rotary", "alibi", "t5", "learned"])
def test_the_weights_a_decoder_returns_are_its_layers_weights(positional):
    """need_weights returns one (N, H, L, S) tensor per layer, the weights of the explicit path on that
    layer's input, and the same logits as without it."""
    model = small_model(positional, attention_only=False)
    ids = repeated_tokens(2, 5, 12, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        logits, weights = model(ids, need_weights=True)
        torch.testing.assert_close(logits, model(ids), rtol=1e-12, atol=1e-12)
        assert len(weights) == 2
        # layer 0's weights, recomputed from the embeddings with the attention function itself
        layer = model.layers[0]
        x = model.embed(ids)
        positions = torch.arange(ids.size(1)).expand(ids.shape)
        if model.position_embed is not None:
            x = model.position_embed(x, positions)
        index = torch.arange(ids.size(1))
        attn_mask = model._attn_mask(index, positions, index.expand(ids.shape), positions, torch.ones_like(ids).bool())
        attn = layer.attn
        q = attn.split_heads(attn.q_proj(layer.attn_norm(x)))
        k = attn.split_heads(attn.k_proj(layer.attn_norm(x)))
        v = attn.split_heads(attn.v_proj(layer.attn_norm(x)))
        q, k = model.config.positional_scheme.rotate(q, k, positions[:, None, :], model.config)
        _, expected = scaled_dot_product_attention(q, k, v, attn_mask)
    torch.testing.assert_close(weights[0], expected, rtol=1e-12, atol=1e-12)
    for w in weights:
        assert w.shape == (2, 4, 11, 11)
        torch.testing.assert_close(w.sum(dim=-1), torch.ones(2, 4, 11, dtype=DOUBLE))
        assert (w.triu(1) == 0).all()  # causal


def test_the_weights_under_a_cache_cover_the_cached_keys():
    model = small_model()
    ids = repeated_tokens(1, 5, 12, generator=torch.Generator().manual_seed(7))
    cache = model.new_cache(1)
    with torch.no_grad():
        model(ids[:, :6], cache=cache)
        _, weights = model(ids[:, 6:], cache=cache, need_weights=True)
        _, full = model(ids, need_weights=True)
    assert weights[1].shape == (1, 4, 5, 11)
    torch.testing.assert_close(weights[1], full[1][:, :, 6:], rtol=1e-10, atol=1e-12)


# -- the lab --------------------------------------------------------------------------------------------------


def tiny_lab(**changes) -> InductionLabConfig:
    values = {
        "vocab_size": 12,
        "n": 5,
        "min_n": 3,
        "steps": 6,
        "batch_size": 4,
        "eval_every": 3,
        "eval_size": 8,
        "seeds": (0, 1),
        "length_factors": (1, 2),
    }
    return InductionLabConfig(**(values | changes))


def tiny_config(lab: InductionLabConfig, num_layers: int = 2) -> DecoderConfig:
    return DecoderConfig(
        vocab_size=lab.vocab_size,
        d_model=8,
        num_heads=2,
        num_layers=num_layers,
        max_len=lab.max_len,
        attention_only=True,
        tie_embeddings=False,
    )


def test_a_training_run_records_the_loss_and_every_heads_scores_at_each_evaluation():
    lab = tiny_lab()
    run = train_induction_model(tiny_config(lab), lab, 0)
    assert run.steps == [0, 3, 6]
    assert len(run.loss) == 3
    assert len(run.train_loss) == 6
    assert run.previous.shape == run.induction.shape == (3, 2, 2)
    assert not run.model.training
    again = train_induction_model(tiny_config(lab), lab, 0)
    assert again.loss == run.loss  # the seed fixes weights and rows
    assert drop_step(run, threshold=100.0) == 0
    assert drop_step(run, threshold=-1.0) is None


def test_the_lab_gives_the_same_numbers_in_one_process_and_in_two():
    lab = tiny_lab()
    configs = [tiny_config(lab, 1), tiny_config(lab, 2)]
    alone = run_induction_lab(configs, lab)
    side_by_side = run_induction_lab(configs, lab, workers=2)
    assert [[scores for _, scores in row] for row in alone] == [[scores for _, scores in row] for row in side_by_side]
    assert [[run.loss for run, _ in row] for row in alone] == [[run.loss for run, _ in row] for row in side_by_side]
    assert len(alone) == 2
    assert all(len(row) == 2 and len(row[0][1]) == 2 for row in alone)


def test_the_copy_loss_and_accuracy_read_the_predictable_half():
    n = 4
    ids = repeated_tokens(3, n, 9, generator=torch.Generator().manual_seed(8))
    logits = torch.zeros(3, 2 * n + 1, 9, dtype=DOUBLE)
    # a perfect copier from position n + 1 on: it predicts the token at t + 1
    for t in range(n + 1, 2 * n):
        logits[torch.arange(3), t, ids[:, t + 1]] = 50.0
    assert copy_accuracy(logits, ids, n) == 1.0
    assert copy_loss(logits, ids, n).shape == (3, n - 1)
    assert copy_loss(logits, ids, n).max() < 1e-12
    uniform = torch.zeros(3, 2 * n + 1, 9, dtype=DOUBLE)
    torch.testing.assert_close(copy_loss(uniform, ids, n), torch.full((3, n - 1), math.log(9), dtype=DOUBLE))
    assert chance_loss(9) == pytest.approx(math.log(8))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"min_n": 6}, "min_n=6 exceeds n=5"),
        ({"vocab_size": 2}, "vocab_size=2 must be >= 3"),
        ({"seeds": ()}, "seeds is empty"),
        ({"learning_rate": 0}, "learning_rate=0 must be a number > 0"),
    ],
)
def test_bad_lab_settings_are_refused_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_lab(**changes)


def test_a_model_of_another_vocabulary_is_refused():
    lab = tiny_lab()
    config = tiny_config(lab).replace(vocab_size=20)
    with pytest.raises(ValueError, match=r"model_config\.vocab_size=20 differs from the lab's vocab_size=12"):
        train_induction_model(config, lab, 0)


# -- the chapter's claims about its trained models, on the numbers the book's build computed ------------------


def _glued(book) -> dict[str, float | str]:
    values = {}
    for key, text in glued_values(book, "induction-heads").items():
        try:
            values[key] = float(text)
        except ValueError:
            values[key] = text.strip("'")
    return values


def _mean(text: str) -> float:
    return float(text.split(" ± ")[0])


@pytest.mark.claim("induction-heads")
@pytest.mark.book
def test_two_layer_models_form_induction_heads_in_a_sudden_drop(book):
    g = _glued(book)
    assert g["induction_num_seeds"] == 5
    chance = g["induction_chance"]
    assert chance == pytest.approx(math.log(g["induction_vocab"] - 1))
    assert g["induction_drop_min"] <= g["induction_drop_mean"] <= g["induction_drop_max"] < g["induction_steps"]
    assert g["induction_fall_max"] <= g["induction_plateau_min"] / 2  # abrupt: a fall far shorter than the plateau
    assert g["induction_final_two_max"] < chance / 4
    assert g["induction_two_accuracy_min"] > 90
    # the heads: low scores on the plateau, one of each kind at the end, in every seed
    assert g["induction_ind_before_max"] < 0.25 < 0.5 < g["induction_ind_after_min"]
    assert g["induction_prev_after_min"] > 2 * g["induction_uniform_previous"]
    for seed in range(5):
        assert g[f"induction_seed{seed}_ind_after"] > g[f"induction_seed{seed}_ind_before"] + 0.4
        assert g[f"induction_seed{seed}_prev_after"] > g[f"induction_seed{seed}_prev_before"]


@pytest.mark.claim("induction-heads")
@pytest.mark.book
def test_the_one_layer_control_never_forms_an_induction_head(book):
    g = _glued(book)
    assert g["induction_control_seeds"] == 3
    assert g["induction_one_ind_max"] < 0.25
    assert g["induction_one_accuracy_max"] < 50
    assert g["induction_best_one_min"] > 4 * g["induction_final_two_max"]


@pytest.mark.claim("induction-heads")
@pytest.mark.book
def test_ablating_the_previous_token_head_or_both_induction_heads_undoes_the_copying(book):
    g = _glued(book)
    chance = g["induction_chance"]
    assert g["induction_single_previous"] >= 3
    assert g["induction_single_best_previous_min"] > chance / 2
    assert g["induction_single_other_first_max"] < 0.25
    assert g["induction_both_second_min"] > 0.9 * chance
    assert _mean(g["induction_ablate_best_induction"]) < _mean(g["induction_ablate_both_second"])
    assert g["induction_other_second_rise_max"] < 0.5


@pytest.mark.claim("induction-heads")
@pytest.mark.book
def test_copying_fails_past_the_training_length_with_every_scheme(book):
    g = _glued(book)
    assert "rotary" in g["induction_learned_schemes"]
    assert _mean(g["induction_len_rotary_1"]) > 80
    assert g["induction_rotary_2"] < 50
    for scheme in ("none", "sinusoidal", "learned", "rotary", "alibi", "t5"):
        assert _mean(g[f"induction_len_{scheme}_8"]) < 60, scheme
    assert g["induction_in_context"] > 2.0
