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
from typing import Any

from reappreg.errors import InputError
from reappreg.guard.certified import CERTIFICATE_SCHEMA, read_certificate, require_certified
from reappreg.guard.hashing import FastHasher
from reappreg.guard.registry import REGISTERED, settings_from_record, settings_record
from reappreg.settings.guard import GuardSettings

__all__ = ["CERTIFICATE_SCHEMA", "detector_rows", "detectors_section", "read_certificate", "require_certified",
           "settings_from_certificate", "sketch_tokenizers", "versions"]


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


def detector_rows() -> list[dict[str, Any]]:
    """The certificate's ``detector_rows``: each registered detector's row in the report's
    detector table (what it matches, which recorded settings to show), declared by the
    detector itself, so the report renders every detector the run had without importing one."""
    return [d.report_row() for d in REGISTERED]
