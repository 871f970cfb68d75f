"""Knobs for the separation guard (``guard`` section of params.yaml); see ``reappreg.guard``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from reappreg.settings.base import Section


class NgramSettings(Section):
    # Exact word n-gram containment of a held-out answer in a training text.
    n: int = Field(5, ge=1)
    containment: float = Field(0.5, gt=0, le=1)   # fraction of the answer's n-grams found in the text
    min_run: int | None = Field(20, ge=1)         # or a shared passage of this many words (long answer partly copied); null = off


class MinHashSettings(Section):
    # MinHash LSH near-duplicates: exact Jaccard of word-shingle sets, LSH-candidate pairs only.
    shingle_words: int = Field(2, ge=1)
    threshold: float = Field(0.3, gt=0, le=1)
    num_perm: int = Field(64, ge=2)
    seed: int = 1
    bands: int | None = 32                       # null (with rows null) = datasketch's optimiser at `threshold`
    rows: int | None = 2
    weights: tuple[float, float] = (0.5, 0.5)    # datasketch (false positive, false negative) weights, optimiser only


class GuardSettings(Section):
    """Knobs for the guard stage(s); owned by the guard module."""

    policy: Literal["block", "quarantine"] = "block"
    ngram: NgramSettings = NgramSettings()
    minhash: MinHashSettings = MinHashSettings()
    workers: int = Field(2, ge=1)                # processes for large inputs (one per core)
    chunk_size: int = Field(2000, ge=1)          # texts per work unit; inputs of one chunk run in-process
    max_shared_reported: int = Field(10, ge=1)   # shared grams spelled out per hit
    max_hits_in_certificate: int = Field(200, ge=0)

    def detectors(self) -> dict:
        """The nested detector settings ``reappreg.guard.GuardConfig.from_dict`` takes."""
        return {"ngram": self.ngram.model_dump(), "minhash": {**self.minhash.model_dump(), "weights": list(self.minhash.weights)}}
