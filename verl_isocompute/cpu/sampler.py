"""Batched token-in / token-out sampling with a HF transformers causal LM (no verl, no Ray here).

One call samples a whole batch of prompts together: prompts are left-padded into one tensor, the prompt
is run once to fill the KV cache, and then every step feeds one token per sequence. Each sequence has
its own stop rule (end-of-sequence token or its own ``max_tokens``); the batch ends when all have
stopped. This is what ``model.generate`` does, without its per-step generality, and it also returns
the log-probability of every sampled token, which ``generate`` does not give cheaply.

Reproducible samples. A sample's random draws depend only on its own seed (:func:`sequence_seed`: the
rollout seed, the prompt's token ids and the sample's index among the requests for that prompt), never on
which other prompts share its batch or in which order requests arrived: each row gets its own generator and
draws one uniform number per token (all of them up front, as many as its own ``max_tokens``), and the token
is the one where that number falls in the cumulative distribution (inverse-CDF sampling, exact for the
filtered softmax). Only the logits depend on the batch, through the float rounding of padded matmuls: a
draw that falls within that rounding of a boundary between two tokens could differ.

Log-probabilities follow verl's trainer exactly, so that the rollout / trainer mismatch verl reports
(``training/rollout_probs_diff_*``) measures numerics only: the log-prob of the sampled token under
``log_softmax(logits / temperature)`` over the full vocabulary, i.e. before top-k / top-p truncation
(verl recomputes log-probs the same way). Greedy decoding (temperature 0) reports log-probs of the raw
logits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings (the subset of vLLM's that verl's agent loop sends)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    ignore_eos: bool = False

    @property
    def group_key(self) -> tuple[float, float, int]:
        """Requests with equal keys can share one batch (same logit processing)."""
        return (float(self.temperature), float(self.top_p), int(self.top_k))


@dataclass
class SampleOutput:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (end-of-sequence token) or "length"


def _filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside the top-k set and outside the smallest set with probability mass >= top_p."""
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # drop a token when the mass strictly before it already reaches top_p (keeps at least one)
        drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, sorted_idx, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sequence_seed(seed: int, prompt_ids: Sequence[int], index: int) -> int:
    """The seed of one sample's random draws: a hash of the rollout seed, the prompt's token ids and the
    sample's index among the samples of that prompt (0 .. n-1), so the same three give the same sample."""
    blob = b"%d|%s|%d" % (int(seed), ",".join(map(str, prompt_ids)).encode(), int(index))
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1  # torch takes seeds below 2**63


def _uniforms(seeds: Sequence[int] | None, limits: list[int], steps: int) -> torch.Tensor:
    """(batch, steps) uniform draws in [0, 1): row i from its own generator seeded ``seeds[i]``, as many as its
    own limit (so the draws never depend on the batch's longest limit); torch's global generator without seeds."""
    if seeds is None:
        return torch.rand(len(limits), steps)
    draws = torch.zeros(len(limits), steps)
    for i, (seed, limit) in enumerate(zip(seeds, limits, strict=True)):
        draws[i, :limit] = torch.rand(limit, generator=torch.Generator().manual_seed(int(seed)))
    return draws


def _inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Per row, the token whose cumulative probability interval holds ``uniform`` (a token of probability 0
    is never picked)."""
    cdf = probs.cumsum(dim=-1)
    target = (uniform.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)  # scaled by the sum, which rounding leaves near 1
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def _sample(scaled: torch.Tensor, top_k: int, top_p: float, uniform: torch.Tensor) -> torch.Tensor:
    """Draw one token per row from softmax(scaled) restricted by top-k / top-p, row i at ``uniform[i]``.

    With top-k set, the draw happens among the k best tokens only (gathered first), which gives the same
    distribution as masking the full vocabulary but sorts and samples k values instead of the vocabulary.
    """
    if top_k is not None and 0 < top_k < scaled.shape[-1]:
        values, indices = torch.topk(scaled, top_k, dim=-1)
        values = _filter_top_k_top_p(values, -1, top_p)
        pick = _inverse_cdf(torch.softmax(values, dim=-1), uniform)
        return indices.gather(-1, pick[:, None]).squeeze(-1)
    filtered = _filter_top_k_top_p(scaled, -1, top_p)
    return _inverse_cdf(torch.softmax(filtered, dim=-1), uniform)


class BatchSampler:
    """Samples continuations for a batch of token-id prompts with one HF causal LM."""

    def __init__(self, model: torch.nn.Module, eos_token_ids: list[int], pad_token_id: int) -> None:
        self.model = model
        self.eos_token_ids = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long)
        self.pad_token_id = int(pad_token_id)

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        max_tokens: list[int] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[SampleOutput]:
        """Sample one continuation per prompt; all prompts share ``params`` except ``max_tokens``. ``seeds``: one
        per prompt (:func:`sequence_seed`), which alone decides that row's draws (the module docstring)."""
        if not prompts:
            return []
        limits = torch.tensor(max_tokens if max_tokens is not None else [params.max_tokens] * len(prompts))
        device = next(self.model.parameters()).device
        batch, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch, width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[i, width - len(prompt) :] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

        # Only the last position's logits are needed from the prompt pass; computing the LM head over
        # every prompt position costs as much as several decode steps on a large vocabulary.
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        past = out.past_key_values
        next_logits = out.logits[:, -1, :].float()
        next_position = position_ids[:, -1:] + 1

        steps = int(limits.max())
        tokens = torch.full((batch, steps), self.pad_token_id, dtype=torch.long)
        logps = torch.zeros((batch, steps), dtype=torch.float32)
        lengths = torch.zeros(batch, dtype=torch.long)
        done = torch.zeros(batch, dtype=torch.bool)
        hit_eos = torch.zeros(batch, dtype=torch.bool)
        eos = self.eos_token_ids.to(device)
        greedy = params.temperature <= 0
        uniforms = None if greedy else _uniforms(seeds, limits.tolist(), steps)

        for step in range(steps):
            scaled = next_logits if greedy else next_logits / params.temperature
            log_probs = torch.log_softmax(scaled, dim=-1)
            if greedy:
                chosen = scaled.argmax(dim=-1)
            else:
                chosen = _sample(scaled, params.top_k, params.top_p, uniforms[:, step])
            chosen_logp = log_probs.gather(-1, chosen[:, None]).squeeze(-1)

            active = ~done
            tokens[active, step] = chosen[active].cpu()
            logps[active, step] = chosen_logp[active].cpu()
            lengths[active] += 1
            if not params.ignore_eos:
                is_eos = torch.isin(chosen.cpu(), eos.cpu()) & active
                hit_eos |= is_eos
                done |= is_eos
            done |= lengths >= limits
            if bool(done.all()):
                break
            # Stopped sequences keep decoding a pad token (their outputs are discarded); the batch shape
            # stays fixed so the KV cache needs no re-indexing.
            feed = torch.where(done.to(device), torch.full_like(chosen, self.pad_token_id), chosen)
            attention_mask = torch.cat([attention_mask, torch.ones((batch, 1), dtype=attention_mask.dtype, device=device)], dim=-1)
            out = self.model(
                input_ids=feed[:, None],
                attention_mask=attention_mask,
                position_ids=next_position,
                past_key_values=past,
                use_cache=True,
            )
            past = out.past_key_values
            next_logits = out.logits[:, -1, :].float()
            next_position = next_position + 1

        return [
            SampleOutput(
                token_ids=tokens[i, : lengths[i]].tolist(),
                log_probs=logps[i, : lengths[i]].tolist(),
                finish_reason="stop" if bool(hit_eos[i]) else "length",
            )
            for i in range(batch)
        ]
