"""What more seeds buy the n* sweep's registered rule (docs/EVIDENCE.md section 4, registration 6).

The rule reads Delta(s) = D_q4(s) - D_q1(s) per seed and its two-sided 95 % t interval over the seeds (see
``evidence_rules.nstar_verdict``). Taking the per-seed spread of Delta from the committed runs
(``tests/fixtures/nstar_cpu``; ``--upto-seed 4``: the five seeds registration 6 was planned from), this prints,
for a number of seeds per arm:

- the interval's width at the observed SD (2 t SD / sqrt(seeds));
- the chance that the interval comes out narrower than the 0.10 the rule needs for "n* stays put", first with
  the observed SD taken as the truth, then over the SD's own uncertainty (seeds - 1 degrees of freedom: the SD drawn
  from its posterior under a flat prior on log sigma, then a sample SD of that many seeds);
- the power to read a true Delta of -0.05 as "rises" (interval wholly below 0), the same two ways.

    python benchmarks/nstar_power.py                    # seeds 5, 9, 11, 14 from the committed fixture
    python benchmarks/nstar_power.py --upto-seed 4      # from seeds 0-4 only, as registration 6 was planned
    python benchmarks/nstar_power.py --seeds 11 --from tests/fixtures/nstar_cpu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evidence_rules import NARROW, nstar_verdict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DRAWS = 200_000


def seed_deltas(sweep_dir: Path, upto_seed: int | None = None) -> np.ndarray:
    """Delta(s) of every seed both arms finished (up to seed ``upto_seed``), as the registered rule computes it."""
    verdict = nstar_verdict(sweep_dir)
    runs = verdict["runs"]
    seeds = [s for s in verdict["seeds"] if upto_seed is None or s <= upto_seed]
    return np.array([(runs[f"n2-s{s}"]["q4"] - runs[f"n8-s{s}"]["q4"]) - (runs[f"n2-s{s}"]["q1"] - runs[f"n8-s{s}"]["q1"])
                     for s in seeds])


def power_table(sd: float, df: int, seeds: list[int], effect: float = -0.05, seed: int = 0) -> list[dict]:
    """Width, P(width < NARROW) and power against ``effect`` for each number of seeds (module docstring)."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    sigma2 = df * sd**2 / rng.chisquare(df, DRAWS)  # the SD's uncertainty: its posterior given df and sd
    rows = []
    for count in seeds:
        t = float(stats.t.ppf(0.975, count - 1))
        narrow_var = (NARROW * np.sqrt(count) / (2 * t)) ** 2  # width < NARROW  <=>  sample variance below this
        sample_var = sigma2 * rng.chisquare(count - 1, DRAWS) / (count - 1)
        mean = effect + np.sqrt(sigma2 / count) * rng.standard_normal(DRAWS)
        rows.append({
            "seeds": count,
            "width": 2 * t * sd / np.sqrt(count),
            "p_narrow": float(stats.chi2.cdf((count - 1) * narrow_var / sd**2, count - 1)),
            "p_narrow_uncertain_sd": float(np.mean(sample_var < narrow_var)),
            "power": float(1 - stats.nct.cdf(t, count - 1, -effect / (sd / np.sqrt(count)))),
            "power_uncertain_sd": float(np.mean(mean + t * np.sqrt(sample_var / count) < 0)),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nstar_power", description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", type=Path, default=ROOT / "tests" / "fixtures" / "nstar_cpu",
                        help="a sweep directory with cells/ (default: the committed fixture)")
    parser.add_argument("--upto-seed", type=int, default=None, metavar="S",
                        help="use seeds 0..S only (4: the five seeds registration 6 was planned from)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 9, 11, 14], help="seeds per arm to evaluate")
    args = parser.parse_args(argv)
    if min(args.seeds) < 2:
        parser.error("--seeds: each count must be at least 2 (a t interval needs two seeds)")
    deltas = seed_deltas(args.source, args.upto_seed)
    if len(deltas) < 2:
        parser.error(f"{args.source}: {len(deltas)} seed(s) both arms finished (up to --upto-seed); the SD needs two")
    from scipy import stats

    sd, df = float(deltas.std(ddof=1)), len(deltas) - 1
    low, high = (float(np.sqrt(df * sd**2 / stats.chi2.ppf(q, df))) for q in (0.975, 0.025))
    print(f"Delta per seed {np.round(deltas, 4).tolist()}: SD {sd:.3f} over {len(deltas)} seeds "
          f"(95% range of sigma {low:.3f}-{high:.3f}, {df} df)")
    print(f"{'seeds':>5}  {'width':>6}  {'P(w<0.10)':>9}  {'(SD uncertain)':>14}  {'power@-0.05':>11}  {'(SD uncertain)':>14}")
    for row in power_table(sd, df, args.seeds):
        print(f"{row['seeds']:>5}  {row['width']:>6.3f}  {row['p_narrow']:>9.2f}  {row['p_narrow_uncertain_sd']:>14.2f}"
              f"  {row['power']:>11.2f}  {row['power_uncertain_sd']:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
