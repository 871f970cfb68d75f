"""Held-out sketches: what an outside team needs to check its texts, and no held-out text.

Design
------
* A master secret (32 random bytes, hex) lives in ``data/guard_secret/secret.key``. The guard
  stage creates it once and declares the folder as a ``persist: true`` DVC output, so DVC
  keeps it out of git (``.gitignore``) and never regenerates it; it travels only where the
  held-out data travels (DVC cache / remote).
* The sketch key for one held-out version is derived from it:
  ``HMAC-SHA256(secret, "reappreg-guard-sketch-key/v1|" + md5(held-out file))``, written to
  ``data/heldout/sketch.key`` beside the held-out answers. A new held-out version gets a new
  key, and the sketch is a deterministic function of (secret, held-out file), so an auditor
  holding the secret can re-derive it byte for byte.
* The sketch (``data/guard/heldout_sketch.json``) holds, per answer variant (the answer
  itself, and its round trip through each tokenizer view where that changes its words):
  its id, source, vignette id and view, the keyed hashes (``KeyedHasher``: HMAC-SHA256 under
  the sketch key, 64 bits) of its normalised word n-grams and shingles, the keyed hashes
  (BLAKE2b under the sketch key) of its letter windows, all sorted (not in text order), its
  word and letter counts, its MinHash signature over the keyed shingle hashes, and for the
  ``edits`` detector its content-word count and the keyed hashes of its content words' stems
  and one-edit typo variants, each paired with the word's position XOR-masked by a keyed
  value (``edits``: the pairs are sorted by hash, so without the key nobody can tell which
  hashes belong to one word, how long the words are, or their order); plus the
  normalisation version, the detector settings (the stock weighting's among them), the
  tokenizers (by file hash), a key fingerprint, and for the stock weights (``stock``) the
  reference corpus's size and md5 with, per weighted gram kind, the keyed hashes of the
  held-out grams it holds and in how many of its documents (how common a phrase is in honest
  writing: no held-out text, and no text of the reference either). It contains no held-out text (tests check that no answer n-gram, word
  sequence or answer text appears in it, and the leak scan checks it again).
* To check texts, a team needs the sketch *and* the key (``reappreg guard check --sketch S
  --key K texts.jsonl``). Publish the sketch freely; hand the key only to teams that need
  to run checks. Without the key, nothing in the sketch can be computed or tested (HMAC is
  a PRF). A key holder can confirm guesses, and by enumerating all word pairs of a large
  vocabulary (~10^8-10^9 HMACs for 2-word shingles) could recover shingles and chain them
  into answers: the key is confidential, and ``minhash.shingle_words`` below 2 would make
  that enumeration trivial (guessing 5-word n-grams blind is infeasible). The ``edits``
  part keys single words: a key holder enumerating a vocabulary (~10^6 HMACs) recovers each
  answer's content words in order. Treat the key as confidential as the held-out answers
  (give a team the key only where checking edited copies outside the pipeline is worth that).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.guard.hashing import KeyedHasher
from reappreg.guard.index import AnswerMeta, HeldoutIndex
from reappreg.guard.normalise import NORMALISATION
from reappreg.guard.registry import REGISTERED, settings_from_record, settings_record
from reappreg.guard.stock import Reference
from reappreg.io import read_versioned, write_text
from reappreg.settings.guard import GuardSettings

# v4: the reference corpus's document counts of held-out grams, for the stock weights (``stock``;
# a v3 sketch lacks them: refused); v3: the ``edits`` detector's keys
SKETCH_SCHEMA = "reappreg.guard.sketch/v4"
SECRET_FILE = "secret.key"
_HEX_KEY = re.compile(r"^[0-9a-f]{64}$")


def _read_hex_key(path: Path, what: str) -> bytes:
    if not path.exists():
        raise InputError(f"{path}: {what} not found")
    text = path.read_text(encoding="utf-8").strip()
    if not _HEX_KEY.match(text):
        raise InputError(f"{path}: {what} must be 64 lowercase hex characters")
    return bytes.fromhex(text)


def ensure_secret(secret_dir: str | Path) -> bytes:
    """The master secret in ``secret_dir``, created (random) on first use and never replaced."""
    path = Path(secret_dir) / SECRET_FILE
    if path.exists():
        return _read_hex_key(path, "guard master secret")
    secret = secrets.token_bytes(32)
    write_text(path, secret.hex() + "\n")
    return secret


def read_secret(secret_dir: str | Path) -> bytes:
    return _read_hex_key(Path(secret_dir) / SECRET_FILE, "guard master secret")


def derive_key(secret: bytes, heldout_md5: str) -> bytes:
    return hmac.digest(secret, f"reappreg-guard-sketch-key/v1|{heldout_md5}".encode(), "sha256")


def write_key(path: str | Path, key: bytes) -> None:
    write_text(path, key.hex() + "\n")


def read_key(path: str | Path) -> bytes:
    return _read_hex_key(Path(path), "sketch key")


def key_fingerprint(key: bytes) -> str:
    """Identifies a key without revealing it (lets a check refuse a mismatched key)."""
    return hmac.digest(key, b"reappreg-guard-key-fingerprint/v1", "sha256")[:8].hex()


def build_sketch(answers: list[AnswerMeta], texts: list[str], settings: GuardSettings, key: bytes, heldout_md5: str,
                 views=(), tokenizers: list[dict] | None = None) -> dict[str, Any]:
    """The sketch of the held-out answers (and their tokenizer views) under ``key``
    (deterministic): per answer variant its id, source, vignette, view, word and letter
    counts, and what each registered detector stores (``Detector.sketch_entry``)."""
    index = HeldoutIndex.build(answers, texts, settings, KeyedHasher(key), views=views)
    entries = []
    for i, meta in enumerate(index.answers):
        entry = {"answer_id": meta.answer_id, "source": meta.source, "vignette_id": meta.vignette_id, "view": meta.view,
                 "words": index.token_counts[i], "letters": index.letter_counts[i]}
        for detector in REGISTERED:
            entry.update(detector.sketch_entry(index, i))
        entries.append(entry)
    reference = index.reference
    return {
        "schema": SKETCH_SCHEMA,
        "hasher": KeyedHasher.kind,
        "key_fingerprint": key_fingerprint(key),
        "heldout_md5": heldout_md5,
        "normalisation": NORMALISATION,
        "detectors": settings_record(settings),
        "tokenizers": tokenizers or [],
        "reference": None if reference is None else {
            "documents": reference.docs, "md5": reference.md5,
            "counts": {kind: [[f"{int(k):016x}", int(c)] for k, c in zip(*found)] for kind, found in sorted(reference.counts.items())},
        },
        "answers": entries,
    }


def load_sketch(path: str | Path) -> dict[str, Any]:
    sketch = read_versioned(path, SKETCH_SCHEMA, what="a guard sketch")
    for field in ("key_fingerprint", "detectors", "answers"):
        if field not in sketch:
            raise InputError(f"{path}: sketch has no '{field}'")
    if not sketch["answers"]:
        raise InputError(f"{path}: sketch holds no answers: there is nothing to check against")
    return sketch


def index_from_sketch(sketch: dict[str, Any], key: bytes, source: str = "sketch") -> HeldoutIndex:
    """A held-out index from a sketch; refuses a key that is not the sketch's."""
    if key_fingerprint(key) != sketch["key_fingerprint"]:
        raise InputError(f"{source}: the key does not belong to this sketch (fingerprint mismatch)")
    if sketch["detectors"].get("normalisation") != NORMALISATION or sketch.get("hasher") != KeyedHasher.kind:
        raise InputError(
            f"{source}: sketch made with normalisation '{sketch['detectors'].get('normalisation')}' / hasher "
            f"'{sketch.get('hasher')}'; this version uses '{NORMALISATION}' / '{KeyedHasher.kind}'"
        )
    settings = settings_from_record(sketch["detectors"], source)
    answers: list[AnswerMeta] = []
    words: list[int] = []
    letter_counts: list[int] = []
    fields: dict[str, dict[str, list]] = {d.name: {} for d in REGISTERED}
    for i, entry in enumerate(sketch["answers"]):
        try:
            meta = AnswerMeta(str(entry["answer_id"]), entry.get("source"), entry.get("vignette_id"), str(entry["view"]))
            counts = int(entry["words"]), int(entry["letters"])
            parts = {d.name: d.read_sketch_entry(entry, settings) for d in REGISTERED}
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{source}: answer entry {i + 1} is malformed ({exc!r})") from exc
        answers.append(meta)
        words.append(counts[0])
        letter_counts.append(counts[1])
        for name, part in parts.items():
            for field, value in part.items():
                fields[name].setdefault(field, []).append(value)
        if not all(d.complete(parts[d.name], settings) for d in REGISTERED):
            raise InputError(f"{source}: answer entry {i + 1} ('{meta.answer_id}') is incomplete")
    for detector in REGISTERED:
        detector.verify_sketch(fields[detector.name], answers, settings, source)
    views = tuple(t["name"] for t in sketch.get("tokenizers", []))
    return HeldoutIndex(settings, KeyedHasher(key), answers, words, letter_counts, views,
                        {d.name: d.from_sketch(fields[d.name]) for d in REGISTERED}, _reference(sketch, source))


def _reference(sketch: dict[str, Any], source: str) -> Reference | None:
    """The reference corpus's counts a sketch carries (``stock.Reference``), or None."""
    import numpy as np

    entry = sketch.get("reference")
    if entry is None:
        return None
    try:
        counts = {}
        for kind, pairs in entry["counts"].items():
            keys = np.array([int(k, 16) for k, _ in pairs], dtype=np.uint64)
            order = np.argsort(keys)
            counts[kind] = keys[order], np.array([int(c) for _, c in pairs], dtype=np.int64)[order]
        return Reference(int(entry["documents"]), entry.get("md5"), None, counts)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{source}: the sketch's reference counts are malformed ({exc!r})") from exc


def sketch_digest(sketch: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a sketch (used to compare a re-derived sketch)."""
    import json

    return hashlib.sha256(json.dumps(sketch, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
