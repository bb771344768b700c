"""Coverage of the fit's 95 % per-n reward intervals on known-truth sweeps (issue 43, item 2).

For every case of :data:`verl_isocompute.scaling.calibration.CASES` (rising, flat, exact tie, late crossing,
unequal run lengths, 1 / 3 / 5 / 10 seeds, a curve at the fit's bounds), fits ``--datasets`` noisy datasets and
counts how many of the 95 % intervals of each n's reward at C = 256 and 448 rollouts held the true R_n(C); prints
coverage per case and pooled (goal: pooled >= 93 %, no case below 88 %). A case with one seed gives no interval,
by design: its row counts the intervals withheld. The last two lines (issue 43 item 3): on how many datasets the
flat case reads flat and the rising case reads rising.

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
    start, given, held, worst = time.perf_counter(), 0, 0, 1.0
    print(f"{'case':18s} {'held / given':>14s} {'coverage':>9s} {'withheld':>9s} {'no fit':>7s}")
    for case in CASES:
        r = coverage(case, args.datasets, bootstrap=args.bootstrap)
        share = r["held"] / r["given"] if r["given"] else float("nan")
        if r["given"]:
            worst = min(worst, share)
        given, held = given + r["given"], held + r["held"]
        print(f"{case.name:18s} {r['held']:>6d} / {r['given']:<6d} {share:>9.3f} {r['none']:>9d} {r['failed']:>7d}",
              flush=True)
    print(f"{'pooled':18s} {held:>6d} / {given:<6d} {held / given:>9.3f}   (nominal 0.95; lowest case {worst:.3f}; "
          f"{time.perf_counter() - start:.0f} s)")
    for name, kind in (("flat", "flat"), ("rising", "moving")):  # issue 43 item 3: the flat-or-moving decision
        r = reads(next(c for c in CASES if c.name == name), args.datasets, bootstrap=args.bootstrap)
        print(f"{name} case read {kind}: {r[kind]} of {r['flat'] + r['moving']} datasets", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
