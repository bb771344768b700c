"""docs/GUIDED.md's CPU walkthrough, run as written: generated worked problems -> curate -> prefix-search ->
the guided recipe with ``+platform=cpu`` (tiny model; three real starts of verl's machinery).

The block is read from the page and run by bash unchanged, in a fresh directory. Checked on what it leaves:
the Hard set keeps its worked solutions; the search sampled every problem's ladder with the prompts the run
sends; the run trained on every guided row it made (the run-log header's mixture, counted on the dataset
verl built, equals the mixture file: with the CPU overlay's old 96-token prompts verl dropped them all); the
spend of curation and of the search is counted on the training problems only (curation: 4 samples per
training problem, by hand; the validation problems' are not counted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from doc_snippets import snippet

pytestmark = pytest.mark.e2e
DOC = Path(__file__).parent.parent / "docs" / "GUIDED.md"
K = 4


def walkthrough() -> str:
    """The walkthrough's bash block of docs/GUIDED.md (its marker names this test)."""
    found = snippet("guided-walkthrough")
    assert found.doc == DOC, found.id
    return found.text


@pytest.fixture(scope="module")
def walked(tmp_path_factory, isocompute_cache, tiny_model_path) -> Path:
    cwd = tmp_path_factory.mktemp("walkthrough")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", walkthrough()], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return cwd / "runs" / "guided-walkthrough"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_curation_gives_a_hard_set_with_worked_solutions(walked):
    train = pd.read_parquet(walked / "curated" / "sets" / "hard" / "train.parquet")
    val = pd.read_parquet(walked / "curated" / "sets" / "hard" / "val.parquet")
    assert (len(train), len(val)) == (20, 4)  # the tiny model solves nothing: all 24 are Hard
    assert all("\\boxed{" in info["solution"] for info in train["extra_info"])


def test_the_search_covered_every_training_problem(walked):
    table = pd.read_parquet(walked / "prefixes" / "prefixes.parquet")
    assert len(table) == 20 and set(table["status"]) <= {"chosen", "exhausted"}
    records = _jsonl(walked / "prefixes" / "rungs.jsonl")
    assert {r["id"] for r in records} == set(table["problem_id"])


def test_the_run_trained_every_guided_row_it_made_and_counts_the_spend_on_its_problems(walked):
    header, *rows = _jsonl(walked / "run" / "isocompute.jsonl")
    header = header["header"]
    made = pd.read_parquet(walked / "run" / "guided" / "train.parquet")
    guided = sum(bool(i["guided"]) for i in made["extra_info"])
    assert guided == 20 and header["dataset_size"] == len(made) == 40
    assert header["guided_mixture"]["guided"] == guided and header["guided_mixture"]["unguided"] == 20
    trained = [r for r in rows if r["step"] >= 1]  # step 0: the validation before training
    assert len(trained) == 2 and all(r["isocompute/guided_rows"] > 0 for r in trained)  # guided rows in every step
    records = _jsonl(walked / "prefixes" / "rungs.jsonl")
    assert header["spend_problems"] == 20
    assert header["guidance_spend"]["curation"]["rollouts"] == 20 * K  # not the 4 validation problems' 16
    assert header["guidance_spend"]["prefix_search"]["rollouts"] == K * len(records)
    for r in rows:
        assert r["rollouts_with_guidance"] == r["rollouts"] + K * len(records)
        assert r["rollouts_with_curation"] == r["rollouts_with_guidance"] + 20 * K
