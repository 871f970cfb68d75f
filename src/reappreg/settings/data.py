"""Params of ingest (``data`` section): where the data comes from and the facts it holds.

The data facts (which rating dimensions the dataset has, the rating scale, which sources
carry ratings) are recorded by ``ingest`` in ``meta.json`` and travel with the data: the
validation, the split and the reward models read them from there.
"""

import math
import numbers
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator, model_validator

from reappreg.settings.base import Section

# The rating dimensions the canonical schema knows. A dataset has a subset of them
# (``data.dimensions``); the absent ones are absent keys in ratings.jsonl, never filled.
RATING_DIMENSIONS = ("effectiveness", "empathy", "novelty", "specificity")

# The sample's sentence counts (count -> share of the human texts): most in the policy's
# reference format (at most rm.ensemble.max_sentences = 2 sentences), the rest one over, so
# the format gate's effect is measurable. Every sample text has >= 3 parts: all reachable.
SENTENCE_COUNTS = {1: 0.2, 2: 0.4, 3: 0.4}


def sentence_counts_problem(counts: Mapping[int, float] | None) -> str | None:
    """What is wrong with a sentence-count distribution (count -> share), or None: counts are
    whole numbers >= 1, shares positive and summing to 1 (within 1e-6). None itself is fine
    (every text keeps its natural count)."""
    if counts is None:
        return None
    if not counts:
        return "sentence_counts is empty; give count -> share (e.g. {2: 0.5, 3: 0.5}) or null for the texts as composed"
    for count, share in counts.items():
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            return f"sentence_counts: a count must be a whole number of sentences >= 1 (got {count!r})"
        if (isinstance(share, bool) or not isinstance(share, numbers.Real) or not math.isfinite(share)
                or share <= 0):
            return f"sentence_counts: the share of {count} sentence(s) must be a positive number (got {share!r})"
    total = math.fsum(counts.values())
    if abs(total - 1.0) > 1e-6:
        return f"sentence_counts: the shares must sum to 1 (they sum to {total:g})"
    return None


class SampleSettings(Section):
    seed: int = 13
    reappraisals_per_vignette: int = Field(100, ge=2)
    raters_per_reappraisal: int = Field(3, ge=1)
    rater_pool: int = Field(60, ge=1)
    gpt4_answers_per_vignette: int = Field(10, ge=1)
    opponents: list[str] = ["claude-3-opus", "gemini-1.5-pro"]
    opponent_answers_per_vignette: int = Field(10, ge=1)
    # Log-odds, per quality level of a reappraisal's part, that the part is worded at length
    # (ratings still depend on content only): 0 = length near chance as a ranker; higher =
    # longer texts tend to be the better ones. Negative: poor parts are the wordy ones.
    length_tilt: float = Field(7.0, allow_inf_nan=False)
    # Sentence counts of the human texts, count -> share (punctuation only: adjacent parts are
    # joined into one sentence until the format gate counts the drawn number; words and ratings
    # stay those of null). null: every part its own sentence (3-4 per text), as composed.
    sentence_counts: dict[int, float] | None = dict(SENTENCE_COUNTS)

    @field_validator("sentence_counts")
    @classmethod
    def _sentence_distribution(cls, counts: dict[int, float] | None) -> dict[int, float] | None:
        problem = sentence_counts_problem(counts)
        if problem:
            raise ValueError(problem)
        return None if counts is None else dict(sorted(counts.items()))


class RatingScale(Section):
    # integer: Likert points (a "5.0" cell is read as 5; 4.5 is an error);
    # continuous: any number in [min, max] (averaged or rescaled ratings), stored as floats.
    min: int | float = 1
    max: int | float = 7
    kind: Literal["integer", "continuous"] = "integer"

    @model_validator(mode="after")
    def _ordered(self) -> "RatingScale":
        if not self.min < self.max:
            raise ValueError(f"min ({self.min}) must be below max ({self.max})")
        if self.kind == "integer" and not (float(self.min).is_integer() and float(self.max).is_integer()):
            raise ValueError(f"an integer scale needs integer bounds (got {self.min}..{self.max}); use kind: continuous")
        return self

    def as_meta(self) -> dict:
        """The scale as recorded in meta.json: integer bounds as ints, continuous as floats."""
        cast = int if self.kind == "integer" else float
        return {"min": cast(self.min), "max": cast(self.max), "kind": self.kind}


class DataSettings(Section):
    # sample: seeded generator; file: the project's CSV/TSV/JSONL/parquet flat format or a
    # canonical folder; sharma2023: public reframing CSV
    source: Literal["sample", "file", "sharma2023"] = "sample"
    path: str | None = None
    # The rating columns this dataset has (effectiveness is required: the RMs train on it).
    dimensions: list[str] = list(RATING_DIMENSIONS)
    rating_scale: RatingScale = RatingScale()
    # Sources whose reappraisals are rated; each of their reappraisals needs validate.min_raters.
    rated_sources: list[str] = ["human"]
    # The same (reappraisal_id, rater_id) rated more than once. error: refuse; drop_identical:
    # keep one of identical repeats (conflicting ones are an error); mean: average a rater's
    # repeats per dimension (a rater who rated one text twice is not wrong either time; needs
    # a continuous scale). Every merged row is counted in meta.json.
    duplicate_ratings: Literal["error", "drop_identical", "mean"] = "error"
    sample: SampleSettings = SampleSettings()

    @field_validator("dimensions")
    @classmethod
    def _known_dimensions(cls, dimensions: list[str]) -> list[str]:
        unknown = [d for d in dimensions if d not in RATING_DIMENSIONS]
        if unknown:
            raise ValueError(f"unknown dimension(s) {unknown}; known: {list(RATING_DIMENSIONS)}")
        if len(set(dimensions)) != len(dimensions):
            raise ValueError(f"a dimension is listed twice: {dimensions}")
        if "effectiveness" not in dimensions:
            raise ValueError("must include 'effectiveness': the reward models train on it whenever ratings exist")
        # schema order, so meta.json and every table list them the same way
        return [d for d in RATING_DIMENSIONS if d in dimensions]

    @field_validator("rated_sources")
    @classmethod
    def _unique_sources(cls, sources: list[str]) -> list[str]:
        if len(set(sources)) != len(sources):
            raise ValueError(f"a source is listed twice: {sources}")
        return sources

    @model_validator(mode="after")
    def _mean_needs_continuous(self) -> "DataSettings":
        if self.duplicate_ratings == "mean" and self.rating_scale.kind != "continuous":
            raise ValueError(
                "duplicate_ratings: mean averages a rater's repeats into fractional ratings; it needs "
                "rating_scale.kind: continuous (the scale is integer)"
            )
        return self
