"""The ``ngram`` detector: exact word n-gram containment, |G(A) ∩ G(T)| / |G(A)| for a
held-out answer A and a training text T (a short answer embedded in a long text scores 1.0),
counted inside the best stretch of ``ngram.span`` x the answer's words, or a shared passage of
at least ``ngram.min_run`` consecutive words. Exact: a sorted-key join (``containment``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reappreg.guard.containment import containment_hits
from reappreg.guard.detector import Batch, Detector, RawHit
from reappreg.guard.grams import GramTable
from reappreg.guard.hashing import _NGRAM
from reappreg.guard.spans import word_spans
from reappreg.settings.guard import NgramSettings

if TYPE_CHECKING:
    from reappreg.guard.detector import DetectorIndex


class NgramDetector(Detector):
    name = "ngram"
    settings_model = NgramSettings
    label = "exact word n-grams"
    shown = ("n", "min_run", "containment")

    def word_grams(self, settings) -> list[tuple[int, int]]:
        return [(settings.ngram.n, _NGRAM)]

    stock_part = "ngram_sets"

    def gram_keys(self, texts) -> tuple:
        return texts.word_grams(texts.settings.ngram.n, _NGRAM)

    def build(self, answers) -> dict[str, Any]:
        return {"ngram_sets": answers.sets(*self.gram_keys(answers))}

    def derive(self, index: DetectorIndex) -> None:
        index.ngrams = GramTable(index.ngram_sets, index.token_counts)
        self.weigh(index, index.ngrams)

    def scan(self, index: DetectorIndex, batch: Batch, max_shared: int) -> tuple[list[RawHit], list[list[str]]]:
        s = index.settings.ngram
        grams, offsets = batch.word_grams(s.n, _NGRAM)
        hits = containment_hits(index.ngrams, len(batch), grams, offsets, n=s.n, containment=s.containment,
                                min_run=s.min_run, detector=self.name, span=s.span)
        spans = word_spans(index, batch.texts, [(t, a) for t, a, *_ in hits], s.n, _NGRAM, index.ngrams, max_shared,
                           (grams, offsets)) if max_shared else []
        return hits, spans

    def spans(self, index: DetectorIndex, texts: Sequence[str], requests, limit: int) -> list[list[str]]:
        return word_spans(index, texts, requests, index.settings.ngram.n, _NGRAM, index.ngrams, limit)

    def heldout_summary(self, index: DetectorIndex, answers: int) -> dict[str, Any]:
        n = index.settings.ngram.n
        return {"answers_shorter_than_ngram": sum(1 for c in index.token_counts[:answers] if c < n)}

    def threshold(self, settings) -> float:
        return settings.ngram.containment

    def answer_grams(self, index: DetectorIndex, answer: int) -> int:
        return len(index.ngram_sets[answer])

    def sketch_entry(self, index: DetectorIndex, answer: int) -> dict[str, Any]:
        return {"ngrams": sorted(f"{k:016x}" for k in index.ngram_sets[answer])}

    def read_sketch_entry(self, entry: dict[str, Any], settings) -> dict[str, Any]:
        return {"ngram_sets": frozenset(int(h, 16) for h in entry["ngrams"])}

    def complete(self, fields: dict[str, Any], settings) -> bool:
        return bool(fields["ngram_sets"])
