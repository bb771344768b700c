"""``isocompute.guided``: turn a recipe's training files into a guided mixture before verl reads them.

With ``isocompute.guided.enable=true`` the training parquet files are mixed with guided copies of their
problems (:func:`verl_isocompute.guided.placement.guided_dataset`) into ``<run_dir>/guided/train.parquet``,
which becomes ``data.train_files``. Validation files are never touched: validation measures the unguided
problems, POPE's transfer measure (arXiv 2601.18779). The same options drive ``isocompute guide``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from verl_isocompute.guided.placement import USER, GuidedDataset, guided_dataset
from verl_isocompute.guided.prefixes import DEFAULT_MAX_FRACTION


@dataclass(frozen=True)
class GuideOptions:
    """How guided rows are made (the keys of ``isocompute.guided`` besides ``enable``)."""

    solution_key: str = "extra_info.solution"  # column, or dotted path into one, holding the oracle solution
    placement: str = USER  # user (POPE, arXiv 2601.18779) | assistant (PrefixRL, arXiv 2601.18795)
    ratio: float = 1.0  # guided rows per unguided row; POPE mixes 1:1
    fraction: float = DEFAULT_MAX_FRACTION  # prefix length asked for, as a share of the solution's characters
    max_fraction: float = DEFAULT_MAX_FRACTION  # cap on the prefix share; POPE keeps it around 1/4
    seed: int = 0  # which problems are guided when ratio < 1
    prefixes: str | None = None  # a prefix-search output dir (or its prefixes.parquet): per-problem prefixes instead of fraction

    def build(self, frame) -> GuidedDataset:
        options = asdict(self)
        path = options.pop("prefixes")
        if path:
            from verl_isocompute.guided.prefix_search import read_chosen

            options["searched"] = read_chosen(path, self.placement)
        return guided_dataset(frame, **options)


def read_frames(paths: list[str]):
    import pandas as pd

    return pd.concat([pd.read_parquet(os.path.expanduser(p)) for p in paths], ignore_index=True)


def write_mixture(paths: list[str], out: Path, options: GuideOptions) -> GuidedDataset:
    """Guided mixture of the problems in ``paths`` written atomically to ``out``."""
    from verl_isocompute import atomic

    result = options.build(read_frames(paths))
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(out) as tmp:
        result.frame.to_parquet(tmp, index=False)
    return result


def prepare_guided(cfg) -> GuidedDataset | None:
    """Apply ``isocompute.guided`` to ``cfg`` (after the data is resolved); None when it is off.

    Raises ValueError naming the key when an option is bad or when no problem got a prefix (a wrong
    ``solution_key`` is the usual cause: every row is then counted as ``missing``)."""
    from omegaconf import OmegaConf, open_dict

    block = OmegaConf.select(cfg, "isocompute.guided", default=None)
    if block is None or not block.get("enable", False):
        return None
    known = {f.name for f in fields(GuideOptions)}
    unknown = set(block) - known - {"enable"}
    if unknown:
        raise ValueError(f"isocompute.guided: unknown key(s) {sorted(unknown)}; known: enable, {', '.join(sorted(known))}")
    options = GuideOptions(**{k: v for k, v in OmegaConf.to_container(block, resolve=True).items() if k != "enable"})
    value = OmegaConf.select(cfg, "data.train_files")
    paths = [str(p) for p in value] if OmegaConf.is_list(value) else [str(value)]
    out = Path(os.path.expanduser(str(cfg.isocompute.run_dir))).absolute() / "guided" / "train.parquet"
    try:
        result = write_mixture(paths, out, options)
    except ValueError as exc:
        raise ValueError(f"isocompute.guided: {exc}") from None
    if result.guided == 0 and options.prefixes:
        raise ValueError(f"isocompute.guided: no training problem has a searched prefix in isocompute.guided.prefixes="
                         f"{options.prefixes} ({result.summary()}); run isocompute prefix-search on these training files")
    if result.guided == 0:
        raise ValueError(
            f"isocompute.guided: no training problem has a usable prefix at isocompute.guided.solution_key="
            f"{options.solution_key} ({result.summary()}); point solution_key at the oracle solution column"
        )
    print(f"isocompute: guided training set {out}: {result.summary()}", flush=True)
    with open_dict(cfg):
        cfg.data.train_files = str(out)
    return result
