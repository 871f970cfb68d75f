"""The guard certificate: its schema, what it records beyond the run, and ``require_certified``.

Certificate schema (``reappreg.guard.certificate/v2``, ``data/guard/certificate.json``)
-------------------------------------------------------------------------------------
* ``schema``, ``result`` (``pass`` | ``fail``), ``policy``, ``created_at``, ``seconds``;
* ``heldout``: path, id/text fields, md5, answer count, answers by source, how many answers
  are shorter than the word n-gram / the letter window (only the other detectors see those),
  ``answer_variants`` (answers plus their differing tokenizer views);
* ``training``: per source its path, guarded name, fields, md5, records, texts checked,
  flagged ids, removed ids, guarded copy path / md5 / records (null when blocked);
* ``guarded_dir``: path and DVC md5 of the folder of guarded copies;
* ``normalisation``: the normalisation version (``normalise.NORMALISATION``);
* ``detectors``: every registered detector's settings (``registry.settings_record``: ngram,
  minhash with its scheme and LSH error rates, chars, fragments, edits with its version), the
  normalisation again and the hasher kind;
* ``tokenizers``: per tokenizer view its name, spec, class, vocabulary size, the sha256 of
  each tokenizer file and ``files_sha256`` over them;
* ``decode_views``: the decoding views' names; ``views``: per view (``text``, each decoding
  view, each tokenizer view) the share of letters of each script or letter-like block that it
  folds to ASCII letters (``views.scripts_folded``, ``scripts.scripts_folded``);
* ``groups``: how many fragment groups were checked, by kind;
* ``counts``: sources, records, texts, texts re-checked in a tokenizer view, hits in total
  and per detector, flagged and removed records;
* ``hits``: up to ``max_hits_in_certificate`` hits without their shared passages (those are
  held-out text; they are in the quarantine file only);
* ``semantic``: the report-only list of semantically similar (text, answer) pairs with the
  model's md5 and the threshold (``semantic.semantic_report``), or ``{"enabled": false}``;
* ``quarantine``, ``sketch`` (path, md5, key fingerprint), ``versions`` (python, reappreg,
  datasketch, numpy, scipy, transformers, tokenizers, sentence-transformers, PyICU, ICU).

``run.run_guard`` writes it; ``audit.audit`` recomputes every hash, reloads every tokenizer
and compares its file hash, re-runs every detector (tokenizer views and fragment groups
included) on the guarded copies and on the sources, re-derives the sketch when the master
secret is at hand, and recomputes the semantic report; any difference is a problem, named.
Every training stage calls ``require_certified`` before it reads a text.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.guard.hashing import FastHasher
from reappreg.guard.registry import settings_from_record, settings_record
from reappreg.hashing import dvc_md5
from reappreg.io import read_json
from reappreg.settings.guard import GuardSettings

CERTIFICATE_SCHEMA = "reappreg.guard.certificate/v2"


def read_certificate(certificate_path: str | Path) -> dict[str, Any]:
    """A guard certificate (InputError for anything else)."""
    raw = read_json(certificate_path)
    if not isinstance(raw, dict) or raw.get("schema") != CERTIFICATE_SCHEMA:
        raise InputError(f"{certificate_path}: not a guard certificate (expected schema '{CERTIFICATE_SCHEMA}')")
    return raw


def detectors_section(settings: GuardSettings) -> dict[str, Any]:
    """The certificate's ``detectors``: the recorded settings and the hasher kind."""
    return {**settings_record(settings), "hasher": FastHasher.kind}


def settings_from_certificate(detectors: Any, source: str = "certificate") -> GuardSettings:
    """The settings an audit re-checks with: exactly the certified ones (InputError when
    incomplete, or of another normalisation, hasher or detector version)."""
    if not isinstance(detectors, dict):
        raise InputError(f"{source}: certificate has no detector settings")
    if detectors.get("hasher") != FastHasher.kind:
        raise InputError(f"{source}: certificate hasher '{detectors.get('hasher')}' is not this version's "
                         f"'{FastHasher.kind}': cannot re-check")
    return settings_from_record({k: v for k, v in detectors.items() if k != "hasher"}, source)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("reappreg", "datasketch", "numpy", "scipy", "transformers", "tokenizers", "sentence-transformers",
                    "pyicu-wheels", "regex"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    import icu

    out["icu"] = icu.ICU_VERSION
    return out


def sketch_tokenizers(entries: Sequence[dict]) -> list[dict]:
    return [{"name": e["name"], "files_sha256": e["files_sha256"]} for e in entries]


def require_certified(certificate_path: str | Path, text_inputs: dict[str, str | Path]) -> dict:
    """Refuse to train unless the guard passed and certified these exact text files.

    Every training stage calls this. Each input's current md5 must equal the md5 of a
    guarded copy listed in the certificate (compared by content, so the check does not
    depend on where the files are). Returns the certificate.
    """
    from reappreg.errors import GuardViolation

    raw = read_certificate(certificate_path)
    if raw.get("result") != "pass":
        raise GuardViolation(f"{certificate_path}: the separation guard did not pass (result {raw.get('result')!r}); not training")
    entries = raw.get("training")
    if not isinstance(entries, list):
        raise InputError(f"{certificate_path}: 'training' must list the guarded sources")
    certified = set()
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("guarded_md5"):
            raise InputError(f"{certificate_path}: a 'training' entry of a passing certificate lacks 'guarded_md5'")
        certified.add(str(entry["guarded_md5"]))
    for name, path in text_inputs.items():
        md5 = dvc_md5(path)
        if md5 not in certified:
            raise GuardViolation(
                f"{path} ({name}, md5 {md5}) is not a guarded copy certified by {certificate_path}; re-run the guard"
            )
    return raw
