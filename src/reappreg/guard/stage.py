"""The guard stage (check, guarded copies, certificate) and the auditor's re-check.

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
* ``detectors``: every detector's settings (``GuardConfig.to_dict``: ngram, minhash with
  its LSH error rates, chars, fragments), the normalisation again and the hasher kind;
* ``tokenizers``: per tokenizer view its name, spec, class, vocabulary size, the sha256 of
  each tokenizer file and ``files_sha256`` over them;
* ``groups``: how many fragment groups were checked, by kind;
* ``counts``: sources, records, texts, texts re-checked in a tokenizer view, hits in total
  and per detector, flagged and removed records;
* ``hits``: up to ``max_hits_in_certificate`` hits without their shared passages (those are
  held-out text; they are in the quarantine file only);
* ``semantic``: the report-only list of semantically similar (text, answer) pairs with the
  model's md5 and the threshold (``semantic.semantic_report``), or ``{"enabled": false}``;
* ``quarantine``, ``sketch`` (path, md5, key fingerprint), ``versions`` (python, reappreg,
  datasketch, numpy, scipy, transformers, tokenizers, sentence-transformers, PyICU, ICU).

``audit`` recomputes every hash, reloads every tokenizer and compares its file hash,
re-runs every detector (tokenizer views and fragment groups included) on the guarded copies
and on the sources, re-derives the sketch when the master secret is at hand, and recomputes
the semantic report; any difference is a problem, named.
"""

from __future__ import annotations

import platform
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.guard.config import GuardConfig
from reappreg.guard.decode import DECODE_VIEW_NAMES
from reappreg.guard.detect import DETECTORS, TEXT_VIEW, AnswerMeta, Group, HeldoutIndex, Hit, check_units
from reappreg.guard.hashing import FastHasher
from reappreg.guard.normalise import NORMALISATION
from reappreg.guard.views import TokenizerSpec, TokenizerView, files_digest
from reappreg.guard.sketch import (
    build_sketch,
    derive_key,
    ensure_secret,
    key_fingerprint,
    load_sketch,
    read_secret,
    sketch_digest,
    write_key,
)
from reappreg.guard.text import SourceSpec, SourceTexts, TextUnit, check_sizes, read_source
from reappreg.hashing import dvc_md5
from reappreg.io import atomic_dir, read_json, write_json, write_jsonl
from reappreg.settings.guard import SemanticSettings

CERTIFICATE_SCHEMA = "reappreg.guard.certificate/v2"
POLICIES = ("block", "quarantine")
HELDOUT_DEFAULTS = {"default_id": "answer_id", "default_text": ("text",)}

Progress = Callable[[int, int], None]  # (texts just done, total texts)


@dataclass
class Heldout:
    spec: SourceSpec
    answers: list[AnswerMeta]
    texts: list[str]
    records: int


def load_heldout(spec: SourceSpec) -> Heldout:
    """The held-out answers; an empty held-out set is an error, never a silent pass."""
    if len(spec.text_fields) != 1:
        raise InputError(f"held-out spec {spec.describe()}: name exactly one text field")
    src = read_source(spec)
    if not src.units:
        raise InputError(f"{spec.path}: held-out set is empty: there is nothing to guard against")
    by_id = {str(r.get(spec.id_field)): r for r in src.records} if spec.id_field else {}
    answers, texts = [], []
    for unit in src.units:
        record = by_id.get(unit.record_id, {})
        answers.append(AnswerMeta(unit.record_id, record.get("source"), record.get("vignette_id")))
        texts.append(unit.text)
    return Heldout(spec, answers, texts, len(src.records))


def load_training(specs: Sequence[SourceSpec], heldout_path: Path | None = None) -> list[SourceTexts]:
    if not specs:
        raise InputError("no training sources given: a guard over nothing certifies nothing")
    sources = []
    for spec in specs:
        if heldout_path is not None and spec.path.resolve() == heldout_path.resolve():
            raise InputError(f"{spec.path}: the held-out file cannot also be a training source")
        src = read_source(spec)
        if not src.records:
            raise InputError(f"{spec.path}: training source is empty (no records): refusing to certify an empty set")
        sources.append(src)
    return sources


def _versions() -> dict[str, str]:
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


def _progress_adapter(progress: Progress | None, total: int) -> Callable[[int], None] | None:
    if progress is None:
        return None
    return lambda done: progress(done, total)


def _all_units(sources: Sequence[SourceTexts]) -> list[TextUnit]:
    return [u for src in sources for u in src.units]


def _flagged(hits: Sequence[Hit]) -> dict[str, set[str]]:
    flagged: dict[str, set[str]] = {}
    for hit in hits:
        flagged.setdefault(hit.source, set()).update(hit.record_ids)
    return flagged


def fragment_groups(sources: Sequence[SourceTexts], config: GuardConfig) -> list[Group]:
    """The groups whose records may together hold one answer, over the units of ``sources``
    in order: a record's several text fields, each value of each ``group_fields`` field, and
    (``whole_file``) each source file."""
    groups: list[Group] = []
    start = 0
    for src in sources:
        path = str(src.spec.path)
        by_record: dict[str, list[int]] = {}
        for i, unit in enumerate(src.units):
            by_record.setdefault(unit.record_id, []).append(start + i)
        groups += [Group(path, f"record={rid}", tuple(m)) for rid, m in by_record.items() if len(m) > 1]
        record_fields = dict(zip(_record_ids(src), src.records))
        for field_name in config.fragments_group_fields:
            by_value: dict[str, list[str]] = {}
            for rid in by_record:
                value = record_fields[rid].get(field_name)
                if value not in (None, ""):
                    by_value.setdefault(str(value), []).append(rid)
            groups += [Group(path, f"{field_name}={value}", tuple(u for rid in rids for u in by_record[rid]))
                       for value, rids in sorted(by_value.items()) if len(rids) > 1]
        if config.fragments_whole_file and len(src.units) > 1:
            groups.append(Group(path, "file", tuple(range(start, start + len(src.units)))))
        start += len(src.units)
    return groups


def _group_counts(groups: Sequence[Group]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for g in groups:
        kind = g.label.split("=", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


@dataclass
class GuardOutcome:
    certificate: dict[str, Any]
    hits: list[Hit]

    @property
    def passed(self) -> bool:
        return self.certificate["result"] == "pass"


def run_guard(
    *,
    heldout: SourceSpec,
    train: Sequence[SourceSpec],
    config: GuardConfig,
    policy: str,
    guarded_dir: str | Path,
    certificate_path: str | Path,
    quarantine_path: str | Path,
    sketch_path: str | Path,
    secret_dir: str | Path,
    sketch_key_path: str | Path,
    workers: int = 1,
    chunk_size: int = 2000,
    max_shared: int = 10,
    max_hits_in_certificate: int = 200,
    tokenizers: Sequence[TokenizerView] = (),
    semantic: SemanticSettings | None = None,
    progress: Progress | None = None,
    max_text_chars: int | None = None,
) -> GuardOutcome:
    """Check every training source against the held-out answers and write the stage outputs.

    Every text is checked as written and through each of ``tokenizers`` (the consuming
    models' views); records are also checked in fragment groups. ``semantic`` (when enabled)
    adds the report-only semantic list to the certificate.

    ``block``: any hit fails (certificate ``result: fail``, hits in the quarantine file, no
    guarded copies). ``quarantine``: records with a hit are dropped from their guarded copy
    and listed in the quarantine file; the cleaned set passes. Without hits the guarded copies
    are byte-identical to the sources under either policy.
    """
    if policy not in POLICIES:
        raise InputError(f"guard policy must be one of {POLICIES} (got '{policy}')")
    started = time.perf_counter()
    guarded_dir, quarantine_path = Path(guarded_dir), Path(quarantine_path)
    held = load_heldout(heldout)
    sources = load_training(train, heldout.path)
    for src in sources:
        if src.format != "jsonl":
            raise InputError(f"{src.spec.path}: the guard stage takes JSONL training sources (got {src.format})")
    names = [src.spec.guarded_name for src in sources]
    if len(set(names)) != len(names):
        raise InputError(f"training sources need distinct guarded file names (one folder holds them; use NAME=PATH:...): {names}")

    heldout_md5 = dvc_md5(heldout.path)
    index = HeldoutIndex.build(held.answers, held.texts, config, FastHasher(), views=tokenizers)
    units = _all_units(sources)
    if max_text_chars is not None:
        check_sizes(units, max_text_chars)
    groups = fragment_groups(sources, config)
    hits = check_units(index, units, groups=groups, views=tokenizers, workers=workers, chunk_size=chunk_size,
                       max_shared=max_shared, progress=_progress_adapter(progress, len(units)))
    tokenizer_entries = [t.describe() for t in tokenizers]
    tokenizer_names = {t.name for t in tokenizers}
    semantic_section = _semantic(held, units, semantic)
    flagged = _flagged(hits)
    passed = not hits or policy == "quarantine"

    # Sketch and its key depend only on the held-out set; written on every run.
    secret = ensure_secret(secret_dir)
    key = derive_key(secret, heldout_md5)
    write_key(sketch_key_path, key)
    write_json(sketch_path, build_sketch(held.answers, held.texts, config, key, heldout_md5, views=tokenizers,
                                         tokenizers=_sketch_tokenizers(tokenizer_entries)))

    action = "removed" if policy == "quarantine" else "blocked"
    write_jsonl(quarantine_path, ({**h.to_record(), "action": action} for h in hits))

    guarded: dict[str, Path] = {}
    if passed:
        with atomic_dir(guarded_dir) as tmp:
            for src in sources:
                target = tmp / src.spec.guarded_name
                drop = flagged.get(str(src.spec.path), set())
                if drop:
                    kept = [r for r, rid in zip(src.records, _record_ids(src)) if rid not in drop]
                    write_jsonl(target, kept)
                else:
                    shutil.copyfile(src.spec.path, target)  # byte-identical: same md5 as the source
        guarded = {str(src.spec.path): guarded_dir / src.spec.guarded_name for src in sources}
    elif guarded_dir.exists():
        shutil.rmtree(guarded_dir)  # a failing guard leaves no guarded training data behind

    training_entries = []
    for src in sources:
        path = str(src.spec.path)
        ids = sorted(flagged.get(path, set()))
        training_entries.append(
            {
                "path": path,
                "guarded_name": src.spec.guarded_name,
                "id_field": src.spec.id_field,
                "text_fields": list(src.spec.text_fields),
                "md5": dvc_md5(src.spec.path),
                "records": len(src.records),
                "texts_checked": len(src.units),
                "flagged_records": len(ids),
                "flagged_ids": ids,
                "removed_ids": ids if policy == "quarantine" else [],
                "guarded_path": str(guarded[path]) if passed else None,
                "guarded_md5": dvc_md5(guarded[path]) if passed else None,
                "guarded_records": (len(src.records) - (len(ids) if policy == "quarantine" else 0)) if passed else None,
            }
        )
    by_source: dict[str, int] = {}
    for a in held.answers:
        by_source[str(a.source)] = by_source.get(str(a.source), 0) + 1
    certificate = {
        "schema": CERTIFICATE_SCHEMA,
        "result": "pass" if passed else "fail",
        "policy": policy,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 3),
        "heldout": {
            "path": str(heldout.path),
            "id_field": heldout.id_field,
            "text_fields": list(heldout.text_fields),
            "md5": heldout_md5,
            "answers": len(held.answers),
            "answers_by_source": dict(sorted(by_source.items())),
            "answers_shorter_than_ngram": sum(1 for c in index.token_counts[: len(held.answers)] if c < config.ngram_n),
            "answers_shorter_than_letter_window": sum(1 for c in index.letter_counts[: len(held.answers)] if c < config.chars_n),
            "answer_variants": len(index.answers),
        },
        "training": training_entries,
        "guarded_dir": {"path": str(guarded_dir), "md5": dvc_md5(guarded_dir) if passed else None},
        "normalisation": NORMALISATION,
        "detectors": {**config.to_dict(), "hasher": FastHasher.kind},
        "tokenizers": tokenizer_entries,
        "decode_views": list(DECODE_VIEW_NAMES),
        "groups": _group_counts(groups),
        "counts": {
            "sources": len(sources),
            "records_checked": sum(len(s.records) for s in sources),
            "texts_checked": len(units),
            "hits": len(hits),
            **{f"hits_{d}": sum(h.detector == d for h in hits) for d in DETECTORS},
            "hits_in_tokenizer_views": sum(h.view in tokenizer_names for h in hits),
            "hits_in_decode_views": sum(h.view in DECODE_VIEW_NAMES for h in hits),
            "flagged_records": sum(len(v) for v in flagged.values()),
            "removed_records": sum(len(v) for v in flagged.values()) if policy == "quarantine" else 0,
        },
        # Hits without the shared passages: those are held-out text and stay in the quarantine file.
        "hits": [h.to_record(with_shared=False) for h in hits[:max_hits_in_certificate]],
        "hits_truncated": len(hits) > max_hits_in_certificate,
        "semantic": semantic_section,
        "quarantine": {"path": str(quarantine_path), "md5": dvc_md5(quarantine_path)},
        "sketch": {"path": str(sketch_path), "md5": dvc_md5(sketch_path), "key_fingerprint": key_fingerprint(key)},
        "versions": _versions(),
    }
    write_json(certificate_path, certificate)
    return GuardOutcome(certificate, hits)


def _semantic(held: "Heldout", units: Sequence[TextUnit], settings: SemanticSettings | None) -> dict[str, Any]:
    if settings is None or not settings.enabled:
        return {"enabled": False, "blocking": False}
    from reappreg.guard.semantic import semantic_report

    return {"enabled": True, **semantic_report(held.answers, held.texts, units, model_spec=settings.model,
                                               threshold=settings.threshold, batch_size=settings.batch_size,
                                               max_pairs=settings.max_pairs),
            "settings": settings.model_dump()}


def _sketch_tokenizers(entries: Sequence[dict]) -> list[dict]:
    return [{"name": e["name"], "files_sha256": e["files_sha256"]} for e in entries]


def _record_ids(src: SourceTexts) -> list[str]:
    if src.format == "text":
        return [str(r["id"]) for r in src.records]
    if src.spec.id_field is None:
        return [f"line:{i + 1}" for i in range(len(src.records))]
    return [str(r[src.spec.id_field]) for r in src.records]


# ----------------------------------------------------------------------------- audit


@dataclass
class AuditReport:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _check_md5(report: AuditReport, what: str, path: Path, expected: str | None) -> bool:
    if expected is None:
        report.problems.append(f"{what}: the certificate records no hash for {path}")
        return False
    if not path.exists():
        report.problems.append(f"{what}: {path} is missing")
        return False
    actual = dvc_md5(path)
    if actual != expected:
        report.problems.append(f"{what}: {path} has md5 {actual}, the certificate says {expected} (changed since certified)")
        return False
    return True


def audit(
    certificate_path: str | Path,
    *,
    root: str | Path = ".",
    secret_dir: str | Path | None = None,
    workers: int = 1,
    chunk_size: int = 2000,
    progress: Progress | None = None,
) -> AuditReport:
    """Re-verify a certificate from the artifacts it names: hashes, then the check itself.

    Problems: a failing certificate; any artifact whose md5 differs from the certificate;
    any hit in the guarded copies; flagged records on the sources that differ from those
    certified; a sketch that is not the one derived from this held-out set (when the
    master secret is available). Paths in the certificate are taken relative to ``root``.
    """
    report = AuditReport()
    cert = read_json(certificate_path)
    if not isinstance(cert, dict) or cert.get("schema") != CERTIFICATE_SCHEMA:
        raise InputError(f"{certificate_path}: not a guard certificate (expected schema '{CERTIFICATE_SCHEMA}')")
    root = Path(root)
    try:
        heldout_c, training_c, detectors = cert["heldout"], cert["training"], cert["detectors"]
    except KeyError as exc:
        raise InputError(f"{certificate_path}: certificate has no {exc}") from exc
    if cert.get("result") != "pass":
        report.problems.append(f"certificate result is '{cert.get('result')}': the guard did not pass")
    if detectors.get("normalisation") != NORMALISATION or cert.get("normalisation") != NORMALISATION:
        report.problems.append(
            f"certificate normalisation '{cert.get('normalisation')}' is not this version's '{NORMALISATION}': cannot re-check"
        )
        return report
    if detectors.get("hasher") != FastHasher.kind:
        report.problems.append(f"certificate hasher '{detectors.get('hasher')}' is not this version's '{FastHasher.kind}': cannot re-check")
        return report
    config = GuardConfig.from_dict(detectors)
    if config.to_dict() != {k: v for k, v in detectors.items() if k != "hasher"}:
        report.problems.append("certificate detector settings do not round-trip (edited or from another version): "
                               f"certified {detectors}, re-checking would use {config.to_dict()}")
    tokenizers = _audit_tokenizers(report, cert.get("tokenizers", []), root)
    if tokenizers is None:
        return report
    if cert.get("versions", {}).get("datasketch") != _versions()["datasketch"]:
        report.notes.append(f"datasketch {_versions()['datasketch']} re-checks a certificate made with "
                            f"{cert.get('versions', {}).get('datasketch')}")

    heldout_spec = SourceSpec(root / heldout_c["path"], heldout_c["id_field"], tuple(heldout_c["text_fields"]))
    heldout_ok = _check_md5(report, "held-out set", heldout_spec.path, heldout_c.get("md5"))
    for entry in training_c:
        _check_md5(report, "training source", root / entry["path"], entry.get("md5"))
        if cert.get("result") == "pass":
            _check_md5(report, "guarded copy", root / str(entry.get("guarded_path")), entry.get("guarded_md5"))
    for key in ("quarantine", "sketch"):
        if key in cert:
            _check_md5(report, key, root / cert[key]["path"], cert[key].get("md5"))

    if not heldout_spec.path.exists():
        report.problems.append("cannot re-run the check without the held-out set")
        return report
    held = load_heldout(heldout_spec)
    index = HeldoutIndex.build(held.answers, held.texts, config, FastHasher(), views=tokenizers)

    # 1. What training reads (the guarded copies) must be clean.
    guarded_specs = [
        SourceSpec(root / e["guarded_path"], e["id_field"], tuple(e["text_fields"]))
        for e in training_c if e.get("guarded_path") and (root / e["guarded_path"]).exists()
    ]
    # 2. The sources must flag exactly the records the certificate lists.
    source_specs = [SourceSpec(root / e["path"], e["id_field"], tuple(e["text_fields"]))
                    for e in training_c if (root / e["path"]).exists()]
    guarded_src = [read_source(s) for s in guarded_specs]
    source_src = [read_source(s) for s in source_specs]
    units = _all_units(guarded_src) + _all_units(source_src)
    groups = fragment_groups(guarded_src + source_src, config)
    hits = check_units(index, units, groups=groups, views=tokenizers, workers=workers, chunk_size=chunk_size,
                       progress=_progress_adapter(progress, len(units)))
    if _group_counts(fragment_groups(source_src, config)) != cert.get("groups"):
        report.problems.append(f"fragment groups of the sources now {_group_counts(fragment_groups(source_src, config))}, "
                               f"certified {cert.get('groups')}")
    guarded_paths = {str(s.path) for s in guarded_specs}
    guarded_hits = [h for h in hits if h.source in guarded_paths]
    for h in guarded_hits:
        report.problems.append(
            f"guarded copy {h.source}: record '{h.record_id}' ({h.field}) overlaps held-out answer '{h.answer_id}' "
            f"({h.detector} {h.score:.3f} >= {h.threshold}, view {h.view}"
            + (f", records {h.members}" if h.members else "") + ")"
        )
    report.hits = guarded_hits
    source_flagged = _flagged([h for h in hits if h.source not in guarded_paths])
    for entry in training_c:
        path = str(root / entry["path"])
        certified = set(entry.get("flagged_ids", []))
        found = source_flagged.get(path, set())
        if found != certified:
            extra, missing = sorted(found - certified), sorted(certified - found)
            detail = []
            if extra:
                detail.append(f"flagged now but not certified: {extra[:10]}")
            if missing:
                detail.append(f"certified but not flagged now: {missing[:10]}")
            report.problems.append(f"training source {entry['path']}: re-check disagrees with the certificate ({'; '.join(detail)})")
    if not heldout_ok:
        report.notes.append("the re-check ran against the held-out file as it is now, not as certified")

    # 3. The semantic report (report only) must be reproducible.
    _audit_semantic(report, cert.get("semantic", {}), held, _all_units(source_src), root)

    # 4. The published sketch must be the one derived from this held-out set.
    if "sketch" in cert:
        secret_path = Path(secret_dir) if secret_dir is not None else None
        if secret_path is None or not (secret_path / "secret.key").exists():
            report.notes.append("sketch not re-derived: the guard master secret is not available here")
        else:
            key = derive_key(read_secret(secret_path), heldout_c["md5"])
            if key_fingerprint(key) != cert["sketch"].get("key_fingerprint"):
                report.problems.append("sketch key: the key derived from the master secret is not the certified one")
            sketch_file = root / cert["sketch"]["path"]
            if sketch_file.exists():
                rebuilt = build_sketch(held.answers, held.texts, config, key, heldout_c["md5"], views=tokenizers,
                                       tokenizers=_sketch_tokenizers(cert.get("tokenizers", [])))
                if sketch_digest(rebuilt) != sketch_digest(load_sketch(sketch_file)):
                    report.problems.append(f"sketch {cert['sketch']['path']} is not the sketch of the certified held-out set")
    return report


def _audit_tokenizers(report: AuditReport, entries: Sequence[dict], root: Path) -> list[TokenizerView] | None:
    """Reload each certified tokenizer; its files must hash as certified (None: cannot re-check)."""
    views = []
    for entry in entries:
        spec = TokenizerSpec(entry["name"], entry["spec"])
        try:
            view = TokenizerView(spec, base=root)
        except InputError as exc:
            report.problems.append(f"tokenizer '{spec.name}' ({spec.spec}): cannot be loaded for the re-check: {exc}")
            return None
        if view.files != entry.get("files") or files_digest(view.files) != entry.get("files_sha256"):
            changed = sorted(set(view.files.items()) ^ set((entry.get("files") or {}).items()))
            report.problems.append(
                f"tokenizer '{spec.name}' ({spec.spec}): files hash {view.files_sha256}, the certificate says "
                f"{entry.get('files_sha256')} (differing files: {sorted({name for name, _ in changed})})"
            )
            return None
        views.append(view)
    return views


def _audit_semantic(report: AuditReport, certified: dict, held: "Heldout", units: Sequence[TextUnit], root: Path) -> None:
    if not certified.get("enabled"):
        report.notes.append("no semantic report in the certificate (guard.semantic.enabled was false)")
        return
    from reappreg.guard.semantic import semantic_report

    settings = SemanticSettings.model_validate(certified["settings"])
    rerun = semantic_report(held.answers, held.texts, units, model_spec=settings.model, threshold=settings.threshold,
                            batch_size=settings.batch_size, max_pairs=settings.max_pairs)
    if rerun["model_md5"] != certified.get("model_md5"):
        report.problems.append(f"semantic report: model {settings.model} has md5 {rerun['model_md5']}, "
                               f"the certificate says {certified.get('model_md5')}")
        return
    # Pairs within 1e-3 of the threshold may flip with floating-point order; all others must agree.
    def clear(pairs):
        return {(p["source"], p["record_id"], p["field"], p["answer_id"]) for p in pairs
                if abs(p["score"] - settings.threshold) > 1e-3}

    if rerun["pairs_above_threshold"] != certified.get("pairs_above_threshold") and clear(rerun["pairs"]) != clear(certified.get("pairs", [])):
        report.problems.append(f"semantic report: re-run lists {rerun['pairs_above_threshold']} pairs above "
                               f"{settings.threshold}, the certificate {certified.get('pairs_above_threshold')}")


def require_certified(certificate_path: str | Path, text_inputs: dict[str, str | Path]) -> dict:
    """Refuse to train unless the guard passed and certified these exact text files.

    Every training stage calls this. Each input's current md5 must equal the md5 of a
    guarded copy listed in the certificate (compared by content, so the check does not
    depend on where the files are). Returns the certificate.
    """
    from reappreg.errors import GuardViolation

    raw = read_json(certificate_path)
    if not isinstance(raw, dict) or raw.get("schema") != CERTIFICATE_SCHEMA:
        raise InputError(f"{certificate_path}: not a guard certificate (expected schema '{CERTIFICATE_SCHEMA}')")
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
