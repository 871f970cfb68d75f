"""The seeded sample generator: data in the canonical schema, same seed -> identical tables.

The real Li et al. (2025) ratings are not public; this module writes data of the same shape
from the phrase banks in ``reappreg.data.vignettes`` so that every stage has real input to run on.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from reappreg.data import vignettes as bank
from reappreg.data.canonical import RATING_COLUMNS, RATING_DIMENSIONS, REAPPRAISAL_COLUMNS, VIGNETTE_COLUMNS, CanonicalData
from reappreg.errors import InputError
from reappreg.rm.gate import count_sentences
from reappreg.settings.data import SENTENCE_COUNTS, sentence_counts_problem

# The sentence-count stream: its own generator (seeded from the sample's seed and this
# constant), so drawing target counts never moves the content stream.
_SENTENCE_STREAM = 0x5E27

def _level(rng: np.random.Generator, skill: float) -> int:
    """Sample a quality level 0/1/2; higher author skill shifts mass upward."""
    logits = np.array([-skill, 0.3, skill])
    probs = np.exp(logits) / np.exp(logits).sum()
    return int(rng.choice(3, p=probs))


def _long_wording_chance(verbosity: float, level: int, length_tilt: float) -> float:
    """Chance that a part of quality ``level`` is worded at length: the author's verbosity,
    its log-odds shifted by ``length_tilt`` per level above the middle one (a good part is
    more often elaborated, a poor one more often curt)."""
    if length_tilt == 0:
        return verbosity  # exactly the untilted draw, not a round trip through the logit
    verbosity = min(max(verbosity, 1e-9), 1 - 1e-9)  # a Beta draw can round to 0 or 1
    log_odds = np.log(verbosity) - np.log1p(-verbosity) + length_tilt * (level - 1)
    return float(1.0 / (1.0 + np.exp(-log_odds)))


def _compose_human(rng: np.random.Generator, vignette: dict, skill: float, verbosity: float,
                   length_tilt: float) -> tuple[list[str], dict[str, int]]:
    """One human reappraisal, as its parts (one sentence each; the text joins them with
    spaces). ``verbosity`` (0-1, drawn independently of ``skill``) is the chance that each
    part is worded at length (tilted by the part's quality level, see
    :func:`_long_wording_chance`), and of a rambling aside up front."""
    levels = {"empathy": _level(rng, skill), "reinterpretation": _level(rng, skill), "growth": _level(rng, skill)}
    fill = {
        "emotion": vignette["emotion"],
        "detail": str(rng.choice(vignette["details"])),
        "alternative": str(rng.choice(vignette["alternatives"])),
    }
    parts = []
    if rng.random() < 0.6 * verbosity:
        parts.append(str(rng.choice(bank.HUMAN_FILLER)))
    levels["filler"] = len(parts)
    for name, phrases in (("empathy", bank.HUMAN_EMPATHY), ("reinterpretation", bank.HUMAN_REINTERPRETATION),
                          ("growth", bank.HUMAN_GROWTH)):
        wording = "long" if rng.random() < _long_wording_chance(verbosity, levels[name], length_tilt) else "short"
        parts.append(str(rng.choice(phrases[levels[name]][wording])).format(**fill))
    return [p for p in parts if p], levels


def _join(parts: list[str], joined: set[int]) -> str:
    """The parts as one text, where each boundary in ``joined`` (``i``: between part ``i`` and
    ``i + 1``) is a "; " instead of a full stop, the next part's first letter lower-cased
    (not the pronoun "I"). Only punctuation and case change, never a word."""
    out = parts[0]
    for i, part in enumerate(parts[1:]):
        if i in joined:
            first = part.split(maxsplit=1)[0]
            if not (first == "I" or first.startswith("I'")):
                part = part[0].lower() + part[1:]
            out = out[:-1] + "; " + part
        else:
            out = out + " " + part
    return out


def _with_sentence_count(parts: list[str], target: int, rng: np.random.Generator) -> str:
    """The parts as a text of ``target`` sentences, as the format gate counts them
    (:func:`reappreg.rm.gate.count_sentences`): adjacent parts are joined (:func:`_join`), at
    boundaries in an order drawn from ``rng`` (a part must end in a full stop to be joined
    on), as many at a time as the counter says are too many, until it counts ``target`` or no
    boundary is left. A text that cannot reach it keeps the nearest count it can have: a
    target above the natural count (more sentences than parts) leaves the text as written."""
    text = " ".join(parts)
    order = [int(b) for b in (rng.permutation(len(parts) - 1) if len(parts) > 1 else [])
             if parts[int(b)].endswith(".")]
    joined: set[int] = set()
    excess = count_sentences(text) - target
    while excess > 0 and order:
        joined.update(order[:excess])
        del order[:excess]
        text = _join(parts, joined)
        excess = count_sentences(text) - target
    return text


def _true_scores(levels: dict[str, int], text: str, vignette: dict) -> dict[str, float]:
    """Latent per-dimension quality: what raters perceive, before their own noise."""
    emp, rei, gro = levels["empathy"], levels["reinterpretation"], levels["growth"]
    mentions = sum(d.lower() in text.lower() for d in vignette["details"]) + (rei == 2)
    return {
        "effectiveness": 1.6 + 0.8 * emp + 1.1 * rei + 0.8 * gro - 0.3 * levels["filler"],
        "empathy": 1.8 + 1.9 * emp + 0.4 * gro,
        "novelty": 2.0 + 1.7 * rei + 0.3 * gro,
        "specificity": 1.8 + 1.3 * mentions,
    }


def generate_sample(
    seed: int = 13,
    reappraisals_per_vignette: int = 100,
    raters_per_reappraisal: int = 3,
    rater_pool: int = 60,
    gpt4_answers_per_vignette: int = 10,
    opponents: list[str] | tuple[str, ...] = ("claude-3-opus", "gemini-1.5-pro"),
    opponent_answers_per_vignette: int = 10,
    length_tilt: float = 7.0,
    sentence_counts: Mapping[int, float] | None = SENTENCE_COUNTS,
) -> CanonicalData:
    """Seeded sample data in the canonical schema (same seed -> identical tables).

    Quality varies in content: better-rated reappraisals acknowledge the feeling, refer to
    the scenario's specifics, offer a benign alternative explanation and a constructive
    next step; poor ones dismiss, moralise or offer clichés. Raters add their own bias and
    noise, so the signal is learnable but not trivial.

    Length tempts without deciding: ratings depend on content only, but with
    ``length_tilt`` > 0 good parts are more often worded at length and poor ones curtly, so
    longer texts tend to be better, as on real expert ratings, while some long texts are
    still poor and some short ones good (every level has concise and wordy phrasings, and
    an author's verbosity is independent of their skill). At 0 a length-only ranker is
    near chance. The default (``data.sample.length_tilt`` in params.yaml) makes "the
    longer text wins" right on about 0.8 of the preference pairs.

    Sentence counts are punctuation only: each human text is composed of 3-4 parts (an
    optional aside, then acknowledgement, reinterpretation, next step), one sentence each.
    With ``sentence_counts`` (count -> share) every human text draws a target count and
    adjacent parts are joined into one sentence until the format gate's own counter gives
    that count (:func:`_with_sentence_count`; a target above a text's number of parts keeps
    its natural count). The targets and join points come from a stream of their own, so the
    words of every text, every rating and the held-out answers are those of
    ``sentence_counts=None`` (the texts as composed, a full stop after every part) for the
    same seed; text lengths in characters are unchanged too.
    """
    if not np.isfinite(length_tilt):
        raise InputError(f"length_tilt must be a finite number (got {length_tilt})")
    if raters_per_reappraisal > rater_pool:
        raise InputError(f"raters_per_reappraisal ({raters_per_reappraisal}) exceeds rater_pool ({rater_pool})")
    problem = sentence_counts_problem(sentence_counts)
    if problem:
        raise InputError(problem)
    rng = np.random.default_rng(seed)
    if sentence_counts is not None:
        sentence_rng = np.random.default_rng([seed, _SENTENCE_STREAM])
        counts = sorted(sentence_counts)
        shares = np.array([float(sentence_counts[c]) for c in counts])
        shares = shares / shares.sum()
    rater_bias = rng.normal(0.0, 0.4, size=rater_pool)
    vignettes = [{k: v[k] for k in VIGNETTE_COLUMNS} for v in bank.VIGNETTES]
    reappraisals: list[dict] = []
    ratings: list[dict] = []
    for vignette in bank.VIGNETTES:
        vid = vignette["vignette_id"]
        seen: set[str] = set()
        index = 0
        attempts = 0
        while index < reappraisals_per_vignette:
            attempts += 1
            if attempts > reappraisals_per_vignette * 50:
                raise InputError(f"sample generator: cannot make {reappraisals_per_vignette} distinct texts for {vid}")
            skill = float(rng.normal(0.0, 1.2))
            verbosity = float(rng.beta(0.7, 0.7))  # most authors lean clearly terse or wordy
            parts, levels = _compose_human(rng, vignette, skill, verbosity, length_tilt)
            text = " ".join(parts)
            if text in seen:
                continue
            seen.add(text)
            truth = _true_scores(levels, text, vignette)  # of the text as composed: content only
            if sentence_counts is not None:
                target = int(counts[sentence_rng.choice(len(counts), p=shares)])
                text = _with_sentence_count(parts, target, sentence_rng)
            index += 1
            rid = f"r-{vid}-{index:03d}"
            reappraisals.append(
                {"reappraisal_id": rid, "vignette_id": vid, "author_id": f"a-{vid}-{index:03d}", "source": "human", "text": text}
            )
            for rater in rng.choice(rater_pool, size=raters_per_reappraisal, replace=False):
                row = {
                    "rating_id": f"{rid}-k{int(rater):02d}",
                    "reappraisal_id": rid,
                    "vignette_id": vid,
                    "rater_id": f"k{int(rater):02d}",
                }
                for dim in RATING_DIMENSIONS:
                    value = truth[dim] + rater_bias[rater] + rng.normal(0.0, 0.8)
                    row[dim] = int(np.clip(np.rint(value), 1, 7))
                ratings.append(row)
        sources = [("gpt-4-0314", gpt4_answers_per_vignette)] + [(o, opponent_answers_per_vignette) for o in opponents]
        for source, count in sources:
            frames = bank.HELDOUT_FRAMES.get(source, bank.GENERIC_HELDOUT_FRAMES)
            combos = [(f, a) for f in frames for a in vignette["heldout_alternatives"]]
            order = rng.permutation(len(combos))
            for j in range(count):
                frame, alternative = combos[order[j % len(combos)]]
                text = frame.format(alternative=alternative)
                if j >= len(combos):  # more answers than combinations: vary the opening
                    text = f"{['Also', 'Still', 'Equally'][j // len(combos) % 3]}, {text[0].lower()}{text[1:]}"
                reappraisals.append(
                    {
                        "reappraisal_id": f"{source}-{vid}-{j + 1:02d}",
                        "vignette_id": vid,
                        "author_id": source,
                        "source": source,
                        "text": text,
                    }
                )
    meta = {"source": "sample", "seed": seed, "has_ratings": True, "has_emotion": True}
    return CanonicalData(
        vignettes=pd.DataFrame(vignettes, columns=VIGNETTE_COLUMNS),
        reappraisals=pd.DataFrame(reappraisals, columns=REAPPRAISAL_COLUMNS),
        ratings=pd.DataFrame(ratings, columns=RATING_COLUMNS),
        meta=meta,
    )
