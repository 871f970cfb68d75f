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


def semantic_report(answers: Sequence[AnswerMeta], answer_texts: Sequence[str], units: Sequence[TextUnit], *,
                    model_spec: str, threshold: float, batch_size: int, max_pairs: int) -> dict[str, Any]:
    """Every (training text, held-out answer) pair with cosine similarity >= ``threshold``."""
    from reappreg.hashing import dvc_md5

    model, location = load_model(model_spec)
    encode = dict(batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    held = model.encode(list(answer_texts), **encode).astype(np.float32)
    pairs: list[dict[str, Any]] = []
    total = 0
    for start in range(0, len(units), 4096):
        block = units[start : start + 4096]
        emb = model.encode([u.text for u in block], **encode).astype(np.float32)
        sims = emb @ held.T
        rows, cols = np.nonzero(sims >= threshold)
        total += len(rows)
        for r, c in zip(rows.tolist(), cols.tolist()):
            u = block[r]
            pairs.append({"source": u.source, "record_id": u.record_id, "field": u.field,
                          "answer_id": answers[c].answer_id, "score": round(float(sims[r, c]), 4)})
    pairs.sort(key=lambda p: -p["score"])
    return {
        "blocking": False,
        "model": model_spec,
        "model_md5": dvc_md5(location.folder),
        "threshold": threshold,
        "texts": len(units),
        "answers": len(answers),
        "pairs_above_threshold": total,
        "pairs": pairs[:max_pairs],
        "pairs_truncated": total > max_pairs,
    }
