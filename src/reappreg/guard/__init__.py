"""Separation guard: no training text may overlap a held-out eval answer, and a certificate says so.

Held-out answers (GPT-4-0314's and the frontier opponents') must never reach anything a model
trains on. The guard stage checks every training-text artifact against them, blocks (or
quarantines) overlaps, and writes a certificate an auditor can re-verify.

Modules
-------
* ``normalise``: normalisation by Unicode property (version ``NORMALISATION``), the word view
  and the letter view, UTS #39 skeletons through ICU;
* ``hashing``: integer keys of word grams and letter windows, unkeyed or keyed (sketches);
* ``minhash``: datasketch-identical signatures and batched LSH lookups;
* ``index``: the held-out index (per detector its part: gram keys, signatures, LSH, ...),
  built from texts or a sketch; ``grams``: the exact-join gram table;
* ``detector``: the detector interface (``Detector``: name, settings section and what is
  recorded of it, scan over a ``Batch``, hit rows, sketch entries) and ``Hit``;
* ``registry``: the registered detectors, in order, and the detector settings as the
  certificate and the sketch record them (``settings_record`` / ``settings_from_record``);
  the settings themselves are the ``guard`` params (``reappreg.settings.guard``);
* one module per detector: ``ngram`` (word n-gram containment), ``minhash`` (shingle
  Jaccard on LSH candidates; datasketch-identical signatures), ``chars`` (letter-window
  containment), ``fragments`` (an answer spread over a group's records), ``edits`` (a copy
  with many words edited: content words in order); ``containment``: the exact scoring
  ``ngram`` and ``chars`` share;
* ``detect``: the scan behind ``check_units`` (batches, worker processes, views, groups);
* ``spans``: the shared passages a hit reports;
* ``scripts``: which scripts each view folds to Latin letters (recorded in the certificate);
* ``views``: tokenizer views (``decode(encode(text))``), tokenizers named by file hash;
* ``semantic``: the report-only MiniLM similarity list;
* ``run``: the stage (``run_guard``); ``certificate``: the certificate's schema (in its
  docstring) and ``require_certified``; ``audit``: the auditor's re-check;
* ``sketch``: the keyed held-out sketch for outside teams;
* ``disguise``: the seeded generator of disguised leaks the tests and the benchmark share.

LSH error rates of the default MinHash banding (b = 32, r = 2): a pair with Jaccard J is never
a candidate with probability (1 - J^r)^b: 0.049 at J = 0.30 (the threshold), 0.0038 at 0.40,
0.0001 at 0.50. Verbatim, embedded, character-level and layout disguises never depend on LSH
(the n-gram and letter-window detectors are exact); the certificate records the numbers for
the banding in use (``detectors.minhash.lsh``).
"""

from reappreg.guard.audit import AuditReport, audit
from reappreg.guard.certificate import CERTIFICATE_SCHEMA, require_certified
from reappreg.guard.detect import (
    DETECTORS,
    AnswerMeta,
    Group,
    HeldoutIndex,
    Hit,
    check_units,
    scan_texts,
)
from reappreg.guard.fragments import fragment_groups
from reappreg.guard.hashing import FastHasher, KeyedHasher
from reappreg.guard.minhash import lsh_error_rates
from reappreg.guard.normalise import NORMALISATION, letters, normalise, tokens
from reappreg.guard.registry import REGISTERED, settings_from_record, settings_record
from reappreg.guard.run import GuardOutcome, GuardPaths, load_heldout, run_guard
from reappreg.guard.sketch import (
    build_sketch,
    derive_key,
    ensure_secret,
    index_from_sketch,
    key_fingerprint,
    load_sketch,
    read_key,
)
from reappreg.guard.text import SourceSpec, TextUnit, read_source
from reappreg.guard.views import TokenizerSpec, TokenizerView, load_views

__all__ = [
    "CERTIFICATE_SCHEMA", "DETECTORS", "NORMALISATION", "REGISTERED", "AnswerMeta", "AuditReport", "FastHasher",
    "GuardOutcome", "GuardPaths", "Group", "HeldoutIndex", "Hit", "KeyedHasher", "SourceSpec", "TextUnit",
    "TokenizerSpec", "TokenizerView", "audit", "build_sketch", "check_units", "derive_key", "ensure_secret",
    "fragment_groups", "index_from_sketch", "key_fingerprint", "letters", "load_heldout", "load_sketch", "load_views",
    "lsh_error_rates", "normalise", "read_key", "read_source", "require_certified", "run_guard", "scan_texts",
    "settings_from_record", "settings_record", "tokens",
]
