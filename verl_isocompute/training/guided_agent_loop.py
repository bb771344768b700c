"""The agent loop of the ``assistant`` placement (PrefixRL, arXiv 2601.18795): continue a given assistant turn.

A guided row's prompt ends with an assistant message holding the oracle prefix
(:func:`verl_isocompute.guided.placement.assistant_turn`) and names this loop in its ``agent_name`` column,
so verl picks it per sample; unguided rows of the same batch keep verl's ``single_turn_agent``.

verl's single-turn loop renders the messages with the generation prompt and samples the response; its
prompt/response split is what the trainer turns into ``prompts``/``responses`` and ``response_mask``. This
loop changes only the rendering: the messages *before* the prefix are rendered exactly as for an unguided
row (verl's Continuous Token builder, generation prompt included), then the prefix's tokens are appended to
those *prompt* ids. The policy's sample continues the assistant turn, and everything after the split is
its own: the prefix never enters ``responses``, ``response_mask``, the loss, the old/reference log-probs or
the TIS weights. (The chat template's ``continue_final_message`` would render the same text, but through a
separate code path than verl's builder for unguided rows; appending keeps guided = unguided prompt + prefix.)

The prefix is tokenised alone (no special tokens, :func:`~verl_isocompute.guided.check.prefix_token_ids`, which
the trainer's run-time check uses too), or, for PrefixRL's token cut of a trace, its kept token ids
(``extra_info.guide_prefix_ids``) are appended as they are, never re-tokenised. Prefixes end at a line boundary
(:mod:`verl_isocompute.guided.prefixes`), where tokenisers do not merge across, so these are the tokens the
prefix has inside the full solution. The reward sees the response only (the continuation), which is where
the final answer of a capped prefix is.
"""

from __future__ import annotations

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from verl_isocompute.guided.check import prefix_token_ids
from verl_isocompute.rules.names import PREFIX_AGENT


def continuation_prompt_ids(prompt_ids: list[int], prefix: str, tokenizer, prefix_ids=None) -> list[int]:
    """The prompt of the assistant placement: the unguided prompt's ids, then the prefix's own token ids (no
    special tokens, :func:`~verl_isocompute.guided.check.prefix_token_ids`), or ``prefix_ids`` as given (a token
    cut's kept ids). Training (this loop) and the prefix search (:mod:`verl_isocompute.workflow.prefix_search`)
    both build it here, so the search measures exactly the prompts training sees, and the trainer's run-time
    check tokenises the prefix the same way."""
    ids = prefix_ids if prefix_ids is not None and len(prefix_ids) else prefix_token_ids(tokenizer, prefix)
    return [int(t) for t in prompt_ids] + [int(t) for t in ids]


@register(PREFIX_AGENT)
class PrefixContinuationAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop, continuing the prompt's final assistant message instead of opening a new one."""

    async def run(self, sampling_params, **kwargs):
        info = kwargs.get("extra_info")
        self._prefix_ids = info.get("guide_prefix_ids") if isinstance(info, dict) else None  # a token cut's kept ids
        return await super().run(sampling_params, **kwargs)

    async def ct_build_initial_tokens(self, messages: list[dict], tools: list[dict] | None = None, **mm) -> list[int]:
        if not messages or messages[-1].get("role") != "assistant":
            raise ValueError(
                f"agent_name={PREFIX_AGENT} needs a prompt ending with the assistant message to continue "
                f"(got role {messages[-1].get('role') if messages else None!r}); write the dataset with "
                "verl_isocompute.guided.placement (placement='assistant')"
            )
        prompt_ids = await super().ct_build_initial_tokens(messages[:-1], tools=tools, **mm)
        ids = continuation_prompt_ids(prompt_ids, messages[-1]["content"], self.tokenizer, getattr(self, "_prefix_ids", None))
        return self._cap_text_prompt_length(ids)
