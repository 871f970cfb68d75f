"""The sampling plan of an eval: every sequence a generate stage draws, and its seed.

The plan is a pure function of the eval vignettes and the generate settings (K evals,
samples per vignette, best-of-N, base seed): each sequence's seed comes from
:class:`numpy.random.SeedSequence` with spawn key (pool, eval, vignette, sample, candidate).
The generate stage draws exactly this plan, and the stats stage re-derives it to check that
a generations file holds every planned sequence under its planned id and seed and nothing
else: the number of generations per vignette is a params fact, never a file's word.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reappreg.errors import InputError
from reappreg.settings.conditions import FRESH_PREFIX
from reappreg.settings.generate import GenerateSettings

POOLS = {
    # selection label -> (id prefix, spawn-key code); codes keep the three seed streams apart
    "none": ("none", 0),
    "best_of_n_selection_pool": ("bon_sel", 1),
    "best_of_n_fresh": ("bon_fresh", 2),
}


@dataclass(frozen=True)
class Sample:
    """One sequence to generate: where it belongs and the seed it is sampled with."""

    generation_id: str
    pool_id: str
    selection: str
    eval_k: int
    vignette_id: str
    sample_index: int
    candidate_index: int
    seed: int


def _stable_int(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


def sampling_seed(base_seed: int, selection: str, eval_k: int, vignette_id: str, sample_index: int,
                  candidate_index: int = 0) -> int:
    """A 31-bit seed for one sequence, independent across pools, evals, vignettes and samples."""
    _, code = POOLS[selection]
    seq = np.random.SeedSequence(
        base_seed, spawn_key=(code, eval_k, _stable_int(vignette_id), sample_index, candidate_index)
    )
    return int(seq.generate_state(1, dtype=np.uint32)[0] & 0x7FFFFFFF)


def fresh_pool_prefix(seed: int) -> str:
    """The id prefix of a fresh confirmation pool drawn with ``seed`` (``stats.fresh_pools``):
    its generations are new sequences, so they never carry the selection pool's ids."""
    return f"{FRESH_PREFIX}s{seed}-"


def plan_samples(vignette_ids: Sequence[str], config: GenerateSettings, id_prefix: str = "") -> list[Sample]:
    """Every sequence of the stage: plain samples, and both best-of-N pools when N > 1.

    ``id_prefix`` starts every generation and pool id (a fresh pool's ``fresh_pool_prefix``)."""
    samples: list[Sample] = []
    for k in range(config.evals):
        for vid in vignette_ids:
            for s in range(config.samples_per_vignette):
                gid = f"{id_prefix}none-e{k}-{vid}-s{s}"
                samples.append(Sample(gid, gid, "none", k, vid, s, 0, sampling_seed(config.seed, "none", k, vid, s)))
            if config.best_of_n > 1:
                for selection in ("best_of_n_selection_pool", "best_of_n_fresh"):
                    prefix, _ = POOLS[selection]
                    for s in range(config.samples_per_vignette):
                        pool = f"{id_prefix}{prefix}-e{k}-{vid}-s{s}"
                        for c in range(config.best_of_n):
                            samples.append(Sample(f"{pool}-c{c}", pool, selection, k, vid, s, c,
                                                  sampling_seed(config.seed, selection, k, vid, s, c)))
    seeds = [x.seed for x in samples]
    if len(set(seeds)) != len(seeds):  # 31-bit seeds: a collision is unlikely but must not pass silently
        raise InputError(f"generate: sampling seeds collide for base seed {config.seed}; choose another seed")
    return samples


def select_vignettes(vignettes: Sequence[dict], wanted: Sequence[str] | None, *, source: str = "vignettes"
                     ) -> list[dict]:
    rows = []
    seen: set[str] = set()
    for i, v in enumerate(vignettes, start=1):
        for key in ("vignette_id", "scenario"):
            if not isinstance(v.get(key), str) or not v[key].strip():
                raise InputError(f"{source}: row {i} has no non-empty string '{key}'")
        if v["vignette_id"] in seen:
            raise InputError(f"{source}: row {i} repeats vignette_id {v['vignette_id']!r}")
        seen.add(v["vignette_id"])
        rows.append(v)
    if wanted:
        missing = sorted(set(wanted) - seen)
        if missing:
            raise InputError(f"{source}: eval vignette(s) {', '.join(missing)} not found")
        rows = [v for v in rows if v["vignette_id"] in set(wanted)]
    if not rows:
        raise InputError(f"{source}: no vignettes to generate for")
    return rows


__all__ = ["POOLS", "Sample", "fresh_pool_prefix", "plan_samples", "sampling_seed", "select_vignettes"]
