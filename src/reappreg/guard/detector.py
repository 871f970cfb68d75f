"""The detector interface: what one detector is, and the batch of texts it scans.

A detector is one class in one module of ``reappreg.guard`` (``ngram``, ``minhash``,
``chars``, ``fragments``, ``edits``), registered in ``registry.REGISTERED``. It names:

* ``name``: its name in hits, counts, the certificate and the sketch;
* ``settings_model``: its params section, ``guard.<name>``, a ``settings.guard.DetectorSection``
  (``GuardSettings`` has a field of that name and type; ``registry`` refuses to load otherwise);
* ``label`` / ``shown``: its row in the report's detector table (what it matches, which of
  its settings the row shows), recorded in the certificate (``detector_rows``) so the report
  renders what the run declared without importing a detector;
* ``record`` / ``read_record``: what the certificate and the sketch record of its settings
  under ``detectors.<name>`` (the section's values plus anything derived, such as the LSH
  error rates or a version), and reading that back for an audit (complete, same version);
* ``word_grams``: the word-gram kinds its scan needs (the batch hashes all of them at once);
* ``scan``: its raw hits over one ``Batch`` (and with ``max_shared`` each hit's shared
  passages); ``spans``: the shared passages of given (text, answer) pairs;
* ``threshold`` / ``answer_grams``: the threshold and the answer's size a hit reports;
* ``sketch_entry`` / ``from_sketch_entry``: what the sketch stores per answer for it.

* ``build`` / ``derive``: its part of the held-out index (``index.HeldoutIndex``), stored
  (what the sketch holds of it) and derived when the index is loaded (tables, LSH); a
  detector may read an earlier one's part (``fragments`` reads the letter windows of ``chars``);
* ``collect`` / ``group_hits`` (``groupwise`` detectors): per-batch state, then hits over
  groups of records once every batch is scanned;
* ``heldout_summary``: what the certificate says about the answers for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from reappreg.errors import InputError

if TYPE_CHECKING:
    from reappreg.guard.text import Group, TextUnit
    from reappreg.settings.guard import GuardSettings

TEXT_VIEW = "text"


@dataclass(frozen=True)
class AnswerMeta:
    answer_id: str
    source: str | None = None
    vignette_id: str | None = None
    view: str = TEXT_VIEW  # "text", or the tokenizer view this variant of the answer is


class DetectorIndex(Protocol):
    """What a detector sees of the held-out index (``index.HeldoutIndex``, built from the
    detectors in ``registry``): the settings and hasher, the answers (variants included), and
    every detector's stored and derived parts as attributes (``index.ngram_sets``,
    ``index.letters``). An interface here, so the detectors depend on what they implement and
    never on the index that composes them."""

    settings: GuardSettings
    hasher: Any
    answers: list[AnswerMeta]
    token_counts: list[int]
    letter_counts: list[int]
    reference: Any            # the honest reference corpus's counts (``stock.Reference``) or None
    stock_tables: dict[str, Any]

    def __getattr__(self, name: str) -> Any: ...

# (local text index, answer index, detector, score, reason, shared count, longest run)
RawHit = tuple[int, int, str, float, str, int, int]


@dataclass
class Hit:
    """One (training text or group, held-out answer, detector) at or above its threshold."""

    source: str
    record_id: str         # the record flagged (for fragments: one member of the group)
    field: str
    answer_id: str
    answer_source: str | None
    detector: str          # one of DETECTORS
    score: float           # exact containment / Jaccard / group coverage / in-order matched fraction
    threshold: float
    reason: str            # "containment" | "min_run" | "jaccard" | "coverage" | "lcs"
    shared_count: int      # distinct shared grams (edits: answer content words matched in order)
    longest_run: int       # longest shared run (words for ngram, letters for chars; 0 otherwise)
    answer_grams: int      # the answer's gram count for this detector (edits: its content words)
    view: str = TEXT_VIEW  # "text" or the tokenizer view in which it was found
    members: list[str] = field(default_factory=list)  # fragments: the records that together hold it
    shared: list[str] = field(default_factory=list)   # shared passages, normalised words, in text order
    group: str | None = None  # fragments: the group ("author_id=a7", "file") whose records hold it
    # attribution (``attribution``): every answer the matched text is closest to (this one among
    # them; two that match equally both), and the share of the matched text only they hold
    closest: list[str] = field(default_factory=list)
    separation: float | None = None

    def to_record(self, with_shared: bool = True) -> dict[str, Any]:
        record = asdict(self)
        record["score"] = round(self.score, 6)
        if not with_shared:
            record.pop("shared")
        return record

    @property
    def record_ids(self) -> list[str]:
        """The training records this hit flags (one: a fragments hit is reported per member)."""
        return [self.record_id]

    def score_text(self) -> str:
        """The score as a reader weighs it: the longest shared run for a run hit, else the score
        against its threshold (the guard's error messages and hit tables both show it)."""
        if self.reason == "min_run":
            return f"run {self.longest_run} {'letters' if self.detector == 'chars' else 'words'}"
        return f"{self.score:.3f} >= {self.threshold}"


@dataclass
class GroupContext:
    """What a groupwise detector needs once every batch is scanned: the units and their
    groups, every scanned text (views included) with its unit and view, and the per-text hits."""

    index: DetectorIndex
    units: Sequence[TextUnit]
    groups: Sequence[Group]
    texts: Sequence[str]
    unit_of: Sequence[int]
    view_of: Sequence[str]
    hits: Sequence[RawHit]
    max_shared: int


class Batch:
    """One batch of texts as the detectors see it, each view and gram kind computed once:
    the word and letter views (``normalise.scan_views``), the word-gram keys every
    registered detector asked for (one hashing pass), the letter windows and their lookup
    in the held-out letter table (shared by ``chars`` and ``fragments``)."""

    def __init__(self, index: DetectorIndex, texts: Sequence[str], word_specs: Sequence[tuple[int, int]],
                 views: Sequence[tuple[str | list[str], str]] | None = None) -> None:
        from reappreg.guard.hashing import FastHasher
        from reappreg.guard.normalise import ascii_words, scan_views

        self.index, self.texts = index, texts
        # ``views``: the texts' ``scan_views`` where the caller has them already (``detect._expand_views``)
        self.views = list(views) if views is not None else [scan_views(t) for t in texts]
        self._ascii_words = ascii_words
        specs = list(dict.fromkeys(word_specs))
        if not specs:
            found = []
        elif isinstance(index.hasher, FastHasher):
            found = index.hasher.grams_of_views([b[0] for b in self.views], specs)
        else:  # a keyed sketch hasher takes token lists
            found = index.hasher.grams_many(self.word_lists, specs)
        self._word_grams = dict(zip(specs, found))

    def __len__(self) -> int:
        return len(self.texts)

    def word_grams(self, n: int, domain: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets) of the word grams of ``n`` words in ``domain`` (``hashing``)."""
        return self._word_grams[(n, domain)]

    @cached_property
    def word_lists(self) -> list[list[str]]:
        """The texts' word-view tokens."""
        return [self._ascii_words(b[0]) if isinstance(b[0], str) else b[0] for b in self.views]

    @cached_property
    def letter_grams(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets) of the letter windows of ``chars.n`` letters of the letter view."""
        return self.index.hasher.letter_grams([b[1] for b in self.views], self.index.settings.chars.n)

    @cached_property
    def letter_lookup(self) -> tuple[np.ndarray, np.ndarray]:
        """``index.letters.lookup`` of ``letter_grams``."""
        return self.index.letters.lookup(self.letter_grams[0])


class Detector:
    """One detector (see the module docstring); subclasses set ``name``, ``settings_model``,
    ``label`` and ``shown``, and override."""

    name: ClassVar[str]
    settings_model: ClassVar[type]           # its params section (a settings.guard.DetectorSection)
    label: ClassVar[str]                     # what it matches, as the report's detector table says
    shown: ClassVar[tuple[str, ...]]         # the recorded settings that row shows
    derived: ClassVar[tuple[str, ...]] = ()  # recorded keys computed from the settings (not params)
    groupwise: ClassVar[bool] = False        # hits from groups of records (``collect`` per batch), not per text
    # the field of its index part whose per-answer key sets carry stock weights (``stock``;
    # ``gram_keys`` gives the same kind of keys for other texts, the reference corpus), or None
    stock_part: ClassVar[str | None] = None

    # -- settings, as params give them and as the certificate and sketch record them

    def section(self, settings: "GuardSettings") -> Any:
        return getattr(settings, self.name)

    def enabled(self, settings: "GuardSettings") -> bool:
        return True

    def record(self, settings: "GuardSettings") -> dict[str, Any]:
        return self.section(settings).model_dump(mode="json")

    def check_derived(self, entry: dict[str, Any], source: str) -> None:
        """Refuse a record whose derived keys say it was made by another version."""

    def read_record(self, entry: Any, source: str) -> dict[str, Any]:
        """The section's values from a recorded ``detectors.<name>``: every field present, no
        unknown key, derived keys of this version (InputError otherwise)."""
        fields = self.settings_model.model_fields
        if not isinstance(entry, dict):
            raise InputError(f"{source}: guard detector settings incomplete: 'detectors.{self.name}' is missing or not a mapping")
        missing = [f for f in fields if f not in entry] + [d for d in self.derived if d not in entry]
        if missing:
            raise InputError(f"{source}: guard detector settings incomplete: 'detectors.{self.name}' lacks {missing}")
        self.check_derived(entry, source)
        return {k: v for k, v in entry.items() if k not in self.derived}

    def report_row(self) -> dict[str, Any]:
        """Its row in the report's detector table, as the certificate records it."""
        return {"detector": self.name, "what": self.label, "shown": list(self.shown)}

    # -- its part of the held-out index

    def build(self, answers: Any) -> dict[str, Any]:
        """Its stored part of the held-out index from the answers (``index.AnswerTexts``):
        per-answer lists (or arrays) by name, in answer order; what the sketch stores of it
        (``sketch_entry``) reads back into the same (``read_sketch_entry``, ``from_sketch``)."""
        return {}

    def derive(self, index: DetectorIndex) -> None:
        """Set on ``index`` what the scan derives from the stored part (tables, LSH index),
        when the index is built or unpickled (detectors derive in registry order)."""

    def gram_keys(self, texts: Any) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets) of the grams it weights as stock (``stock_part``), for ``texts``
        (an ``index.AnswerTexts``: the answers, or the reference corpus)."""
        raise NotImplementedError(f"detector '{self.name}' weighs no grams")

    def weigh(self, index: DetectorIndex, table: Any) -> None:
        """Set the stock weights of its gram table (``stock.gram_weights``) and list the table
        for the certificate's stock summary."""
        from reappreg.guard.stock import gram_weights

        table.set_weights(gram_weights(table, index.answers, self.name, index.reference, index.settings.stock))
        index.stock_tables[self.name] = table

    def from_sketch(self, fields: dict[str, list]) -> dict[str, Any]:
        """Its stored part from the per-answer values ``read_sketch_entry`` gave."""
        return fields

    # -- the scan

    def word_grams(self, settings: "GuardSettings") -> list[tuple[int, int]]:
        """(n, domain) of the word grams ``build`` and ``scan`` read (of the answers, of a batch)."""
        return []

    def scan(self, index: DetectorIndex, batch: Batch, max_shared: int) -> tuple[list[RawHit], list[list[str]]]:
        """Raw hits of one batch and (with ``max_shared``) each hit's shared passages."""
        return [], []

    def collect(self, index: DetectorIndex, batch: Batch) -> np.ndarray | None:
        """A groupwise detector's per-batch state: a 3 x k array whose first row is the text
        index in the batch (``fragments``: its pieces)."""
        return None

    def group_hits(self, context: GroupContext, collected: np.ndarray) -> list[tuple[tuple, Hit]]:
        """A groupwise detector's hits, each with its key (source, record, field, answer, name)."""
        return []

    def spans(self, index: DetectorIndex, texts: Sequence[str], requests: Sequence[tuple[int, int]],
              limit: int) -> list[list[str]]:
        """Shared passages for (text index, answer index) pairs."""
        return [[] for _ in requests]

    def heldout_summary(self, index: DetectorIndex, answers: int) -> dict[str, Any]:
        """What the certificate's ``heldout`` section says about the first ``answers`` answers
        for this detector (e.g. how many are too short for it)."""
        return {}

    # -- hit rows

    def threshold(self, settings: "GuardSettings") -> float:
        raise NotImplementedError

    def answer_grams(self, index: DetectorIndex, answer: int) -> int:
        raise NotImplementedError

    # -- the sketch

    def sketch_entry(self, index: DetectorIndex, answer: int) -> dict[str, Any]:
        """What the sketch stores for this detector about one answer variant."""
        return {}

    def read_sketch_entry(self, entry: dict[str, Any], settings: "GuardSettings") -> dict[str, Any]:
        """``HeldoutIndex`` field values of one sketch answer entry (KeyError, TypeError or
        ValueError: malformed; an empty dict value's emptiness is checked by ``complete``)."""
        return {}

    def complete(self, fields: dict[str, Any], settings: "GuardSettings") -> bool:
        """Whether the values ``read_sketch_entry`` gave are enough to check against."""
        return True

    def verify_sketch(self, fields: dict[str, list], answers: Sequence[Any], settings: "GuardSettings", source: str) -> None:
        """Integrity checks over every answer of a sketch (InputError)."""
