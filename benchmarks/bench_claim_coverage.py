"""How often the intervals of claims 1 and 2 hold the planted value, over many sweeps drawn with a known effect.

    python -m benchmarks.bench_claim_coverage [--reps 200] [--seeds 3] [--n-boot 500]

Each replicate draws a sweep's per-run summary (tests/planted_gains.py `gain_summary`: 24 multi-agent cells and 4
single-agent ones, `--seeds` seeds each) with the gains planted (PLANTED) or none (NULL), computes the claim tables
and checks whether each 95% interval holds the planted value: claim 1's mean terminal gain (over the base and over
the single agent), claim 2's workflow x task x scale share, policy share and their difference (terminal gain).
Prints one JSON line per sweep kind: the share of replicates whose interval holds the planted value (nominal 0.95)
and the mean share of cells whose interval lies above zero (nominal 0.025 under NULL).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from analysis.claim_base_gain import base_gain
from analysis.claim_gain_factors import CLAIM, POLICY, SETTING_TERMS, gain_factors
from tests.planted_gains import NULL, PLANTED, Gains, gain_summary, planted_mean_gain, planted_shares


def _holds(row, value: float) -> bool:
    return bool(row["lo"] <= value <= row["hi"])


def coverage(g: Gains, reps: int, seeds: int, n_boot: int) -> dict[str, float]:
    """Per interval, the share of `reps` sweeps whose interval holds the planted value."""
    shares = planted_shares(g)
    truth = {
        "mean_gain_terminal": planted_mean_gain(g),
        "mean_gain_vs_single_terminal": planted_mean_gain(g, vs_single=True),
        SETTING_TERMS: shares["setting"],
        POLICY: shares["policy"],
        CLAIM: shares["setting"] - shares["policy"],
    }
    held = dict.fromkeys(truth, 0)
    above = []
    rng = np.random.default_rng(0)
    for r in range(reps):
        summary = gain_summary(g, seeds, rng)
        b = base_gain(summary, n_boot=n_boot, seed=r)
        b = b[b["workflow"] == "all"].set_index(["statistic", "measure"])
        f = gain_factors(summary, n_boot=n_boot, seed=r)
        f = f[f["measure"] == "gain_terminal"].set_index("term")
        for m in ("gain_terminal", "gain_vs_single_terminal"):
            held[f"mean_{m}"] += _holds(b.loc[("mean_gain", m)], truth[f"mean_{m}"])
        for term in (SETTING_TERMS, POLICY, CLAIM):
            held[term] += _holds(f.loc[term], truth[term])
        above.append(float(b.loc[("share_above_zero", "gain_terminal"), "estimate"]))
    return {**{k: v / reps for k, v in held.items()}, "share_cells_above_zero": float(np.mean(above))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n-boot", type=int, default=500)
    args = parser.parse_args()
    for name, g in (("null", NULL), ("planted", PLANTED)):
        result = coverage(g, args.reps, args.seeds, args.n_boot)
        print(json.dumps({"sweep": name, "reps": args.reps, "seeds": args.seeds, **result}))
