"""The hf rollout server's reproducible sampling: a sample depends on the rollout seed, its prompt and its index
among that prompt's samples, not on the other prompts of the batch nor on the order requests arrive in.

The server runs in-process (no Ray): its ``generate`` is what verl's agent loop awaits, one request per
sample, with ``priority`` the sample's row in the step's batch.
"""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf

P, Q, R = [5, 6, 7], [5, 6, 8], [9, 10, 11, 12]
PARAMS = {"temperature": 1.0, "top_p": 0.95, "max_tokens": 8, "ignore_eos": True}


def _server(model_path, seed: int):
    from verl_isocompute.cpu.hf_rollout import HFRolloutServer

    rollout = OmegaConf.create({"name": "hf", "dtype": "float32", "prompt_length": 16, "response_length": 8,
                                "max_num_seqs": 64, "tensor_model_parallel_size": 1})
    return HFRolloutServer(rollout, OmegaConf.create({"path": str(model_path)}), seed=seed)


async def _wave(server, prompts: list[list[int]], reverse: bool) -> list[list[int]]:
    """One step's requests, ``prompts`` in verl's batch order, arriving in that order or the reverse one;
    token ids per row."""
    calls = [server.generate(p, dict(PARAMS), f"r{i}", priority=i) for i, p in enumerate(prompts)]
    if not reverse:
        return [o.token_ids for o in await asyncio.gather(*calls)]
    return [o.token_ids for o in reversed(await asyncio.gather(*reversed(calls)))]


async def _two_steps(server, first: list[list[int]], second: list[list[int]]):
    a = await _wave(server, first, reverse=True)
    await server.update_weights(dict(server.model.state_dict()))  # a new step (same weights): numbering restarts
    return a, await _wave(server, second, reverse=False)


@pytest.fixture(scope="module")
def runs(tiny_model_path):
    """Two steps on one server, the same two on a fresh server with the same seed, and one with another seed."""
    first, second = [P] * 4 + [Q] * 4, [R] * 4 + [Q] * 4 + [P] * 4  # the second batch: other prompts, other order
    return {seed_run: asyncio.run(_two_steps(_server(tiny_model_path, seed), first, second))
            for seed_run, seed in (("a", 3), ("again", 3), ("other", 4))}


def test_the_same_seed_gives_the_same_rollouts(runs):
    assert runs["a"] == runs["again"]
    assert runs["a"] != runs["other"]


def test_a_prompts_samples_do_not_change_with_its_batch(runs):
    first, second = runs["a"]
    assert second[8:12] == first[0:4]  # P's four samples, in the same order
    assert second[4:8] == first[4:8]  # Q's
    assert len({tuple(t) for t in first[0:4]}) > 1  # each sample of a prompt has its own draws


def test_a_caller_given_sample_number_is_used_and_counts_nothing(tiny_model_path):
    """``sampling_params["seed"]`` (vLLM's per-request key) numbers a sample itself: on a fresh server (a resumed
    curation) sample 5 is sample 5, not the prompt's first sample again, and it leaves the server's count alone."""
    async def go():
        counted = await _wave(_server(tiny_model_path, 3), [P] * 6, reverse=False)
        fresh = _server(tiny_model_path, 3)
        fifth = (await fresh.generate(P, {**PARAMS, "seed": 5}, "c5", priority=0)).token_ids
        first = (await fresh.generate(P, dict(PARAMS), "c0", priority=0)).token_ids
        return counted, fifth, first

    counted, fifth, first = asyncio.run(go())
    assert fifth == counted[5] and first == counted[0] and fifth != first
