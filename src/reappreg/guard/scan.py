"""What a scan engine hands back to the guard stage, whichever engine ran it: the hits, a
summary of each training source (``SourceSummary``), and the certificate's report-only
``semantic`` section. ``run`` (the local scan) and ``distributed`` (Ray Data, per shard on
the actors) both build these; neither imports the other's engine for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reappreg.guard.detector import Hit
from reappreg.guard.index import AnswerMeta
from reappreg.guard.text import SourceSummary, SourceTexts
from reappreg.hashing import dvc_md5
from reappreg.settings.guard import SemanticSettings


@dataclass
class Scan:
    """What an engine hands back: the hits, each source's summary (in the order given), the
    fragment groups it checked by kind (``fragments.group_counts``; groups are per file on both
    engines, so the counts add up over shards) and the certificate's ``semantic`` section."""

    hits: list[Hit]
    sources: list[SourceSummary]
    groups: dict[str, int]
    semantic: dict[str, Any]


def summarise(src: SourceTexts) -> SourceSummary:
    """A source's summary: the md5 of the bytes that were read, and what they held."""
    return SourceSummary(src.spec, dvc_md5(src.spec.path), len(src.records), len(src.units))


def semantic_scorer(answers: Sequence[AnswerMeta], texts: Sequence[str], settings: SemanticSettings | None):
    """The report-only semantic scorer of the held-out ``answers``, or None when ``guard.semantic`` is off."""
    if settings is None or not settings.enabled:
        return None
    from reappreg.guard.semantic import SemanticScorer

    return SemanticScorer(answers, texts, model_spec=settings.model, batch_size=settings.batch_size)


def semantic_certificate(answers: int, scored, settings: SemanticSettings | None) -> dict[str, Any]:
    """The certificate's ``semantic`` section from each source's (or shard's) scored pairs."""
    if settings is None or not settings.enabled:
        return {"enabled": False, "blocking": False}
    from reappreg.guard.semantic import semantic_section

    return {"enabled": True, **semantic_section(answers, scored, model_spec=settings.model, threshold=settings.threshold,
                                                max_pairs=settings.max_pairs),
            "settings": settings.model_dump()}
