"""The ``chars`` detector: exact containment / shared-run test on windows of ``chars.n``
letters of the letter view (skeleton, no spaces, no punctuation, no digits). Spaces removed,
words split by hyphens or odd separators, look-alike letters: none changes the letter view,
so none hides a copy. Pieces of an answer spread inside one longer text add up here (the
containment counts the answer's letters covered by every shared window inside the best
stretch of ``chars.span`` x the answer's letters)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reappreg.guard.containment import containment_hits
from reappreg.guard.detector import Batch, Detector, RawHit
from reappreg.guard.grams import GramTable
from reappreg.guard.spans import letter_spans
from reappreg.settings.guard import CharsSettings

if TYPE_CHECKING:
    from reappreg.guard.detector import DetectorIndex


class CharsDetector(Detector):
    name = "chars"
    settings_model = CharsSettings
    label = "character n-grams"
    shown = ("n", "min_run", "containment")

    stock_part = "letter_sets"

    def gram_keys(self, texts) -> tuple:
        return texts.letter_grams

    def build(self, answers) -> dict[str, Any]:
        return {"letter_sets": answers.sets(*self.gram_keys(answers))}

    def derive(self, index: DetectorIndex) -> None:
        # the letter windows' table (with their stock weights); ``fragments`` reads it too
        index.letters = GramTable(index.letter_sets, index.letter_counts)
        self.weigh(index, index.letters)

    def scan(self, index: DetectorIndex, batch: Batch, max_shared: int) -> tuple[list[RawHit], list[list[str]]]:
        s = index.settings.chars
        grams, offsets = batch.letter_grams
        hits = containment_hits(index.letters, len(batch), grams, offsets, n=s.n, containment=s.containment,
                                min_run=s.min_run, detector=self.name, span=s.span, letter_coverage=True,
                                looked_up=batch.letter_lookup)
        requests = [(t, a) for t, a, *_ in hits]
        spans = letter_spans(index, batch.texts, requests, max_shared, batch.letter_grams) if max_shared else []
        return hits, spans

    def spans(self, index: DetectorIndex, texts: Sequence[str], requests, limit: int) -> list[list[str]]:
        return letter_spans(index, texts, requests, limit)

    def heldout_summary(self, index: DetectorIndex, answers: int) -> dict[str, Any]:
        n = index.settings.chars.n
        return {"answers_shorter_than_letter_window": sum(1 for c in index.letter_counts[:answers] if c < n)}

    def threshold(self, settings) -> float:
        return settings.chars.containment

    def answer_grams(self, index: DetectorIndex, answer: int) -> int:
        return len(index.letter_sets[answer])

    def sketch_entry(self, index: DetectorIndex, answer: int) -> dict[str, Any]:
        return {"letter_grams": sorted(f"{k:016x}" for k in index.letter_sets[answer])}

    def read_sketch_entry(self, entry: dict[str, Any], settings) -> dict[str, Any]:
        return {"letter_sets": frozenset(int(h, 16) for h in entry["letter_grams"])}
