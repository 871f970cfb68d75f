"""Separation guard: no training text may overlap a held-out eval answer, and a certificate says so.

Held-out answers (GPT-4-0314's and the frontier opponents') must never reach anything a model
trains on. The guard stage checks every training-text artifact against them, blocks (or
quarantines) overlaps, and writes a certificate an auditor can re-verify.

Detectors (``detect``; settings ``guard.ngram`` / ``guard.minhash`` in params.yaml)
--------------------------------------------------------------------------------------
Texts are normalised first (``text``: NFKC, format characters dropped, case folded,
apostrophes dropped, punctuation/whitespace folded to single word boundaries), so curly
quotes, NBSP, zero-width spaces, full-width letters and case do not hide a copy.

1. ``ngram`` - exact word n-gram containment (default n = 5): the fraction of a held-out
   answer's n-grams found in the training text (>= 0.5 is a hit, so a short answer inside a
   500-word text scores 1.0), or a shared passage of >= 20 consecutive words (a long answer
   partly copied). Exact; nothing is sampled.
2. ``minhash`` - Jaccard similarity of 2-word shingle sets (>= 0.3 is a hit), for light
   paraphrase: word substitutions, insertions, deletions. A datasketch ``MinHashLSH`` index
   over the answers (num_perm 64, b = 32 bands x r = 2 rows) proposes candidates; every
   candidate is scored exactly on its shingle sets, so reported scores are true Jaccard
   values, never MinHash estimates. The only approximation is that LSH can miss a pair.

False-negative probability of the default banding (b = 32, r = 2). A pair with Jaccard J
never becomes a candidate with probability (1 - J^r)^b:

    J = 0.30 (the threshold)  0.049        J = 0.45  0.0007
    J = 0.35                  0.015        J = 0.50  0.0001
    J = 0.40                  0.0038       J = 0.60  6e-7

datasketch's objectives for this banding: false-negative integral over [0.3, 1] 0.0020
(mean miss probability 0.0029 for J uniform above the threshold), false-positive integral
over [0, 0.3] 0.147 (false candidates only cost time; they are scored exactly and dropped).
Verbatim and embedded copies never depend on LSH (the n-gram detector is exact); a text
with <= 20% of its words edited keeps Jaccard around 0.4-0.6 on 2-word shingles, where the
miss probability is 0.004 to 0.0001. The certificate records these numbers for the banding
actually used (``detectors.minhash.lsh``); with ``bands``/``rows`` null datasketch picks them
from ``threshold`` and ``weights``.

Stage, certificate, audit (``stage``)
-------------------------------------
``reappreg guard run`` reads each training source as ``PATH:ID_FIELD:TEXT_FIELD[,...]`` (all
are dvc.yaml deps) and the held-out set, and writes ``data/guarded/<same names>``
(byte-identical copies unless records were quarantined), ``data/guard/certificate.json``
(md5 of the held-out set, of every source and every guarded copy, detector settings, LSH
error rates, library versions, counts, result, time), ``data/guard/quarantine.jsonl`` (every
hit with the shared passages; held-out fragments, so not logged to MLflow) and the sketch.
Policy ``block`` fails on any hit; ``quarantine`` drops the records with hits from their
guarded copies and passes. ``reappreg guard audit CERT`` recomputes every hash and re-runs
the check; any mismatch or hit is a failure with the reason named.

Sketches (``sketch``)
---------------------
The held-out set is published as keyed hashes only (HMAC-SHA256 of normalised n-grams and
shingles, MinHash signatures over the keyed shingles); the key is derived from a master
secret kept with the held-out data. See ``reappreg.guard.sketch`` for the key design and
what a key holder can and cannot learn.
"""

from reappreg.guard.config import GuardConfig, lsh_error_rates
from reappreg.guard.detect import DETECTORS, AnswerMeta, Group, HeldoutIndex, Hit, check_units, scan_texts
from reappreg.guard.hashing import FastHasher, KeyedHasher
from reappreg.guard.normalise import NORMALISATION, letters, normalise, tokens
from reappreg.guard.sketch import build_sketch, derive_key, ensure_secret, index_from_sketch, key_fingerprint, load_sketch, read_key
from reappreg.guard.stage import AuditReport, GuardOutcome, audit, fragment_groups, load_heldout, run_guard
from reappreg.guard.text import SourceSpec, TextUnit, read_source
from reappreg.guard.views import TokenizerSpec, TokenizerView, load_views

__all__ = [
    "DETECTORS", "NORMALISATION", "AnswerMeta", "AuditReport", "FastHasher", "GuardConfig", "GuardOutcome", "Group",
    "HeldoutIndex", "Hit", "KeyedHasher", "SourceSpec", "TextUnit", "TokenizerSpec", "TokenizerView", "audit",
    "build_sketch", "check_units", "derive_key", "ensure_secret", "fragment_groups", "index_from_sketch",
    "key_fingerprint", "letters", "load_heldout", "load_sketch", "load_views", "lsh_error_rates", "normalise",
    "read_key", "read_source", "run_guard", "scan_texts", "tokens",
]
