"""Semantic near-duplicates: a report for auditors, never a block.

Training texts whose MiniLM sentence embedding has cosine similarity above
``guard.semantic.threshold`` to a held-out answer are listed with both ids and the score.
Reappraisals of the same vignette are all alike by nature, so this list is evidence for a
human to read (a paraphrase the lexical detectors cannot see, a translation back into
English), not a gate; the certificate's ``semantic`` section holds it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.index import AnswerMeta
from reappreg.guard.text import TextUnit


def load_model(spec: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    from reappreg.lm import resolve_model

    location = resolve_model(spec, "guard.semantic.model", kind="encoder")
    if location.gguf_file:
        raise InputError(f"guard.semantic.model: '{spec}' is a GGUF file; the semantic report needs a sentence-transformers folder")
    return SentenceTransformer(str(location.folder), device="cpu", local_files_only=True), location


class SemanticScorer:
    """The model and the held-out answers' embeddings, loaded once; then any number of blocks
    of training texts (the local scan passes all of them, each Ray actor its shards)."""

    def __init__(self, answers: Sequence[AnswerMeta], answer_texts: Sequence[str], *, model_spec: str,
                 batch_size: int) -> None:
        self.answer_ids = [a.answer_id for a in answers]
        self.model, _ = load_model(model_spec)
        self.encode = dict(batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        self.held = self.model.encode(list(answer_texts), **self.encode).astype(np.float32)

    def pairs(self, units: Sequence[TextUnit], threshold: float, max_pairs: int) -> Scored:
        """How many of ``units`` were scored, how many (text, answer) pairs score >= ``threshold``,
        and the ``max_pairs`` highest of them, highest first (ties in the order of ``units``)."""
        pairs: list[dict[str, Any]] = []
        total = 0
        for start in range(0, len(units), 4096):
            block = units[start : start + 4096]
            emb = self.model.encode([u.text for u in block], **self.encode).astype(np.float32)
            sims = emb @ self.held.T
            rows, cols = np.nonzero(sims >= threshold)
            total += len(rows)
            for r, c in zip(rows.tolist(), cols.tolist()):
                u = block[r]
                pairs.append({"source": u.source, "record_id": u.record_id, "field": u.field,
                              "answer_id": self.answer_ids[c], "score": round(float(sims[r, c]), 4)})
        pairs.sort(key=lambda p: -p["score"])
        return Scored(len(units), total, pairs[:max_pairs])


@dataclass(frozen=True)
class Scored:
    texts: int
    above_threshold: int
    pairs: list[dict[str, Any]]  # the highest, highest first


def semantic_section(answers: int, scored: Sequence[Scored], *, model_spec: str, threshold: float,
                     max_pairs: int) -> dict[str, Any]:
    """The report over blocks scored apart (in the sources' order): the highest ``max_pairs``
    of all texts are among each block's highest ``max_pairs``, and a stable sort keeps ties in
    the sources' order, so this is the list one block of every text would give."""
    from reappreg.hashing import dvc_md5
    from reappreg.lm import resolve_model

    location = resolve_model(model_spec, "guard.semantic.model", kind="encoder")
    total = sum(s.above_threshold for s in scored)
    ranked = sorted((p for s in scored for p in s.pairs), key=lambda p: -p["score"])
    return {
        "blocking": False,
        "model": model_spec,
        "model_md5": dvc_md5(location.folder),
        "threshold": threshold,
        "texts": sum(s.texts for s in scored),
        "answers": answers,
        "pairs_above_threshold": total,
        "pairs": ranked[:max_pairs],
        "pairs_truncated": total > max_pairs,
    }


def semantic_report(answers: Sequence[AnswerMeta], answer_texts: Sequence[str], units: Sequence[TextUnit], *,
                    model_spec: str, threshold: float, batch_size: int, max_pairs: int) -> dict[str, Any]:
    """Every (training text, held-out answer) pair with cosine similarity >= ``threshold``."""
    scorer = SemanticScorer(answers, answer_texts, model_spec=model_spec, batch_size=batch_size)
    return semantic_section(len(answers), [scorer.pairs(units, threshold, max_pairs)], model_spec=model_spec,
                            threshold=threshold, max_pairs=max_pairs)
