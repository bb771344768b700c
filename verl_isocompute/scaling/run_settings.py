"""n and B_problem of each run, for logs that do not carry them (verl's file logger, tensorboard, CSVs).

The fit needs one n and one B_problem per run (arXiv 2603.12151, section 4: C = B_problem * n * steps, and
one curve per n). Where each comes from, first match wins (:meth:`RunSettings.resolve`):

1. **the log**: our run log's ``n`` / ``b_problem`` columns, a CSV's config columns, or our trainer's
   ``isocompute/n`` and ``isocompute/b_problem`` in verl's loggers (file, tensorboard, wandb), which it
   logs every step with the values the run resolved;
2. **the header**: our run log's header line, a wandb run's config;
3. **a run table** (``isocompute fit --run-table FILE``): a CSV with columns ``run``, ``n``, ``b_problem`` or
   a YAML mapping ``run: {n: 16, b_problem: 32}`` (or a list of such rows), for logs from elsewhere. ``run``
   is the run's name as the fit shows it, its last path component (a tensorboard run: the experiment name)
   or, after a ``:``, a wandb run's name or a CSV's run column. A row that matches no run is an error (a
   typo would otherwise fall through to another source), so is a row that matches several runs (one setting
   silently applied to runs that may differ) and a row that contradicts the log; when no source says a run's
   n, the error says what the table lacked for it (:meth:`RunTable.lacks`);
4. ``--n`` / ``--b-problem``: one value for every run still without one;
5. **the run's hydra config file** (``.hydra/config.yaml``: ``actor_rollout_ref.rollout.n``,
   ``data.train_batch_size``): next to the log or in a parent directory; for a tensorboard run in verl's
   default place ``tensorboard_log/<project>/<experiment>``, the record of the run with that project and
   experiment name under the directory holding ``tensorboard_log`` (``runs/<experiment>/.hydra``, hydra's
   ``outputs/<date>/<time>/.hydra``). Hydra saves the config unresolved: our recipes write n and B_problem
   as interpolations (``${isocompute.allocation:n,16}``), which are resolved here as the run resolved them
   when the recorded allocation is off (the default after the comma; ``${isocompute.on_cpu:A,B}`` by the
   recorded platform; ``${a.b}`` by the key it names). With the allocation on, the run decided n from its
   budget at start: only the log (1) or a run table (3) can say;
6. **the run's name** (``..._n16_bp32``, ``n=16-b_problem=32``).

Pure: no verl, no torch.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verl_isocompute import verl_keys
from verl_isocompute.numeric import yaml_bool
from verl_isocompute.runlog import metric_key
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.run_table import RunTable, positive_int

# Where verl's config keeps n and B_problem.
CONFIG_KEYS = {"n": verl_keys.N, "b_problem": verl_keys.B_PROBLEM}
FLAGS = {"n": "--n", "b_problem": "--b-problem"}
TENSORBOARD_ROOT = "tensorboard_log"  # verl's tensorboard logger: tensorboard_log/<project>/<experiment>
HYDRA_CONFIG = Path(".hydra") / "config.yaml"
# Run names such as "easy_n16_bp32" or "n=16-b_problem=32" carry the sweep cell.
NAME_PATTERNS = {
    "n": re.compile(r"(?:^|[^a-z0-9])n[_=-]?(\d+)(?![0-9])", re.IGNORECASE),
    "b_problem": re.compile(r"(?:^|[^a-z0-9])(?:bp|b_problem|bproblem|b)[_=-]?(\d+)(?![0-9])", re.IGNORECASE),
}


# --- hydra config files ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """What a hydra config file says about one key: ``value`` (an int), or ``why`` it cannot say."""

    path: Path
    value: int | None = None
    why: str = ""


_CALL = re.compile(r"^\$\{([\w.]+):(.*)\}$", re.DOTALL)
_REFERENCE = re.compile(r"^\$\{([\w.]+)\}$")


def recorded_value(config: dict, dotted: str, depth: int = 0) -> tuple[Any, str]:
    """``dotted`` in a hydra config file, with the interpolations our recipes write resolved as the run resolved
    them (see the module docstring); (value, "") or (None, why not)."""
    raw = _select(config, dotted)
    return _evaluate(config, raw, dotted, depth)


def _evaluate(config: dict, raw: Any, dotted: str, depth: int) -> tuple[Any, str]:
    if depth > 8:
        return None, f"{dotted} is a chain of interpolations too deep to follow"
    if not isinstance(raw, str) or "${" not in raw:
        return raw, ""
    text = raw.strip()
    reference = _REFERENCE.match(text)
    if reference:
        return recorded_value(config, reference.group(1), depth + 1)
    call = _CALL.match(text)
    if not call:
        return None, f"{dotted} is recorded as {raw!r}"
    name, args = call.group(1), _split_args(call.group(2))
    if name == "isocompute.allocation":
        if yaml_bool(_select(config, "isocompute.allocation.enable") or False):  # as the run read it
            return None, f"{dotted} is recorded as {raw!r}, decided by the allocation at run start"
        if len(args) < 2:
            return None, f"{dotted} is recorded as {raw!r} with the allocation off"
        return _evaluate(config, _literal(args[1]), dotted, depth + 1)
    if name == "isocompute.on_cpu" and len(args) == 2:
        on_cpu = _select(config, "isocompute.platform") == "cpu"
        return _evaluate(config, _literal(args[1] if on_cpu else args[0]), dotted, depth + 1)
    return None, f"{dotted} is recorded as {raw!r}"


def _split_args(text: str) -> list[str]:
    """Resolver arguments split at the commas outside nested ``${...}``."""
    args, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        depth += char == "{"
        depth -= char == "}"
        current += char
    return [*args, current.strip()]


def _literal(text: str) -> Any:
    if "${" in text:
        return text
    try:
        return int(text)
    except ValueError:
        return None if text in ("null", "None") else text


def _select(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


@functools.lru_cache(maxsize=4096)
def _load_record(path: str) -> dict | None:
    import yaml

    try:
        loaded = yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return loaded if isinstance(loaded, dict) else None


def read_record(path: Path, key: str) -> Recorded:
    config = _load_record(str(path))
    if config is None:
        return Recorded(path, why=f"{path} is not readable YAML")
    value, why = recorded_value(config, CONFIG_KEYS[key])
    number = positive_int(value) if value is not None and not isinstance(value, str) else None
    if number is None:
        return Recorded(path, why=f"{path}: {why or f'{CONFIG_KEYS[key]} is {value!r}'}")
    return Recorded(path, number)


# --- runs with more than one n ---------------------------------------------------------------------------

# What our trainer's run-log header records of the n schedule and of per-prompt n (training/adaptive_config.py),
# and the per-step metrics per-prompt n logs (group_n_min / group_n_max, in our run log and verl's loggers alike).
SCHEDULE_HEADER, PER_PROMPT_HEADER = "schedule", "per_prompt_n"
LEAVE_OUT = ("leave it out of RUNS: fit the fixed-n runs, and compare it with them at equal C instead "
             "(benchmarks/bench_adaptive.py)")


def check_one_n(name: str, header: dict[str, Any], columns: dict[str, np.ndarray]) -> None:
    """Refuse a per-prompt-n run (``isocompute.per_prompt_n``): its groups have n_i rollouts each, split by pass
    rate around the step's n, so no per-n curve describes it (arXiv 2603.12151 fits one curve per n, every group
    of a run with n rollouts). A schedule run is refused in :meth:`RunSettings.resolve`, when its n changed."""
    low, high = (columns.get(metric_key(k)) for k in ("group_n_min", "group_n_max"))
    if header.get(PER_PROMPT_HEADER) is None and (low is None or np.isnan(low).all()):
        return
    split = ""
    if low is not None and high is not None and not np.isnan(low).all():
        split = f": n_i from {np.nanmin(low):g} to {np.nanmax(high):g}"
    raise ScalingError(f"{name}: a per-prompt-n run (isocompute.per_prompt_n{split}): its groups differ in n, and a "
                       f"per-n curve needs every group of a run at one n; {LEAVE_OUT}")


# --- one run -------------------------------------------------------------------------------------------


class RunSettings:
    """Settles n and B_problem of every run of one load (caches the hydra config files it searched)."""

    def __init__(self, n: int | None = None, b_problem: int | None = None, table: RunTable | None = None) -> None:
        self.overrides = {"n": n, "b_problem": b_problem}
        self.table = table
        self._by_experiment: dict[str, list[tuple[Path, dict]]] = {}

    def resolve(self, name: str, path: Path, root: Path | None, fmt: str, logged: np.ndarray | None,
                steps: np.ndarray, header: dict[str, Any], key: str, notes) -> tuple[int, str]:
        """(value, source) of ``key`` for one run; ``logged``: the key's column in the log (NaN: not logged)."""
        flag, override = FLAGS[key], self.overrides[key]
        row = self.table.lookup(name) if self.table is not None else None
        from_table = row[1].get(key) if row else None
        mask = ~np.isnan(logged) if logged is not None else np.zeros(len(steps), dtype=bool)
        logged, logged_steps = (logged[mask], steps[mask]) if logged is not None else (np.array([]), steps[:0])
        if len(logged):
            if np.any(logged != logged[0]):
                at = int(np.flatnonzero(logged != logged[0])[0])
                changed = (f"{name}: {key} changes mid-run ({logged[0]:g} at step {logged_steps[0]:g}, "
                           f"{logged[at]:g} at step {logged_steps[at]:g})")
                if header.get(SCHEDULE_HEADER) is not None:
                    raise ScalingError(f"{changed}: an n-schedule run (isocompute.schedule) has no one n, and a per-n "
                                       f"curve needs one n per run; {LEAVE_OUT}")
                raise ScalingError(f"{changed}; a per-n curve needs one {key} per run from step 0: keep only the "
                                   f"steps before the change, or leave the run out of RUNS")
            value, source = logged[0], "log"
            if key == "n" and header.get(SCHEDULE_HEADER) is not None:
                notes.add(f"an n-schedule run whose n stayed {logged[0]:g}: fitted as a fixed-n run", name)
        elif header.get(key) is not None:
            value, source = header[key], "header"
        elif from_table is not None:
            value, source = from_table, "run table"
        elif override is not None:
            value, source = override, flag
        else:
            value, source, tried = self._from_record_or_name(name, path, root, fmt, key)
            if value is None and self.table is not None:
                raise ScalingError(f"{name}: the log does not say {key}{tried}, and {self.table.lacks(name, key)} "
                                   f"(or pass {flag}, one value for every run)")
            if value is None:
                raise ScalingError(
                    f"{name}: the log does not say {key}{tried}; pass --run-table FILE (a CSV run,n,b_problem or "
                    f"a YAML run: {{n, b_problem}}), {flag} (one value for every run), or name the run like '..._n16_bp32'"
                )
            notes.add(f"{key} not in the log, taken from the {source}", name)
        number = positive_int(value)
        if number is None:
            raise ScalingError(f"{name}: {key} must be a positive integer, got {value!r}")
        if from_table is not None and source != "run table" and from_table != number:
            raise ScalingError(
                f"{self.table.where[row[0]]}: {key}={from_table} for {name!r}, but its {source} says {key}={number}; "
                "fix the run table"
            )
        if override is not None and source != flag and float(override) != number:
            notes.add(f"{flag} {override} ignored: the {source} says {key}={number}", name)
        return number, source

    def _from_record_or_name(self, name: str, path: Path, root: Path | None, fmt: str, key: str):
        tried = ""
        records = self._records_near(path, root, fmt)
        for record in records:
            found = read_record(record, key)
            if found.value is not None:
                return found.value, ".hydra/config.yaml", ""
            tried = f" and {found.why}"
        if not records and fmt == "tensorboard" and _experiment_of(path) is not None:
            project, experiment = _experiment_of(path)
            tried = f" and no hydra config file of project {project!r}, experiment {experiment!r} was found next to {TENSORBOARD_ROOT}"
        value = _from_name(name, key)
        if value is not None:
            return value, "run name", ""
        return None, "", tried

    def _records_near(self, path: Path, root: Path | None, fmt: str) -> list[Path]:
        """The hydra config file of this run: next to the log or in a parent (up to ``root``), or for a tensorboard run
        under ``tensorboard_log/<project>/<experiment>``, the records that name that project and experiment."""
        folder = path if path.is_dir() else path.parent
        stop = (root or folder).resolve()
        for _ in range(4):
            if (folder / HYDRA_CONFIG).is_file():
                return [folder / HYDRA_CONFIG]
            if folder.resolve() == stop or folder.parent == folder:
                break
            folder = folder.parent
        located = _experiment_of(path) if fmt == "tensorboard" else None
        if located is None:
            return []
        project, experiment = located
        launch = (path if path.is_dir() else path.parent).resolve().parents[2]
        matches = [rec for rec, cfg in self._experiments(launch).get(experiment, [])
                   if recorded_value(cfg, "trainer.project_name")[0] in (None, project)]
        settings = {tuple(read_record(m, key).value for key in CONFIG_KEYS) for m in matches}
        return matches[:1] if len(settings) <= 1 else self._ambiguous(path, matches)

    def _experiments(self, launch: Path) -> dict[str, list[tuple[Path, dict]]]:
        """experiment name -> the hydra config files under ``launch`` (up to 3 levels: runs/<exp>, outputs/<date>/<time>)."""
        cached = self._by_experiment.get(str(launch))
        if cached is not None:
            return cached
        found: dict[str, list[tuple[Path, dict]]] = {}
        for pattern in ("*/.hydra/config.yaml", "*/*/.hydra/config.yaml", "*/*/*/.hydra/config.yaml"):
            for record in sorted(launch.glob(pattern)):
                if TENSORBOARD_ROOT in record.parts[len(launch.parts):]:
                    continue
                config = _load_record(str(record))
                experiment = recorded_value(config, "trainer.experiment_name")[0] if config else None  # may be ours: ${...}
                if isinstance(experiment, str):
                    found.setdefault(experiment, []).append((record, config))
        self._by_experiment[str(launch)] = found
        return found

    @staticmethod
    def _ambiguous(path: Path, records: list[Path]) -> list[Path]:
        shown = ", ".join(str(r.parent.parent) for r in records[:3])
        raise ScalingError(
            f"{path}: several hydra config files name its experiment with different settings ({shown}); "
            "pass --run-table FILE to say which n and b_problem the run used"
        )


def _experiment_of(path: Path) -> tuple[str, str] | None:
    """(project, experiment) of a tensorboard run in verl's default place, else None."""
    folder = (path if path.is_dir() else path.parent).resolve()
    parts = folder.parts
    if len(parts) >= 3 and parts[-3] == TENSORBOARD_ROOT:
        return parts[-2], parts[-1]
    return None


def _from_name(name: str, key: str) -> int | None:
    for part in reversed(re.split(r"[/\\:]", name)):
        match = NAME_PATTERNS[key].search(part)
        if match:
            return int(match.group(1))
    return None
