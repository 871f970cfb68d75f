"""Detector settings as the scan uses them (built from ``guard.*`` params or a certificate).

``GuardConfig.to_dict`` is what the certificate and the sketch record under ``detectors``;
``from_dict`` reads it back, so an audit or an outside check runs with exactly the certified
settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from reappreg.errors import InputError
from reappreg.guard.edits import EDITS_VERSION
from reappreg.guard.normalise import NORMALISATION

MINHASH_SCHEME = "affine32"  # datasketch >= 2.0 permutation scheme used for every signature


@dataclass(frozen=True)
class GuardConfig:
    """Detector parameters (the ``guard.ngram``, ``guard.minhash``, ``guard.chars``,
    ``guard.fragments`` and ``guard.edits`` params)."""

    ngram_n: int
    ngram_containment: float
    ngram_min_run: int | None
    ngram_span: float
    shingle_words: int
    jaccard: float
    num_perm: int
    seed: int
    bands: int | None
    rows: int | None
    weights: tuple[float, float]
    chars_n: int
    chars_containment: float
    chars_min_run: int | None
    chars_span: float
    fragments_coverage: float
    fragments_min_piece: int
    fragments_group_fields: tuple[str, ...]
    fragments_whole_file: bool
    fragments_stock_answers: int
    edits_enabled: bool
    edits_threshold: float
    edits_min_answer_words: int
    edits_span: float

    @classmethod
    def from_dict(cls, detectors: dict[str, Any]) -> "GuardConfig":
        """From the nested form used in params.yaml and the certificate."""
        try:
            ng, mh, ch, fr = detectors["ngram"], detectors["minhash"], detectors["chars"], detectors["fragments"]
            ed = detectors["edits"]
            config = cls(
                ngram_n=int(ng["n"]),
                ngram_containment=float(ng["containment"]),
                ngram_min_run=None if ng.get("min_run") is None else int(ng["min_run"]),
                ngram_span=float(ng["span"]),
                shingle_words=int(mh["shingle_words"]),
                jaccard=float(mh["threshold"]),
                num_perm=int(mh["num_perm"]),
                seed=int(mh["seed"]),
                bands=None if mh.get("bands") is None else int(mh["bands"]),
                rows=None if mh.get("rows") is None else int(mh["rows"]),
                weights=tuple(float(w) for w in mh["weights"]),  # type: ignore[arg-type]
                chars_n=int(ch["n"]),
                chars_containment=float(ch["containment"]),
                chars_min_run=None if ch.get("min_run") is None else int(ch["min_run"]),
                chars_span=float(ch["span"]),
                fragments_coverage=float(fr["coverage"]),
                fragments_min_piece=int(fr["min_piece"]),
                fragments_group_fields=tuple(str(f) for f in fr["group_fields"]),
                fragments_whole_file=bool(fr["whole_file"]),
                fragments_stock_answers=int(fr["stock_answers"]),
                edits_enabled=bool(ed["enabled"]),
                edits_threshold=float(ed["threshold"]),
                edits_min_answer_words=int(ed["min_answer_words"]),
                edits_span=float(ed["span"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"guard detector settings incomplete or malformed: missing or bad {exc!r}") from exc
        if ed.get("version", EDITS_VERSION) != EDITS_VERSION:  # settings from params carry none
            raise InputError(f"guard edits detector version '{ed.get('version')}' is not this version's "
                             f"'{EDITS_VERSION}' (its keys would not match)")
        return config.resolved()

    def resolved(self) -> "GuardConfig":
        """Validate, and fill bands/rows from datasketch's optimiser when they are null."""
        problems = []
        if self.ngram_n < 1:
            problems.append(f"ngram.n must be >= 1 (got {self.ngram_n})")
        if not 0 < self.ngram_containment <= 1:
            problems.append(f"ngram.containment must be in (0, 1] (got {self.ngram_containment})")
        if self.ngram_min_run is not None and self.ngram_min_run < self.ngram_n:
            problems.append(f"ngram.min_run must be >= ngram.n ({self.ngram_n}) or null (got {self.ngram_min_run})")
        if self.shingle_words < 1:
            problems.append(f"minhash.shingle_words must be >= 1 (got {self.shingle_words})")
        if not 0 < self.jaccard <= 1:
            problems.append(f"minhash.threshold must be in (0, 1] (got {self.jaccard})")
        if (self.bands is None) != (self.rows is None):
            problems.append("minhash.bands and minhash.rows must both be set or both be null")
        if self.chars_n < 4:
            problems.append(f"chars.n must be >= 4 letters (got {self.chars_n})")
        if not 0 < self.chars_containment <= 1:
            problems.append(f"chars.containment must be in (0, 1] (got {self.chars_containment})")
        if self.chars_min_run is not None and self.chars_min_run < self.chars_n:
            problems.append(f"chars.min_run must be >= chars.n ({self.chars_n}) or null (got {self.chars_min_run})")
        if not 0 < self.fragments_coverage <= 1:
            problems.append(f"fragments.coverage must be in (0, 1] (got {self.fragments_coverage})")
        if self.fragments_stock_answers < 2:
            problems.append(f"fragments.stock_answers must be >= 2 (got {self.fragments_stock_answers})")
        if not 0 < self.edits_threshold <= 1:
            problems.append(f"edits.threshold must be in (0, 1] (got {self.edits_threshold})")
        if self.edits_min_answer_words < 2:
            problems.append(f"edits.min_answer_words must be >= 2 (got {self.edits_min_answer_words})")
        for name, span in (("ngram", self.ngram_span), ("chars", self.chars_span), ("edits", self.edits_span)):
            if span < 2:
                problems.append(f"{name}.span must be >= 2 answer lengths (got {span})")
        if self.fragments_min_piece < self.chars_n:
            problems.append(f"fragments.min_piece must be >= chars.n ({self.chars_n}) (got {self.fragments_min_piece})")
        if problems:
            raise InputError("invalid guard settings: " + "; ".join(problems))
        if self.bands is not None:
            if self.bands < 2 or self.rows < 1 or self.bands * self.rows > self.num_perm:  # type: ignore[operator]
                raise InputError(
                    f"invalid guard settings: minhash bands x rows = {self.bands} x {self.rows} must have "
                    f"bands >= 2 and fit in num_perm = {self.num_perm}"
                )
            return self
        from datasketch import MinHashLSH

        try:
            lsh = MinHashLSH(threshold=self.jaccard, num_perm=self.num_perm, weights=self.weights)
        except ValueError as exc:
            raise InputError(f"invalid guard settings: datasketch rejected the LSH settings: {exc}") from exc
        return GuardConfig(**{**asdict(self), "bands": lsh.b, "rows": lsh.r})

    def to_dict(self) -> dict[str, Any]:
        return {
            "normalisation": NORMALISATION,
            "ngram": {"n": self.ngram_n, "containment": self.ngram_containment, "min_run": self.ngram_min_run,
                      "span": self.ngram_span},
            "minhash": {
                "shingle_words": self.shingle_words,
                "threshold": self.jaccard,
                "num_perm": self.num_perm,
                "seed": self.seed,
                "bands": self.bands,
                "rows": self.rows,
                "weights": list(self.weights),
                "scheme": MINHASH_SCHEME,
                "lsh": lsh_error_rates(self.jaccard, self.bands, self.rows),  # type: ignore[arg-type]
            },
            "chars": {"n": self.chars_n, "containment": self.chars_containment, "min_run": self.chars_min_run,
                      "span": self.chars_span},
            "fragments": {
                "coverage": self.fragments_coverage,
                "min_piece": self.fragments_min_piece,
                "group_fields": list(self.fragments_group_fields),
                "whole_file": self.fragments_whole_file,
                "stock_answers": self.fragments_stock_answers,
            },
            "edits": {"enabled": self.edits_enabled, "threshold": self.edits_threshold,
                      "min_answer_words": self.edits_min_answer_words, "span": self.edits_span, "version": EDITS_VERSION},
        }


def lsh_error_rates(threshold: float, bands: int, rows: int) -> dict[str, float]:
    """How often LSH misses a pair, for the banding in use.

    ``fn_probability_at_threshold`` is the chance that a pair with Jaccard exactly at the
    threshold is never a candidate, (1 - t^r)^b: the worst case among pairs that should be
    reported (the chance falls fast as J grows). ``fn_integral`` / ``fp_integral`` are
    datasketch's own optimisation objectives (areas under the miss / false-candidate curves
    over J in [t, 1] / [0, t]); ``fn_mean_above_threshold`` is the miss chance averaged over
    J uniform in [t, 1]. False candidates cost only time: they are scored exactly and dropped.
    """
    from datasketch.lsh import _false_negative_probability, _false_positive_probability

    fn_at = (1.0 - threshold**rows) ** bands
    fn_area = _false_negative_probability(threshold, bands, rows)
    return {
        "fn_probability_at_threshold": float(fn_at),
        "fn_integral": float(fn_area),
        "fn_mean_above_threshold": float(fn_area / (1.0 - threshold)) if threshold < 1 else 0.0,
        "fp_integral": float(_false_positive_probability(threshold, bands, rows)),
        "candidate_probability_at_threshold": float(1.0 - fn_at),
    }

