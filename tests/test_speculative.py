"""Speculative decoding (tinyformer.models.speculative, TinyDecoder.speculative_generate): the rejection rule's
theorem in float64, the sampled tokens' distribution against the model's by a chi-squared test, greedy output
equal to the model's own and to Hugging Face's assisted generation, the cache's crop, and bad input refused by
name (issue 36, item 4)."""

import copy
import itertools
import math
import re

import pytest
import torch
from decodertools import DOUBLE, decoder, hf_model, llama_config, llama_in_float64, one_thread  # noqa: F401
from transformers import LlamaForCausalLM

from tinyformer.bridges.hf import from_transformers
from tinyformer.models.decoder import TinyDecoder
from tinyformer.models.speculative import (
    SpeculativeOutput,
    accept_drafts,
    expected_tokens_per_pass,
    residual_distribution,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def distributions(seed, shape, *, sharpness=1.0):
    """Random probability vectors over the last dimension, float64, some entries near 0."""
    g = torch.Generator().manual_seed(seed)
    return (sharpness * torch.randn(shape, generator=g, dtype=DOUBLE)).softmax(dim=-1)


def chi_squared_p_value(counts, probs):
    """The chi-squared goodness-of-fit p-value of ``counts`` against ``probs`` (cells with an expected count
    below 5 pooled into one), with the survival function of the chi-squared distribution as the regularised
    upper incomplete gamma function."""
    expected = probs * counts.sum()
    small = expected < 5
    observed = torch.cat((counts[~small], counts[small].sum().reshape(1)))
    expected = torch.cat((expected[~small], expected[small].sum().reshape(1)))
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    statistic = float(((observed - expected) ** 2 / expected).sum())
    dof = observed.numel() - 1
    return float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=DOUBLE), torch.tensor(statistic / 2, dtype=DOUBLE))
    )


class TestTheRule:
    @pytest.mark.parametrize("seed", range(6))
    def test_kept_plus_redrawn_is_p(self, seed):
        """The theorem (Leviathan et al., 2023, Sec. 2.3): a token comes out with probability min(p, q) (kept)
        plus (1 - sum(min(p, q))) times the residual (rejected and redrawn), which is p, for any p and q."""
        p = distributions(seed, (64, 50), sharpness=1 + seed)
        q = distributions(seed + 100, (64, 50), sharpness=3 - seed / 3)
        both = torch.minimum(p, q)
        out = both + (1 - both.sum(-1, keepdim=True)) * residual_distribution(p, q)
        torch.testing.assert_close(out, p, rtol=0, atol=1e-12)

    def test_residual_is_a_distribution_off_the_draft(self):
        p, q = distributions(1, (8, 20)), distributions(2, (8, 20))
        residual = residual_distribution(p, q)
        torch.testing.assert_close(residual.sum(-1), torch.ones(8, dtype=DOUBLE), rtol=0, atol=1e-12)
        assert bool((residual[p <= q] == 0).all())  # never where the draft already covers p
        assert residual.dtype == DOUBLE

    def test_equal_distributions_give_p_not_nan(self):
        p = distributions(3, (4, 10))
        assert torch.equal(residual_distribution(p, p.clone()), p)

    def test_one_hot_distributions_are_greedy(self):
        """At temperature 0 both distributions are one-hot: the draft is kept when it is the model's argmax,
        and a rejected draft is replaced by the model's argmax."""
        eye = torch.eye(5, dtype=DOUBLE)
        p = eye[[2, 4, 1]]
        assert accept_drafts(p, eye[[2, 4]], torch.tensor([2, 4])) == (2, 1)
        assert accept_drafts(p, eye[[2, 3]], torch.tensor([2, 3])) == (1, 4)
        assert accept_drafts(p, eye[[0, 4]], torch.tensor([0, 4])) == (0, 2)

    def test_first_tokens_follow_p(self):
        """20,000 steps of one draft each: the first token out (kept draft or redrawn) is distributed as p[0]
        (chi-squared p-value above 0.001), while the draft's own tokens are not."""
        g = torch.Generator().manual_seed(7)
        p = distributions(4, (2, 12), sharpness=1.5)
        q = distributions(5, (1, 12), sharpness=1.5)
        counts = torch.zeros(12, dtype=DOUBLE)
        drafts = torch.zeros(12, dtype=DOUBLE)
        for _ in range(20_000):
            x = torch.multinomial(q[0], 1, generator=g)
            kept, token = accept_drafts(p, q, x, generator=g)
            counts[int(x) if kept else token] += 1
            drafts[int(x)] += 1
        assert chi_squared_p_value(counts, p[0]) > 1e-3
        assert chi_squared_p_value(drafts, p[0]) < 1e-6  # the test can tell q from p

    @pytest.mark.parametrize(("alpha_sharpness", "gamma"), [(0.5, 1), (1.0, 4), (2.0, 8)])
    def test_tokens_per_pass_follow_equation_1(self, alpha_sharpness, gamma):
        """With the same p and q at every place, each draft is kept with probability alpha = sum(min(p, q)),
        and a pass yields (1 - alpha^(G + 1)) / (1 - alpha) tokens on average (Leviathan et al., Eq. 1)."""
        g = torch.Generator().manual_seed(8)
        p1 = distributions(9, (16,), sharpness=alpha_sharpness)
        q1 = distributions(10, (16,), sharpness=alpha_sharpness)
        alpha = float(torch.minimum(p1, q1).sum())
        p, q = p1.expand(gamma + 1, 16), q1.expand(gamma, 16)
        runs = 4000
        tokens = 0
        for _ in range(runs):
            drafted = torch.multinomial(q, 1, generator=g)[:, 0]
            kept, _ = accept_drafts(p, q, drafted, generator=g)
            tokens += kept + 1
        expected = expected_tokens_per_pass(alpha, gamma)
        # mean of 4000 draws of a variable bounded by G + 1: 5 standard errors at most
        assert abs(tokens / runs - expected) < 5 * (gamma + 1) / 2 / math.sqrt(runs)

    def test_equation_1_at_its_ends(self):
        assert expected_tokens_per_pass(0.0, 4) == 1.0
        assert expected_tokens_per_pass(1.0, 4) == 5.0
        assert expected_tokens_per_pass(0.5, 1) == 1.5
        assert abs(expected_tokens_per_pass(0.999999, 3) - 4) < 1e-4

    @pytest.mark.parametrize(
        ("call", "error", "words"),
        [
            (lambda: residual_distribution([0.5, 0.5], torch.tensor([0.5, 0.5])), TypeError, "p must be"),
            (lambda: residual_distribution(torch.ones(3) / 3, torch.ones(4) / 4), ValueError, "same shape"),
            (lambda: residual_distribution(torch.tensor([0.5, 0.6]), torch.ones(2) / 2), ValueError, "sum to 1"),
            (lambda: residual_distribution(torch.tensor([1.5, -0.5]), torch.ones(2) / 2), ValueError, ">= 0"),
            (lambda: residual_distribution(torch.ones(2) / 2, torch.tensor([float("nan"), 1.0])), ValueError, "finite"),
            (
                lambda: accept_drafts(torch.ones(2, 3) / 3, torch.ones(1, 3) / 3, torch.tensor([0.0])),
                TypeError,
                "drafted",
            ),
            (
                lambda: accept_drafts(torch.ones(2, 3) / 3, torch.ones(2, 3) / 3, torch.tensor([0])),
                ValueError,
                "(G + 1, V)",
            ),
            (
                lambda: accept_drafts(torch.ones(2, 3) / 3, torch.ones(1, 3) / 3, torch.tensor([3])),
                ValueError,
                "[0, V=3)",
            ),
            (
                lambda: accept_drafts(torch.ones(2, 3) / 3, torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([1])),
                ValueError,
                "probability 0 under q",
            ),
            (lambda: expected_tokens_per_pass(1.5, 2), ValueError, "acceptance_rate=1.5"),
            (lambda: expected_tokens_per_pass(0.5, 0), ValueError, "num_draft_tokens"),
        ],
    )
    def test_bad_input_is_refused_by_name(self, call, error, words):
        with pytest.raises(error, match=re.escape(words)):
            call()


SCHEMES = [
    {"positional": "rotary"},
    {"positional": "learned"},
    {"positional": "alibi", "num_kv_heads": 2},
    {"positional": "t5", "num_kv_heads": 1},
    {"positional": "sinusoidal"},
]


class EveryThirdWrong(TinyDecoder):
    """A draft that computes the model's logits and, when the text it has read is a multiple of 3 tokens long,
    shifts them by one token, so its greedy guess is wrong there."""

    def forward(self, input_ids, *, attention_mask=None, cache=None, last_only=False, need_weights=False):
        logits = super().forward(input_ids, attention_mask=attention_mask, cache=cache, last_only=last_only)
        read = attention_mask.size(1) if attention_mask is not None else input_ids.size(1)
        return logits.roll(1, dims=-1) if read % 3 == 0 else logits


def target_and_draft(fields, *, near=0.0):
    """A 2-layer target and a 1-layer draft of the same vocabulary; with ``near`` > 0 the draft is the target
    with noise of that size (relative to each parameter's mean magnitude) added to its weights, so it agrees
    often but not always."""
    target = decoder(seed=11, **fields)
    if near:
        draft = copy.deepcopy(target)
        g = torch.Generator().manual_seed(12)
        with torch.no_grad():
            for p in draft.parameters():
                p.add_(near * p.abs().mean() * torch.randn(p.shape, generator=g, dtype=p.dtype))
        return target, draft
    return target, decoder(seed=13, num_layers=1, d_model=8, num_heads=2, d_ff=12, **fields)


class TestGeneration:
    @pytest.mark.parametrize("fields", SCHEMES, ids=lambda f: f["positional"])
    @pytest.mark.parametrize("gamma", [1, 4, 8])
    @pytest.mark.parametrize("near", [0.0, 0.2], ids=["small draft", "near draft"])
    def test_greedy_output_is_the_models_own(self, fields, gamma, near):
        target, draft = target_and_draft(fields, near=near)
        prompt = torch.randint(0, 30, (1, 5), generator=torch.Generator().manual_seed(gamma))
        expected = target.generate(prompt, 20)
        out = target.speculative_generate(draft, prompt, 20, num_draft_tokens=gamma)
        assert torch.equal(out.sequences, expected)
        assert torch.equal(target.generate(prompt, 20, draft_model=draft, num_draft_tokens=gamma), expected)
        assert sum(out.kept) + out.target_passes == 20
        assert out.draft_passes == sum(out.drafted)

    @pytest.mark.parametrize("fields", SCHEMES, ids=lambda f: f["positional"])
    def test_greedy_output_through_every_outcome_of_a_pass(self, fields):
        """A draft that is the model but wrong at every third token: every outcome of a pass occurs (no draft
        kept, some, all), and the output is the model's own every time."""
        outcomes = set()
        target = decoder(seed=11, **fields)
        draft = EveryThirdWrong(target.config).to(DOUBLE).eval()
        draft.load_state_dict(target.state_dict())
        for gamma, seed in itertools.product((1, 2, 4, 8), range(3)):
            prompt = torch.randint(0, 30, (1, 4 + seed), generator=torch.Generator().manual_seed(seed))
            out = target.speculative_generate(draft, prompt, 24, num_draft_tokens=gamma)
            assert torch.equal(out.sequences, target.generate(prompt, 24)), (gamma, seed)
            outcomes |= {
                "none" if kept == 0 else "all" if kept == drafted else "some"
                for kept, drafted in zip(out.kept, out.drafted, strict=True)
                if drafted
            }
        assert outcomes == {"none", "some", "all"}

    def test_left_padded_prompt(self):
        target, draft = target_and_draft({"positional": "rotary"}, near=0.2)
        prompt = torch.randint(0, 30, (1, 7), generator=torch.Generator().manual_seed(3))
        mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
        expected = target.generate(prompt, 12, attention_mask=mask)
        out = target.speculative_generate(draft, prompt, 12, attention_mask=mask, num_draft_tokens=3)
        assert torch.equal(out.sequences, expected)

    def test_a_draft_equal_to_the_model_is_always_kept(self):
        target, _ = target_and_draft({"positional": "rotary"})
        prompt = torch.zeros(1, 3, dtype=torch.long)
        out = target.speculative_generate(copy.deepcopy(target), prompt, 15, num_draft_tokens=4)
        assert out.acceptance_rate == 1.0
        assert out.drafted == (4, 4, 4)  # 5 + 5 + 5 tokens
        assert out.kept == (4, 4, 4)
        assert out.target_passes == 3
        assert torch.equal(out.sequences, target.generate(prompt, 15))

    @pytest.mark.parametrize("max_new_tokens", [0, 1, 2])
    def test_short_outputs(self, max_new_tokens):
        target, draft = target_and_draft({"positional": "rotary"}, near=0.2)
        prompt = torch.zeros(1, 3, dtype=torch.long)
        out = target.speculative_generate(draft, prompt, max_new_tokens, num_draft_tokens=4)
        assert torch.equal(out.sequences, target.generate(prompt, max_new_tokens))
        assert out.target_passes == (0 if max_new_tokens == 0 else 1)

    def test_sampled_pairs_follow_the_model(self):
        """Sampling at temperature 0.8 with top_k 5: the first two new tokens of 3,000 speculative runs (a
        near draft, two drafts a pass) against the model's own distribution of pairs, P(a) P(b | a),
        computed from its logits (chi-squared p-value above 0.001; the draft's pairs are told apart)."""
        fields = {"positional": "rotary", "vocab_size": 6}
        target, draft = target_and_draft(fields, near=0.2)
        prompt = torch.tensor([[1, 4, 2]])
        temperature, top_k = 0.8, 5

        def pair_distribution(model):
            first = model._probabilities(model(prompt)[0, -1], temperature, top_k)  # (V,)
            after = torch.cat((prompt.expand(6, 3), torch.arange(6)[:, None]), dim=1)  # (V, 4)
            second = model._probabilities(model(after)[:, -1], temperature, top_k)  # (V, V)
            return (first[:, None] * second).reshape(-1)

        with torch.no_grad():
            expected = pair_distribution(target)
            drafts_own = pair_distribution(draft)
        g = torch.Generator().manual_seed(14)
        counts = torch.zeros(36, dtype=DOUBLE)
        for _ in range(3000):
            out = target.speculative_generate(
                draft, prompt, 2, num_draft_tokens=2, temperature=temperature, top_k=top_k, generator=g
            )
            a, b = out.sequences[0, 3:].tolist()
            counts[6 * a + b] += 1
        assert chi_squared_p_value(counts, expected) > 1e-3
        assert chi_squared_p_value(counts, drafts_own) < 1e-6

    def test_bad_input_is_refused_by_name(self):
        target, draft = target_and_draft({"positional": "rotary"})
        prompt = torch.zeros(1, 3, dtype=torch.long)
        with pytest.raises(ValueError, match="draft_model has vocab_size=31 and the model vocab_size=30"):
            target.speculative_generate(decoder(vocab_size=31), prompt, 4)
        with pytest.raises(ValueError, match="num_draft_tokens"):
            target.speculative_generate(draft, prompt, 4, num_draft_tokens=0)
        with pytest.raises(ValueError, match=r"one sequence .* input_ids has 2"):
            target.speculative_generate(draft, prompt.expand(2, 3), 4)
        with pytest.raises(TypeError, match="draft_model must be a TinyDecoder, got Linear"):
            target.speculative_generate(torch.nn.Linear(2, 2), prompt, 4)
        with pytest.raises(ValueError, match="use_cache=False with a draft_model"):
            target.generate(prompt, 4, draft_model=draft, use_cache=False)
        windowed = decoder(sliding_window=4)
        with pytest.raises(ValueError, match="the model has sliding_window=4"):
            windowed.speculative_generate(draft, prompt, 4)
        with pytest.raises(ValueError, match="draft_model has sliding_window=4"):
            target.speculative_generate(windowed, prompt, 4)
        with pytest.raises(ValueError, match="temperature=nan"):
            target.speculative_generate(draft, prompt, 4, temperature=float("nan"))

    def test_output_type(self):
        target, draft = target_and_draft({"positional": "rotary"})
        out = target.speculative_generate(draft, torch.zeros(1, 2, dtype=torch.long), 3)
        assert isinstance(out, SpeculativeOutput)
        assert out.sequences.shape == (1, 5)


class TestCrop:
    def test_a_cropped_cache_continues_as_a_fresh_one(self):
        model = decoder(seed=2, positional="rotary", num_kv_heads=2)
        ids = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(2))
        mask = torch.ones(2, 9, dtype=torch.long)
        mask[1, :2] = 0
        cache = model.new_cache(2)
        with torch.no_grad():
            model(ids, attention_mask=mask, cache=cache)
            cache.crop(6)
            assert (cache.seq_len, cache.num_cached) == (6, 6)
            assert torch.equal(cache.attention_mask, mask[:, :6].bool())
            again = model(ids[:, 6:], attention_mask=mask, cache=cache)
            whole = model(ids, attention_mask=mask)
        torch.testing.assert_close(again, whole[:, 6:], rtol=0, atol=1e-12)

    def test_crop_to_nothing_and_bad_lengths(self):
        model = decoder(seed=2)
        cache = model.new_cache(1)
        with torch.no_grad():
            model(torch.zeros(1, 4, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="seq_len=5 is more than the 4 tokens"):
            cache.crop(5)
        with pytest.raises(ValueError, match="seq_len"):
            cache.crop(-1)
        cache.crop(0)
        assert (cache.seq_len, cache.num_cached, cache.nbytes) == (0, 0, 0)

    def test_a_windowed_cache_is_not_cropped(self):
        model = decoder(seed=2, sliding_window=3)
        cache = model.new_cache(1)
        with torch.no_grad():
            model(torch.zeros(1, 4, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="sliding_window=3 cannot be cropped"):
            cache.crop(2)


@pytest.mark.peer
@pytest.mark.usefixtures("llama_in_float64")
@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_greedy_output_equals_hugging_faces_assisted_generation(gamma):
    """Hugging Face's assisted generation (``generate(assistant_model=...)``, greedy, its draft length fixed at
    gamma) on a Llama pair built from small configs, and the library's speculative decoding on the same weights
    converted: the same tokens, and both the target's own greedy output."""
    theirs = hf_model(LlamaForCausalLM, llama_config(), seed=21)
    their_draft = hf_model(LlamaForCausalLM, llama_config(num_hidden_layers=1, hidden_size=16), seed=22)
    their_draft.generation_config.num_assistant_tokens = gamma
    their_draft.generation_config.num_assistant_tokens_schedule = "constant"
    prompt = torch.randint(3, 40, (1, 6), generator=torch.Generator().manual_seed(gamma))
    with torch.no_grad():
        expected = theirs.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=their_draft)
        plain = theirs.generate(prompt, max_new_tokens=16, do_sample=False)
    ours = from_transformers(theirs).speculative_generate(
        from_transformers(their_draft), prompt, 16, num_draft_tokens=gamma
    )
    assert torch.equal(plain, expected)
    assert torch.equal(ours.sequences, expected)
