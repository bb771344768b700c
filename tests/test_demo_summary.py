"""What `isocompute demo` prints at the end: validation avg@k with standard errors, the paired change in words
(within noise or not), and the training reward of each step, from the run's own files (hand-computed cases).
No trend is drawn from the training reward: 4 steps, each a mean over problems of its own, support none."""

import json

import pytest

from verl_isocompute.commands import demo


def _write_run(run_dir, before, after, rewards, k=4):
    """A finished demo run's files: verl's metrics, our run log, the validation dumps, hydra's config."""
    (run_dir / "validation").mkdir(parents=True)
    for step, per_problem in ((0, before), (len(rewards), after)):
        with open(run_dir / "validation" / f"{step}.jsonl", "w") as fh:
            for prompt, correct in per_problem.items():
                for i in range(k):
                    fh.write(json.dumps({"input": prompt, "output": "x", "score": float(i < correct), "acc": i < correct,
                                         "step": step}) + "\n")
    rows = [{"step": 0, "data": {"val-core/a/acc/mean@4": sum(before.values()) / (k * len(before))}}]
    rows += [{"step": s, "data": {"timing_s/step": 30.0, "critic/score/mean": r}} for s, r in enumerate(rewards, 1)]
    rows[-1]["data"]["val-core/a/acc/mean@4"] = sum(after.values()) / (k * len(after))
    (run_dir / "verl_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "isocompute.jsonl").write_text(json.dumps({"header": {}}) + "\n" + json.dumps(
        {"step": len(rewards), "rollouts": 32 * len(rewards), "b_problem": 8}) + "\n")
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text(
        f"data: {{train_batch_size: 8}}\nactor_rollout_ref: {{rollout: {{n: 4, val_kwargs: {{n: {k}}}}}}}\n")


def test_a_drop_on_eight_problems_is_called_noise(tmp_path):
    # The README's old demo ending, 0.062 -> 0.031 on 8 problems x 4: correct samples per problem before/after.
    before = {"p0": 1, "p1": 1, "p2": 0, "p3": 0, "p4": 0, "p5": 0, "p6": 0, "p7": 0}
    after = {"p0": 0, "p1": 1, "p2": 0, "p3": 0, "p4": 0, "p5": 0, "p6": 0, "p7": 0}
    _write_run(tmp_path, before, after, [0.10, 0.20, 0.05, 0.15])
    s = demo.summarize(tmp_path, 200.0)
    # before: avg@4 per problem 1/4, 1/4, 0 x 6: mean 1/16, sample std sqrt((2 (3/16)^2 + 6 (1/16)^2) / 7) = 0.1157
    assert s["val_before"] == pytest.approx(1 / 16) and s["val_after"] == pytest.approx(1 / 32)
    assert s["val_before_se"] == pytest.approx((2 * (3 / 16) ** 2 + 6 * (1 / 16) ** 2) ** 0.5 / 7 ** 0.5 / 8 ** 0.5)
    # paired differences: -1/4 on p0, 0 elsewhere -> mean -1/32, SE = sqrt(((7/32)^2 + 7 (1/32)^2) / 7) / sqrt(8) = 1/32
    assert s["val_change"] == pytest.approx(-1 / 32) and s["val_change_se"] == pytest.approx(1 / 32)
    assert s["val_problems"] == 8 and s["val_k"] == 4
    text = demo.format_summary(s)
    assert "validation avg@4 (8 problems x 4 samples, ± standard error over problems): 0.062 ± 0.041 -> 0.031 ± 0.031" in text
    assert "change: -0.031 ± 0.031 (paired SE over 8 problems): within noise" in text
    assert s["train_reward"] == [0.10, 0.20, 0.05, 0.15] and s["train_problems_per_step"] == 8
    assert "training reward by step: 0.10 0.20 0.05 0.15   (each step on 8 problems of its own; too few" in text
    assert "see docs/EVIDENCE.md" in text and "rollouts: 128" in text


def test_a_change_beyond_noise_says_so(tmp_path):
    # 16 problems: 12 gain two correct samples of 4 (+1/2), 4 stay (0): mean +3/8; SE = sqrt(3/64 * 16/15) / 4
    before = {f"p{i}": 1 for i in range(16)}
    after = {f"p{i}": 3 if i < 12 else 1 for i in range(16)}
    _write_run(tmp_path, before, after, [0.1, 0.2, 0.3, 0.4, 0.5])
    s = demo.summarize(tmp_path, 100.0)
    se = (3 / 64 * 16 / 15) ** 0.5 / 4
    assert s["val_change"] == pytest.approx(3 / 8) and s["val_change_se"] == pytest.approx(se)
    text = demo.format_summary(s)
    assert f"up by {3 / 8 / se:.1f} SE, more than noise" in text  # 6.7 SE


@pytest.mark.parametrize("rewards", [[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.1, 0.4, 0.2, 0.3]])
def test_the_training_reward_is_reported_per_step_never_as_a_trend(tmp_path, rewards):
    """Issue 46: 4 steps of 8 problems each (sampling noise about ±0.1 a step) were read as "falling" by a fitted
    slope whose SE ignored that noise. Whatever their order, the steps are printed as they are and no direction
    is claimed; the validation change (with its paired SE) stays the one judged."""
    _write_run(tmp_path, {"p0": 1, "p1": 2}, {"p0": 1, "p1": 2}, rewards)
    text = demo.format_summary(demo.summarize(tmp_path, 10.0))
    (line,) = [x for x in text.splitlines() if x.startswith("training reward by step:")]
    assert line.startswith("training reward by step: " + " ".join(f"{r:.2f}" for r in rewards))
    assert not any(word in text for word in ("trend:", "rising", "falling", "per step:"))


def test_without_a_validation_before_training_there_is_no_change_to_judge(tmp_path):
    _write_run(tmp_path, {"p0": 1, "p1": 2}, {"p0": 1, "p1": 2}, [0.1, 0.2])
    (tmp_path / "validation" / "0.jsonl").unlink()
    s = demo.summarize(tmp_path, 10.0)
    assert s["val_change"] is None and s["val_verdict"] is None
    assert "change:" not in demo.format_summary(s)


def test_the_summary_reads_b_problem_as_the_run_resolved_it(tmp_path):
    """hydra's saved config keeps the recipe's interpolations (the allocation's B_problem, resolved by our resolvers,
    which the demo's own process does not load): the summary reads the run log, never that config's value."""
    _write_run(tmp_path, {"p0": 1, "p1": 2}, {"p0": 1, "p1": 2}, [0.1, 0.2])
    (tmp_path / ".hydra" / "config.yaml").write_text(  # as hydra saves it under the allocation piece
        "data:\n  train_batch_size: ${isocompute.allocation:b_problem,8}\n"
        "actor_rollout_ref:\n  rollout:\n    n: 4\n    val_kwargs:\n      n: 4\n")
    summary = demo.summarize(tmp_path, 10.0)
    assert summary["train_problems_per_step"] == 8
    assert "each step on 8 problems of its own" in demo.format_summary(summary)
