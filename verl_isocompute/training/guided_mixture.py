"""``isocompute.guided``: turn a recipe's training files into a guided mixture before verl reads them.

With ``isocompute.guided.enable=true`` the training parquet files are mixed with guided copies of their
problems (:func:`verl_isocompute.guided.placement.guided_dataset`) into ``<run_dir>/guided/train.parquet``,
which becomes ``data.train_files``: by our entry point before Ray starts, or, through verl's stock
``main_ppo``, by our trainer before verl builds its datasets (:func:`prepare_guided` is applied once: a config
already pointing at the mixture is left alone). The prefixes are cut from the ``solution_key`` column
(oracle solutions, POPE) or, with ``traces`` set to a curation directory, from the base model's correct
responses that ``isocompute curate --keep-correct`` kept there (PrefixRL, :mod:`verl_isocompute.guided.traces`),
at line ends or, with ``cut=tokens``, after h kept token ids; or each problem gets the prefix an
``isocompute prefix-search`` chose (``prefixes``). ``copies``, ``originals`` and ``ratio`` shape the mixture
(:func:`verl_isocompute.guided.placement.guided_dataset`). The same options drive ``isocompute guide``; a
mixture without any guided row is refused by both (:func:`no_guided_rows`).

Validation measures the unguided problems, POPE's transfer measure (arXiv 2601.18779): validation files are
never transformed, and one holding guided rows is refused (:func:`check_validation_files`).

``isocompute.guided.spend`` lists the spend files (or their directories) of the guided data the run trains
on (:mod:`verl_isocompute.guided.spend`): rollouts spent before training on curation, rejection sampling
and the prefix search, counted on the training problems only, which the run log adds to C for PrefixRL's
comparison (arXiv 2601.18795). What else is checked before training: :mod:`verl_isocompute.training.guided_training_set`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from verl_isocompute import _compat
from verl_isocompute.guided import spend
from verl_isocompute.guided.placement import (
    ALL,
    ASSISTANT,
    FRACTION,
    ORIGINALS,
    PLACEMENTS,
    SKIP,
    UNSEARCHED,
    USER,
    GuidedDataset,
    guided_dataset,
)
from verl_isocompute.guided.prefixes import DEFAULT_MAX_FRACTION
from verl_isocompute.numeric import yaml_bool
from verl_isocompute.settings import check_mapping, setting
from verl_isocompute.training.conf import files

# Keys of isocompute.guided that are not GuideConfig (how rows are made).
ENABLE, SPEND = "enable", "spend"
TEXT, TOKENS = "text", "tokens"  # where a trace is cut: at line / sentence ends, or after h kept token ids
CUTS = (TEXT, TOKENS)


# The settings classes' one suffix (0.2): the old name works for one release.
__getattr__ = _compat.moved_names(__name__, {}, renamed={"GuideOptions": "GuideConfig"})


@dataclass(frozen=True)
class GuideConfig:
    """How guided rows are made (the keys of ``isocompute.guided`` besides ``enable`` and ``spend``), each with its
    help text (``isocompute guide --help`` is built from them)."""

    solution_key: str = setting("extra_info.solution", "column (or dotted path into one) with the oracle solution")
    placement: str | None = setting(
        None, "user: POPE's user-turn prefix (arXiv 2601.18779); assistant: PrefixRL's assistant-turn prefix "
        "(arXiv 2601.18795)", default_help="default user; assistant with traces; the search's own with prefixes",
        choices=PLACEMENTS,
    )
    ratio: float = setting(1.0, "share of the problems with a usable prefix to guide, in (0, 1]; POPE guides every hard problem",
                           above=0, maximum=1)
    fraction: float = setting(
        DEFAULT_MAX_FRACTION, "prefix length as a share of the solution's characters, cut at a line/sentence end",
        above=0, maximum=1,
    )
    max_fraction: float = setting(DEFAULT_MAX_FRACTION, "cap on the prefix share; POPE keeps it around a quarter",
                                  above=0, maximum=1)
    seed: int = setting(0, "which problems are guided when ratio < 1", minimum=0)
    traces: str | None = setting(
        None, "cut the prefixes from the base model's correct responses that `isocompute curate --keep-correct --out "
        "CURATE_OUT` kept (PrefixRL; the shortest usable one per problem) instead of the solution key",
    )
    prefixes: str | None = setting(
        None, "an `isocompute prefix-search` output dir (or its prefixes.parquet): each problem gets its searched "
        "prefix, problems without one are skipped", default_help="default: the fixed fraction",
    )
    copies: int = setting(1, "guided rows per guided problem, at evenly spread prefix lengths up to the fraction "
                             "(PrefixRL varies the prefix length h; POPE: 1)", minimum=1)
    originals: str = setting(ALL, "unguided originals kept: all, prefixed (only the guided problems': POPE's 1:1 over "
                                  "the problems with a prefix), none (PrefixRL: prefixed problems only)",
                                  choices=ORIGINALS)
    cut: str = setting(TEXT, "with traces: text (cut at line / sentence ends) or tokens (the first h kept token ids of "
                             "the trace; assistant placement)", choices=CUTS)
    unsearched: str = setting(SKIP, "with prefixes: a problem the search found no prefix for gets no guided copy (skip) "
                                    "or one at the fixed fraction (fraction)", choices=UNSEARCHED)

    def build(self, frame) -> GuidedDataset:
        """The guided mixture of ``frame``. Placement ``None`` means: the prefix search's own placement with
        ``prefixes``, ``assistant`` (PrefixRL) with ``traces``, else ``user`` (POPE). Raises ValueError when no
        guided row comes out (:func:`no_guided_rows`)."""
        options = asdict(self)
        traces, prefixes, placement, cut = options.pop("traces"), options.pop("prefixes"), options.pop("placement"), options.pop("cut")
        if cut not in CUTS:
            raise ValueError(f"cut={cut!r}: use text (line / sentence ends) or tokens (the kept token ids of traces)")
        if traces and prefixes:
            raise ValueError("traces and prefixes are two sources of prefixes: give one (a search of traces: "
                             "isocompute prefix-search --traces, then prefixes)")
        if cut == TOKENS and not traces:
            raise ValueError("cut=tokens cuts the kept token ids of traces: give traces (a curate --keep-correct directory)")
        if prefixes:
            from verl_isocompute.guided.search_tables import read_chosen, searched_placement

            placement = placement or searched_placement(prefixes) or USER
            options["searched"] = read_chosen(prefixes, placement)
        elif traces and cut == TOKENS:
            options["token_cuts"] = trace_token_cuts(frame, traces, self.fraction, self.max_fraction, self.copies)
        elif traces:
            options["solutions"] = trace_solutions(frame, traces, self.max_fraction)
        result = guided_dataset(frame, placement=placement or (ASSISTANT if traces else USER), **options)
        if result.guided == 0:
            raise ValueError(no_guided_rows(self, result))
        return result


def no_guided_rows(options: GuideConfig, result: GuidedDataset) -> str:
    """Why a mixture has no guided row, naming the option to fix (the command's flag, the recipe's key)."""
    if options.traces:
        return (f"no problem has a usable trace in traces={options.traces} ({result.summary()}); curate these problems "
                "there with `isocompute curate --keep-correct [--pass-k K]`")
    if options.prefixes:
        return (f"no problem has a searched prefix in prefixes={options.prefixes} ({result.summary()}); run isocompute "
                "prefix-search on these training files" + ("" if options.unsearched == FRACTION else
                                                         ", or guide the problems it found none for at the fixed fraction "
                                                         "(unsearched=fraction, --unsearched fraction)"))
    return (f"no problem has a usable prefix at solution_key={options.solution_key} ({result.summary()}); point "
            "solution_key (--solution-key) at the oracle solution column")


def _chosen_traces(frame, traces: str, usable) -> list[dict | None]:
    """Per row, the problem's chosen trace line (:func:`verl_isocompute.guided.traces.choose_trace`), or None."""
    from verl_isocompute.data.problems import row_problem_id
    from verl_isocompute.guided.traces import by_problem, choose_trace, read_traces, traces_path

    kept = by_problem(read_traces(traces), traces_path(traces))
    return [choose_trace(kept.get(row_problem_id(row), []), usable) for row in frame.to_dict("records")]


def trace_solutions(frame, traces: str, max_fraction: float) -> list[str | None]:
    """Per row, the text of the problem's chosen trace (:func:`verl_isocompute.guided.traces.choose_trace`), or None.

    A row is matched to its traces by curation's problem id (prompt messages + ground truth), so any file holding
    the curated problems works (the curated sets, a mixture, the user's own copy). Raises TracesError (a
    ValueError naming the file and the fix) when the traces file is missing or unreadable."""
    from verl_isocompute.guided.prefixes import skip_reason

    chosen = _chosen_traces(frame, traces, lambda trace: skip_reason(trace["text"], max_fraction) is None)
    return [None if trace is None else trace["text"] for trace in chosen]


def traces_tokenizer(traces: str):
    """The tokenizer of the model that sampled a curation's traces (its ``curation.json``), whose ids they are."""
    import json

    from transformers import AutoTokenizer

    from verl_isocompute.guided.traces import TracesError, traces_path

    settings = traces_path(traces).parent / "curation.json"
    try:
        model = json.loads(settings.read_text())["model"]
        return AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TracesError(f"{settings}: cannot load the tokenizer of the model that sampled the traces ({exc}); token "
                          "cuts decode the kept ids with it: keep the curation directory with its model, or use cut=text") from None


def trace_token_cuts(frame, traces: str, fraction: float, max_fraction: float, copies: int) -> list:
    """Per row, PrefixRL's token cuts of the problem's shortest usable trace
    (:func:`verl_isocompute.guided.prefixes.token_prefixes`: the first h kept token ids, ``copies`` lengths up to
    ``fraction``), or the reason there are none. The text of each cut is decoded with the tokenizer of the model
    that sampled the traces (``curation.json``'s model), which must be the policy's (the ids are appended as
    they are)."""
    from verl_isocompute.guided.prefixes import token_prefixes

    chosen = _chosen_traces(frame, traces, lambda trace: isinstance(token_prefixes(trace["token_ids"], fraction, max_fraction), list))
    if all(trace is None for trace in chosen):
        return [None] * len(chosen)
    tokenizer = traces_tokenizer(traces)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    return [None if trace is None else token_prefixes(trace["token_ids"], fraction, max_fraction, copies, decode)
            for trace in chosen]


def read_frames(paths: list[str]):
    import pandas as pd

    return pd.concat([pd.read_parquet(os.path.expanduser(p)) for p in paths], ignore_index=True)


def write_mixture(paths: list[str], out: Path, options: GuideConfig) -> GuidedDataset:
    """Guided mixture of the problems in ``paths`` written atomically to ``out``; nothing is written when it
    would hold no guided row (ValueError naming the option)."""
    from verl_isocompute import atomic

    result = options.build(read_frames(paths))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_parquet(out, result.frame)
    return result


def guided_block(cfg) -> dict:
    """``isocompute.guided`` as a plain dict (``{}`` when the config has none)."""
    from omegaconf import OmegaConf

    block = OmegaConf.select(cfg, "isocompute.guided", default=None)
    return OmegaConf.to_container(block, resolve=True) if block is not None else {}


def spend_locations(block: dict) -> list[str]:
    """Where the spend files of the guided data are, from the ``isocompute.guided`` block: the ``spend`` key
    (a spend.json file or its directory, or a list of them), plus, when guidance is on, the spend files of the
    ``traces`` directory (curation and rejection sampling found those traces) and of the ``prefixes`` search
    (it sampled every rung it tried), where they exist: PrefixRL's comparison counts them (arXiv 2601.18795).
    The one place that collects them."""
    value = block.get(SPEND) or []
    locations = [str(value)] if isinstance(value, (str, os.PathLike)) else [str(v) for v in value]
    if yaml_bool(block.get(ENABLE, False)):
        for source in (block.get("traces"), block.get("prefixes")):
            if not source:
                continue
            where = Path(os.path.expanduser(str(source)))
            where = where.parent if where.is_file() else where  # prefixes may name the search's prefixes.parquet
            if spend.path_of(where).is_file():
                locations.append(str(where))
    return locations


def guidance_spend(cfg, problems=None) -> dict[str, spend.Spend]:
    """Per-stage rollouts and tokens spent before training on the guided data (``isocompute.guided.spend``);
    with ``problems`` (problem ids: :func:`verl_isocompute.training.guided_training_set.training_problems`), only the spend
    on those problems.

    Raises ValueError naming a listed location that holds no spend file (or no per-problem spend)."""
    locations = spend_locations(guided_block(cfg))
    for where in locations:
        if not spend.path_of(where).is_file():
            raise ValueError(
                f"isocompute.guided.spend: {where} holds no {spend.SPEND}; list the spend.json files (or their "
                "directories) written by the tools that made the guided data, or drop the entry"
            )
    try:
        return spend.total(locations, problems)
    except spend.SpendError as exc:
        raise ValueError(f"isocompute.guided.spend: {exc}") from None


def guided_rows(path: str) -> int:
    """Rows of a parquet file marked ``extra_info.guided`` true (0 for a file without the mark)."""
    import pyarrow.parquet as pq

    if "extra_info" not in pq.read_schema(os.path.expanduser(path)).names:
        return 0
    infos = pq.read_table(os.path.expanduser(path), columns=["extra_info"]).column("extra_info").to_pylist()
    return sum(1 for info in infos if isinstance(info, dict) and info.get("guided"))


def check_validation_files(cfg) -> None:
    """Validation is on the unguided problems only (POPE's back-generalisation measure, arXiv 2601.18779):
    a ``data.val_files`` file with guided rows is a ValueError naming it and the fix. Remote paths are verl's."""
    for path in files(cfg, "data.val_files"):
        if "://" in path or not Path(os.path.expanduser(path)).is_file():
            continue
        count = guided_rows(path)
        if count:
            raise ValueError(
                f"data.val_files: {path} holds {count} guided rows (extra_info.guided true); validation measures "
                "the unguided problems: pass the original file (guide only data.train_files, or isocompute.guided.enable=true)"
            )


def mixture_path(cfg) -> Path:
    """Where the guided mixture of a run is written: ``<run_dir>/guided/train.parquet``."""
    return Path(os.path.expanduser(str(cfg.isocompute.run_dir))).absolute() / "guided" / "train.parquet"


def prepare_guided(cfg) -> GuidedDataset | None:
    """Apply ``isocompute.guided`` to ``cfg`` (after the data is resolved); None when it is off, or when
    ``data.train_files`` already is the run's mixture (applied by our entry point, now seen by the trainer).

    Raises ValueError naming the key when an option is bad or when no problem got a prefix (a wrong
    ``solution_key`` is the usual cause: every row is then counted as ``missing``)."""
    from omegaconf import open_dict

    block = guided_block(cfg)  # its keys and types checked before Ray by the schema (training/schema.py)
    if not yaml_bool(block.get(ENABLE, False)):
        return None
    known = {f.name for f in fields(GuideConfig)}
    # read as the schema reads it (copies=2.0 is 2), whoever calls: our entry point or the trainer under main_ppo
    options = check_mapping({k: v for k, v in block.items() if k in known}, GuideConfig, "isocompute.guided")
    paths = files(cfg, "data.train_files")
    out = mixture_path(cfg)
    if paths == [str(out)]:
        return None
    try:
        result = write_mixture(paths, out, options)
    except ValueError as exc:
        raise ValueError(f"isocompute.guided: {exc}") from None
    print(f"isocompute: guided training set {out}: {result.summary()}", flush=True)
    with open_dict(cfg):
        cfg.data.train_files = str(out)
    return result
