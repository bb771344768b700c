"""Coverage of the fit's 95 % per-n reward intervals on known-truth sweeps (issue 43, item 2).

For every case of :data:`verl_isocompute.scaling.calibration.CASES` (rising, flat, exact tie, late crossing,
unequal run lengths, 1 / 3 / 5 / 10 seeds, a curve at the fit's bounds), fits ``--datasets`` noisy datasets and
counts how many of the 95 % intervals of each n's reward at C = 256, 448 and 900 rollouts held the true R_n(C); prints
coverage per case and pooled (goal: pooled >= 93 %, no case below 88 %), and the same for the multiplier's 95 %
intervals where the true curves give one. A case with one seed gives no interval, by design: its row counts the
intervals withheld. The last three lines (issue 43 item 3): on how many datasets the flat case reads flat and the
rising cases read rising, beside how many a direct test on the same data (a one-sided Welch t test on the runs'
last-quarter means) finds n = 8 ahead at the end: what the data can tell.

    python benchmarks/bench_calibration.py                 # 20 datasets a case, 200 resamples (~5 min on 2 cores)
    python benchmarks/bench_calibration.py --datasets 5    # a quick look
"""

from __future__ import annotations

import argparse
import time

from verl_isocompute.scaling.calibration import CASES, coverage, reads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=int, default=20, help="noisy datasets per case (default 20)")
    parser.add_argument("--bootstrap", type=int, default=200, help="resamples per fit (default 200, as isocompute fit)")
    args = parser.parse_args(argv)
    start, total, worst = time.perf_counter(), dict.fromkeys(("given", "held", "m_given", "m_held"), 0), 1.0
    print(f"{'case':18s} {'reward: held / given':>21s} {'coverage':>9s} {'withheld':>9s} {'no fit':>7s}"
          f" {'multiplier: held / given':>26s} {'coverage':>9s}")
    for case in CASES:
        r = coverage(case, args.datasets, bootstrap=args.bootstrap)
        share = r["held"] / r["given"] if r["given"] else float("nan")
        if r["given"]:
            worst = min(worst, share)
        total = {k: total[k] + r[k] for k in total}
        print(f"{case.name:18s} {r['held']:>13d} / {r['given']:<5d} {share:>9.3f} {r['none']:>9d} {r['failed']:>7d}"
              f" {r['m_held']:>18d} / {r['m_given']:<5d} {_share(r['m_held'], r['m_given']):>9.3f}", flush=True)
    print(f"{'pooled':18s} {total['held']:>13d} / {total['given']:<5d} {_share(total['held'], total['given']):>9.3f}"
          f" {'':>17s} {total['m_held']:>18d} / {total['m_given']:<5d} {_share(total['m_held'], total['m_given']):>9.3f}")
    print(f"(nominal 0.95; lowest case of the reward intervals {worst:.3f}; {time.perf_counter() - start:.0f} s)")
    for name, kind in (("flat", "flat"), ("rising", "moving"), ("clear rise", "moving")):  # issue 43 item 3
        r = reads(next(c for c in CASES if c.name == name), args.datasets, bootstrap=args.bootstrap)
        print(f"{name} case read {kind}: {r[kind]} of {r['flat'] + r['moving']} datasets; the direct test finds "
              f"n = 8 ahead at the end on {r['direct']}", flush=True)
    return 0


def _share(held: int, given: int) -> float:
    return held / given if given else float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
