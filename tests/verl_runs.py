"""Launch a real verl run through `python -m verl_isocompute.main` and read what it wrote (for e2e tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
PARITY_REWARD = f"reward.custom_reward_function.path={FIXTURES / 'parity_reward.py'}"


@dataclass
class Run:
    run_dir: Path
    stdout: str

    def _jsonl(self, name: str) -> list[dict]:
        return [json.loads(line) for line in (self.run_dir / name).read_text().splitlines() if line.strip()]

    @property
    def verl_rows(self) -> list[dict]:
        """verl's own metrics, one dict per logged step: {"step": s, "data": {...}}."""
        return self._jsonl("verl_metrics.jsonl")

    @property
    def train_rows(self) -> list[dict]:
        return [r for r in self.verl_rows if "timing_s/step" in r["data"]]

    @property
    def run_log(self) -> list[dict]:
        """Our run log (isocompute.jsonl), header first."""
        return self._jsonl("isocompute.jsonl")


def run_recipe(recipe: str, run_dir: Path, *overrides: str, timeout: int = 900, env: dict | None = None) -> Run:
    """Run ``recipe`` on CPU with the tiny model; fail the test with the run's output on a non-zero exit.
    ``env``: extra environment variables for the run (and its Ray workers, which inherit them)."""
    cmd = [sys.executable, "-m", "verl_isocompute.main", "--config-name", recipe, *overrides, f"isocompute.run_dir={run_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return Run(run_dir, proc.stdout)


def alive(procs) -> list:
    """The processes of ``procs`` still running (zombies and vanished ones left out): what a stop left behind."""
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out
