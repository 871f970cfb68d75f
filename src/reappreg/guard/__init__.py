"""Separation guard: no training text may overlap a held-out eval answer, and a certificate says so.

Held-out answers (GPT-4-0314's and the frontier opponents') must never reach anything a model
trains on. The guard stage checks every training-text artifact against them, blocks (or
quarantines) overlaps, and writes a certificate an auditor can re-verify.

Modules
-------
* ``normalise``: normalisation by Unicode property (version ``NORMALISATION``), the word view
  and the letter view, UTS #39 skeletons through ICU; ``decode``: the decoding views
  (transfer encodings, HTML source, markup, upside-down text, transliteration, leetspeak);
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
  containment), ``fragments`` (an answer's pieces over the records of a group: a grouping the
  input declares, or a file's adjacent records), ``edits`` (a copy with many words edited:
  content words in order); ``containment``: the exact scoring ``ngram`` and ``chars`` share;
* ``stock``: stock phrasing weighted by measured frequency (held-out answers across
  scenarios, an honest reference corpus), in every count of shared grams;
* ``attribution``: every held-out answer a hit's matched text is closest to, and the share
  of it that separates them;
* ``detect``: the scan behind ``check_units`` (batches, worker processes, views, groups);
  ``distributed``: the same check on Ray Data over shards (``guard.engine: ray``); ``scan``:
  what either engine hands back (hits, a summary per source, the semantic section);
* ``spans``: the shared passages a hit reports;
* ``scripts``: which scripts each view folds to Latin letters (recorded in the certificate);
* ``views``: tokenizer views (``decode(encode(text))``), tokenizers named by file hash;
* ``semantic``: the report-only MiniLM similarity list;
* ``run``: the stage (``run_guard``); ``certificate``: the certificate's schema (in its
  docstring) and what the stage records; ``audit``: the auditor's re-check;
* ``certified``: the certificate reader training stages import (``require_certified``),
  which imports nothing of the scan;
* ``sketch``: the keyed held-out sketch for outside teams.

The seeded generators of disguised leaks the tests and benchmarks share are not part of the
library: ``benchmarks/guard_support/``.

The public entry
----------------
This package's ``__init__`` imports nothing: the names below resolve on first use (PEP 562),
each from the one module that defines it (``_LAZY``). Importing the certificate reader, a
detector or the normalisation therefore never loads the rest of the guard, and the DVC code
deps (``reappreg.dvcdeps``, which reads ``_LAZY``) of a stage that imports
``reappreg.guard.certified`` hold that module and this one, not the detectors. What it offers
is what the scan, the audit and the certificate readers need: the stage (``run_guard``,
``GuardPaths``), the check (``check_units``, ``HeldoutIndex``, ``AnswerMeta``, ``TextUnit``,
``Group``, ``SourceSpec``, ``read_source``, ``fragment_groups``, ``FastHasher``,
``DETECTORS``), the audit (``audit``), the certificate (``require_certified``,
``read_certificate``, ``CERTIFICATE_SCHEMA``), the sketch and the tokenizer views. Anything
else is imported from its module.

LSH error rates of the default MinHash banding (b = 32, r = 2): a pair with Jaccard J is never
a candidate with probability (1 - J^r)^b: 0.049 at J = 0.30 (the threshold), 0.0038 at 0.40,
0.0001 at 0.50. Verbatim, embedded, character-level and layout disguises never depend on LSH
(the n-gram and letter-window detectors are exact); the certificate records the numbers for
the banding in use (``detectors.minhash.lsh``).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it (read by ``reappreg.dvcdeps`` as a literal)
_LAZY = {
    # the stage and the audit
    "run_guard": "run", "GuardPaths": "run", "GuardOutcome": "run", "load_heldout": "run",
    "audit": "audit", "AuditReport": "audit",
    # the certificate reader
    "CERTIFICATE_SCHEMA": "certified", "read_certificate": "certified", "require_certified": "certified",
    # the check
    "check_units": "detect", "scan_texts": "detect", "DETECTORS": "registry",
    "HeldoutIndex": "index", "AnswerMeta": "detector", "Hit": "detector", "FastHasher": "hashing",
    "TextUnit": "text", "SourceSpec": "text", "Group": "text", "read_source": "text",
    "fragment_groups": "fragments",
    # the sketch
    "build_sketch": "sketch", "index_from_sketch": "sketch", "load_sketch": "sketch", "read_key": "sketch",
    "derive_key": "sketch", "ensure_secret": "sketch", "key_fingerprint": "sketch",
    # the tokenizer views
    "TokenizerSpec": "views", "TokenizerView": "views", "load_views": "views",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
