"""The hf rollout's batched sampler: log-probs, padding, stop rules, sampling filters."""

from __future__ import annotations

import pytest
import torch

from verl_isocompute.cpu.sampler import (
    BatchSampler,
    SamplingParams,
    _filter_top_k_top_p,
    _inverse_cdf,
    sequence_seed,
)


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32, attn_implementation="sdpa")
    # Sharpen the random model so greedy paths are well separated from ties.
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(8.0)
    model.eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_path)


def _prompts(tokenizer):
    texts = ["Calculate 1 + 2.", "Calculate 31 - 17. Put the final answer in \\boxed{}.", "7 * 8"]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True)["input_ids"] for t in texts]


def _teacher_forced_logprobs(model, prompt, response, temperature):
    """What verl's trainer computes: log_softmax(logits / T) of each response token, one unpadded sequence."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def test_logprobs_match_teacher_forced_recomputation(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts = _prompts(tokenizer)  # different lengths: exercises left padding
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    params = SamplingParams(max_tokens=24, temperature=0.6, top_p=0.9, top_k=50, ignore_eos=True)
    outs = sampler.generate(prompts, params, seeds=[0, 1, 2])
    for prompt, out in zip(prompts, outs):
        assert len(out.token_ids) == 24 and out.finish_reason == "length"
        expected = _teacher_forced_logprobs(model, prompt, out.token_ids, 0.6)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4), (out.log_probs, expected)


def test_batched_greedy_equals_unbatched(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts = _prompts(tokenizer)
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    together = sampler.generate(prompts, greedy)
    for prompt, out in zip(prompts, together):
        alone = sampler.generate([prompt], greedy)[0]
        assert out.token_ids == alone.token_ids


def test_greedy_matches_transformers_generate(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompt = _prompts(tokenizer)[1]
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    ours = sampler.generate([prompt], SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))[0]
    ref = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)[0, len(prompt):].tolist()
    assert ours.token_ids == ref


def test_per_sequence_max_tokens_and_eos(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts = _prompts(tokenizer)
    vocab = model.config.vocab_size
    # Every token ends a sequence: each stops after exactly one token, by end-of-sequence.
    outs = BatchSampler(model, list(range(vocab)), tokenizer.pad_token_id).generate(prompts, SamplingParams(max_tokens=9))
    assert [len(o.token_ids) for o in outs] == [1, 1, 1] and {o.finish_reason for o in outs} == {"stop"}
    # Without a reachable end-of-sequence token, each sequence stops at its own limit.
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    outs = sampler.generate(prompts, SamplingParams(max_tokens=9, ignore_eos=True), max_tokens=[3, 5, 9])
    assert [len(o.token_ids) for o in outs] == [3, 5, 9]


def test_seeded_sampling_is_reproducible(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    params = SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True)
    a = sampler.generate(_prompts(tokenizer), params, seeds=[3, 4, 5])
    b = sampler.generate(_prompts(tokenizer), params, seeds=[3, 4, 5])
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    c = sampler.generate(_prompts(tokenizer), params, seeds=[6, 7, 8])
    assert [o.token_ids for o in a] != [o.token_ids for o in c]


def test_a_rows_sample_depends_on_its_seed_not_on_its_batch(model_and_tokenizer):
    """The same prompt and seed in another batch (other prompts, another order, a longer limit beside it, a
    top-k / top-p draw) gives the same tokens: each row draws from its own generator."""
    model, tokenizer = model_and_tokenizer
    first, second, third = _prompts(tokenizer)
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    for params in (SamplingParams(max_tokens=12, temperature=1.0, ignore_eos=True),
                   SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, top_k=40, ignore_eos=True)):
        seeds = [sequence_seed(0, p, 0) for p in (first, second, third)]
        together = sampler.generate([first, second, third], params, seeds=seeds)
        apart = sampler.generate([third, first], params, max_tokens=[12, 12], seeds=[seeds[2], seeds[0]])
        longer_beside = sampler.generate([second, first], params, max_tokens=[30, 12], seeds=[seeds[1], seeds[0]])
        assert apart[1].token_ids == together[0].token_ids == longer_beside[1].token_ids
        assert apart[0].token_ids == together[2].token_ids


def test_sequence_seed_names_prompt_and_index():
    assert sequence_seed(0, [1, 2, 3], 0) == sequence_seed(0, [1, 2, 3], 0)
    seeds = {sequence_seed(0, [1, 2, 3], 0), sequence_seed(0, [1, 2, 3], 1), sequence_seed(1, [1, 2, 3], 0),
             sequence_seed(0, [1, 2, 4], 0), sequence_seed(0, [12, 3], 0)}
    assert len(seeds) == 5 and all(0 <= s < 2**63 for s in seeds)


def test_inverse_cdf_draws_follow_the_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2]])
    picks = [int(_inverse_cdf(probs, torch.tensor([u]))) for u in (0.0, 0.49, 0.5, 0.79, 0.8, 0.999999)]
    assert picks == [0, 0, 2, 2, 3, 3]  # a token of probability 0 is never drawn


def test_top_k_and_top_p_filters():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(_filter_top_k_top_p(logits, top_k=2, top_p=1.0))
    assert kept.tolist() == [[True, True, False, False]]
    # top_p = 0.7: 0.5 alone is short of 0.7, 0.5 + 0.3 reaches it -> keep the first two
    kept = torch.isfinite(_filter_top_k_top_p(logits, top_k=-1, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(_filter_top_k_top_p(logits, top_k=-1, top_p=0.4))
    assert kept.tolist() == [[True, False, False, False]]
