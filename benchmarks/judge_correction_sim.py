"""Does the Rogan–Gladen correction (reappreg.stats.correction) recover the true win-rate,
and does its interval cover it, where the raw judge win-rate does not?

Each replicate draws a pipeline-shaped evaluation with a known truth: G vignettes with their
own true win-rate (θ plus a vignette effect), contests per vignette scored by a synthetic
judge of known specificity q0 and sensitivity q1, and a calibration set of n human-preferred
pairs on which the same judge is scored (agreement ~ Binomial(n, (q0 + q1)/2) / n: the
calibration's pairs have no policy side, so it sees the judge's average accuracy). The raw
estimate is the equal-weight mean of the vignette means with a t(G − 1) interval; the
corrected one uses the calibration's agreement with its Jeffreys posterior variance, the two
sides independent (``JudgeError.from_calibration``). For comparison, "before" is the earlier
interval: the binomial variance a(1 − a)/n, the two sides fully correlated -- 0 at perfect
agreement. Printed per setting: mean estimate minus θ (bias) and the share of replicates whose
95% interval holds θ (coverage), raw, corrected and before, the share where the judge was too
close to chance to correct (interval [0, 1]) and the mean widths of the corrected and before intervals.

    python benchmarks/judge_correction_sim.py [--replicates 2000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.stats import t

from reappreg.stats.correction import JudgeError, corrected_win_rate

SETTINGS = [  # (true θ, specificity q0, sensitivity q1, vignettes G, contests per vignette, calibration pairs)
    (0.70, 0.90, 0.90, 6, 40, 200),
    (0.70, 0.75, 0.75, 6, 40, 200),
    (0.60, 0.75, 0.75, 6, 40, 200),
    (0.50, 0.75, 0.75, 6, 40, 200),
    (0.30, 0.75, 0.75, 6, 40, 200),
    (0.70, 0.65, 0.65, 6, 40, 200),
    (0.70, 0.75, 0.75, 12, 40, 80),
    (0.70, 0.55, 0.55, 6, 40, 100),
    # few calibration pairs: a good judge often agrees on all 16 (0.95^16 = 0.44)
    (0.65, 0.95, 0.95, 6, 40, 16),
    (0.70, 0.75, 0.75, 6, 40, 16),
    (0.65, 0.95, 0.95, 6, 40, 240),
    # a judge more accurate on one side than the other (the calibration sees only the average)
    (0.60, 0.75, 0.85, 6, 40, 200),
    (0.60, 0.85, 0.75, 6, 40, 200),
]
VIGNETTE_SD = 0.05


def replicate(rng: np.random.Generator, theta: float, q0: float, q1: float, g: int, per: int, n_cal: int) -> tuple:
    truth = np.clip(theta + rng.normal(0, VIGNETTE_SD, g), 0.01, 0.99)
    better = rng.random((g, per)) < truth[:, None]  # the policy's answer is truly better
    says_win = np.where(better, rng.random((g, per)) < q1, rng.random((g, per)) >= q0)
    means = says_win.mean(axis=1)
    p, var_p = float(means.mean()), float(means.var(ddof=1) / g)
    half = float(t.ppf(0.975, g - 1)) * np.sqrt(var_p)
    raw_hit = p - half <= theta <= p + half
    agreement = float((rng.random(n_cal) < (q0 + q1) / 2).mean())
    corrected = corrected_win_rate(p, var_p, g - 1, JudgeError.from_calibration(agreement, n_cal))
    binomial = agreement * (1 - agreement) / n_cal
    before = corrected_win_rate(p, var_p, g - 1, JudgeError(agreement, agreement, binomial, binomial, binomial))
    return p, raw_hit, corrected, before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    table = Table(title=f"Raw vs Rogan-Gladen-corrected judge win-rate, {args.replicates} replicates each, 95% intervals")
    for column in ("θ", "q0", "q1", "G", "contests/G", "calib pairs", "raw bias", "raw cover", "corrected bias",
                   "corrected cover", "before cover", "[0,1] (at chance)", "corrected width", "before width"):
        table.add_column(column, justify="right")
    for theta, q0, q1, g, per, n_cal in SETTINGS:
        raws, raw_hits, estimates, hits, before_hits, widths, before_widths, flat = [], [], [], [], [], [], [], 0
        for _ in range(args.replicates):
            p, raw_hit, c, before = replicate(rng, theta, q0, q1, g, per, n_cal)
            raws.append(p)
            raw_hits.append(raw_hit)
            hits.append(c.low <= theta <= c.high)
            before_hits.append(before.low <= theta <= before.high)
            widths.append(c.high - c.low)
            before_widths.append(before.high - before.low)
            if c.informative:
                estimates.append(c.corrected)
            else:
                flat += 1
        bias = f"{np.mean(estimates) - theta:+.4f}" if estimates else "-"
        table.add_row(f"{theta:.2f}", f"{q0:.2f}", f"{q1:.2f}", str(g), str(per), str(n_cal),
                      f"{np.mean(raws) - theta:+.4f}", f"{np.mean(raw_hits):.3f}", bias, f"{np.mean(hits):.3f}",
                      f"{np.mean(before_hits):.3f}", f"{flat / args.replicates:.3f}", f"{np.mean(widths):.3f}",
                      f"{np.mean(before_widths):.3f}")
    Console(width=220).print(table)


if __name__ == "__main__":
    main()
