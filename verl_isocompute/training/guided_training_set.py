"""What a guided run trains on, checked before it starts: every guided row reaches training, as made.

Run by our entry point before Ray starts and by our trainer before verl builds its datasets (so also under
verl's own ``main_ppo``), after ``isocompute.guided`` made the mixture, on whatever ``data.train_files`` is:

- :func:`check_guided_lengths`: verl drops (``data.filter_overlong_prompts``) or, without the filter, its agent
  loop left-truncates every prompt longer than ``data.max_prompt_length`` (:mod:`verl_isocompute.guided.lengths`).
  Guided prompts are longer than their problems, and an overlay that sets a short length for its own data (the
  CPU overlay: 96 tokens) silently turned a guided run into an unguided one. A training set with guided rows
  that would not reach training as made stops the run with one line naming ``data.max_prompt_length``, the
  number of such rows and the length that keeps them, whatever config set the length;
- :func:`training_problems`: the ids of the problems the run trains on (each row's ``extra_info.problem_id``,
  written by the guided mixture for its guided copies, or the row's own id), which the guided data's spend is
  restricted to (:func:`verl_isocompute.guided.spend.total`).
"""

from __future__ import annotations

import os
from pathlib import Path

from verl_isocompute import verl_keys
from verl_isocompute.data.problems import row_problem_id
from verl_isocompute.training.conf import files


def _local_train_files(cfg) -> list[str] | None:
    paths = [os.path.expanduser(p) for p in files(cfg, verl_keys.TRAIN_FILES)]
    if any("://" in p or not Path(p).is_file() for p in paths):
        return None  # remote files are verl's to fetch: nothing to read here
    return paths


def _rows(paths: list[str], columns: list[str]) -> list[dict]:
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for path in paths:
        present = [c for c in columns if c in pq.read_schema(path).names]
        rows += pq.read_table(path, columns=present).to_pylist()
    return rows


def training_problems(cfg) -> set[str] | None:
    """The problem ids of ``data.train_files`` (None for remote files, or when no spend file is listed: nothing
    to restrict): ``extra_info.problem_id`` where the guided mixture wrote it (a guided copy's prompt is not its
    problem's), else the row's own id."""
    from verl_isocompute.training.guided_mixture import guided_block, spend_locations

    paths = _local_train_files(cfg)
    if paths is None or not spend_locations(guided_block(cfg)):
        return None
    out = set()
    for row in _rows(paths, ["prompt", "reward_model", "extra_info"]):
        info = row.get("extra_info")
        pid = info.get("problem_id") if isinstance(info, dict) else None
        pid = pid or row_problem_id(row)
        if pid:
            out.add(pid)
    return out


def check_guided_lengths(cfg) -> None:
    """ValueError (one line) when guided rows of ``data.train_files`` would be dropped by verl's prompt filter
    or, with the filter off, cut by its agent loop; nothing for a training set without guided rows."""
    from omegaconf import OmegaConf

    from verl_isocompute.guided.lengths import overlong
    from verl_isocompute.training.guided_mixture import guided_rows

    paths = _local_train_files(cfg)
    if paths is None or not any(guided_rows(p) for p in paths):
        return
    filtered = bool(OmegaConf.select(cfg, "data.filter_overlong_prompts", default=True))
    key = "data.max_prompt_length" if filtered else "actor_rollout_ref.rollout.prompt_length"
    limit = int(OmegaConf.select(cfg, key, default=None) or OmegaConf.select(cfg, "data.max_prompt_length"))
    prompt_key = str(OmegaConf.select(cfg, "data.prompt_key", default="prompt") or "prompt")
    kwargs = OmegaConf.select(cfg, "data.apply_chat_template_kwargs", default=None)
    kwargs = OmegaConf.to_container(kwargs, resolve=True) if kwargs is not None else {}
    rows = [{**row, "prompt": row[prompt_key]} for row in _rows(paths, [prompt_key, "extra_info"])]
    found = overlong(rows, _tokenizer(cfg), limit, kwargs, filtered)
    if found.count:
        what = ("verl's filter_overlong_prompts would drop" if filtered else
                "verl's agent loop would left-truncate (data.filter_overlong_prompts is off)")
        raise ValueError(
            f"data.max_prompt_length={limit} is too short for the guided rows: {what} {found.count} of the {found.rows} "
            f"guided rows of data.train_files (the longest has {found.longest} tokens as verl measures it); set "
            f"data.max_prompt_length={found.longest} or more, or shorten the prefixes (isocompute.guided.max_fraction)"
        )


def _tokenizer(cfg):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    model = cfg.actor_rollout_ref.model
    return AutoTokenizer.from_pretrained(os.path.expanduser(str(model.path)),
                                         trust_remote_code=bool(OmegaConf.select(model, "trust_remote_code", default=False)))
