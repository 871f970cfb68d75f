"""The guard stage: check every training source, write the guarded copies, the quarantine
file, the sketch and its key, and the certificate (schema: ``certificate``).

``run_guard`` takes the ``guard`` params (``settings.guard.GuardSettings``) and where to
write (``GuardPaths``); ``load_heldout`` / ``load_training`` read and refuse empty or
ambiguous inputs. The auditor's re-check is ``audit``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.guard.certificate import (
    CERTIFICATE_SCHEMA,
    detector_rows,
    detectors_section,
    sketch_tokenizers,
    versions,
)
from reappreg.guard.decode import DECODE_VIEW_NAMES
from reappreg.guard.detect import DETECTORS, AnswerMeta, HeldoutIndex, Hit, check_units
from reappreg.guard.fragments import fragment_groups, group_counts
from reappreg.guard.hashing import FastHasher
from reappreg.guard.normalise import NORMALISATION
from reappreg.guard.scan import Scan, semantic_certificate, semantic_scorer, summarise
from reappreg.guard.registry import REGISTERED
from reappreg.guard.scripts import scripts_folded
from reappreg.guard.stock import summary as stock_summary
from reappreg.guard.sketch import (
    build_sketch,
    derive_key,
    ensure_secret,
    key_fingerprint,
    write_key,
)
from reappreg.guard.text import (
    SourceSpec,
    SourceTexts,
    TextUnit,
    read_source,
    read_training,
    record_ids,
)
from reappreg.guard.views import TokenizerView
from reappreg.hashing import dvc_md5
from reappreg.io import atomic_dir, read_jsonl, write_json, write_jsonl
from reappreg.settings.guard import GuardSettings

POLICIES = ("block", "quarantine")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
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


def check_training_specs(specs: Sequence[SourceSpec], heldout_path: Path | None = None) -> None:
    """Refuse a training list before any source is read: none given, the held-out file among
    them, a format the guarded copies cannot be written in, or two copies with one name."""
    if not specs:
        raise InputError("no training sources given: a guard over nothing certifies nothing")
    for spec in specs:
        if heldout_path is not None and spec.path.resolve() == heldout_path.resolve():
            raise InputError(f"{spec.path}: the held-out file cannot also be a training source")
        if spec.path.suffix.lower() not in JSONL_SUFFIXES:
            # read_source tells the format by suffix; the guarded copies are JSONL.
            raise InputError(f"{spec.path}: the guard stage takes JSONL training sources (.jsonl or .ndjson)")
    names = [spec.guarded_name for spec in specs]
    if len(set(names)) != len(names):
        raise InputError(f"training sources need distinct guarded file names (one folder holds them; use NAME=PATH:...): {names}")


def load_training(specs: Sequence[SourceSpec], heldout_path: Path | None, max_chars: int) -> list[SourceTexts]:
    """Every training source read and checked (``text.read_training``) on this machine."""
    check_training_specs(specs, heldout_path)
    return [read_training(spec, max_chars) for spec in specs]


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


@dataclass
class GuardOutcome:
    certificate: dict[str, Any]
    hits: list[Hit]

    @property
    def passed(self) -> bool:
        return self.certificate["result"] == "pass"


@dataclass(frozen=True)
class GuardPaths:
    """Where a guard run writes: the guarded copies' folder, the certificate, the quarantine
    file, the sketch, the master secret's folder and the sketch key."""

    guarded_dir: str | Path
    certificate_path: str | Path
    quarantine_path: str | Path
    sketch_path: str | Path
    secret_dir: str | Path
    sketch_key_path: str | Path


def run_guard(
    *,
    heldout: SourceSpec,
    train: Sequence[SourceSpec],
    settings: GuardSettings,
    paths: GuardPaths,
    tokenizers: Sequence[TokenizerView] = (),
    progress: Progress | None = None,
) -> GuardOutcome:
    """Check every training source against the held-out answers and write the stage outputs.

    Every text is checked as written, through each decoding view and through each of
    ``tokenizers`` (the consuming models' views); records are also checked in fragment
    groups. ``settings`` are the ``guard`` params: the detectors, ``policy``, ``workers``,
    ``chunk_size``, the reporting limits, ``max_text_chars`` and ``semantic`` (when enabled,
    the report-only semantic list is added to the certificate).

    ``block``: any hit fails (certificate ``result: fail``, hits in the quarantine file, no
    guarded copies). ``quarantine``: records with a hit are dropped from their guarded copy
    and listed in the quarantine file; the cleaned set passes. Without hits the guarded copies
    are byte-identical to the sources under either policy.
    """
    policy = settings.policy
    if policy not in POLICIES:
        raise InputError(f"guard policy must be one of {POLICIES} (got '{policy}')")
    started = time.perf_counter()
    guarded_dir, quarantine_path = Path(paths.guarded_dir), Path(paths.quarantine_path)
    sketch_path, certificate_path = paths.sketch_path, paths.certificate_path
    held = load_heldout(heldout)
    check_training_specs(train, heldout.path)
    heldout_md5 = dvc_md5(heldout.path)
    index = HeldoutIndex.build(held.answers, held.texts, settings, FastHasher(), views=tokenizers)
    if settings.engine == "ray":
        from reappreg.guard.distributed import scan_shards

        # Each actor reads, checks and summarises its shards: this process holds hits and counts.
        scan = scan_shards(index, train, settings=settings, views=tokenizers, workers=settings.workers,
                           max_shared=settings.max_shared_reported, address=settings.ray_address, heldout=held)
    else:
        scan = _scan_local(index, held, train, settings, tokenizers, progress)
    hits, summaries = scan.hits, scan.sources
    tokenizer_entries = [t.describe() for t in tokenizers]
    tokenizer_names = {t.name for t in tokenizers}
    flagged = _flagged(hits)
    passed = not hits or policy == "quarantine"

    # Sketch and its key depend only on the held-out set; written on every run.
    secret = ensure_secret(paths.secret_dir)
    key = derive_key(secret, heldout_md5)
    write_key(paths.sketch_key_path, key)
    write_json(sketch_path, build_sketch(held.answers, held.texts, settings, key, heldout_md5, views=tokenizers,
                                         tokenizers=sketch_tokenizers(tokenizer_entries)))

    action = "removed" if policy == "quarantine" else "blocked"
    write_jsonl(quarantine_path, ({**h.to_record(), "action": action} for h in hits))

    guarded: dict[str, Path] = {}
    guarded_md5: dict[str, str] = {}
    if passed:
        with atomic_dir(guarded_dir) as tmp:
            for summary in summaries:
                target = tmp / summary.spec.guarded_name
                # The copy must be the bytes that were scanned (on Ray they were read elsewhere): a source
                # rewritten since is refused, never copied with records nobody checked.
                shutil.copyfile(summary.spec.path, target)
                if dvc_md5(target) != summary.md5:
                    raise InputError(f"{summary.spec.path} changed while the guard scanned it (md5 was {summary.md5}): "
                                     "run the guard again")
                drop = flagged.get(str(summary.spec.path), set())
                if drop:  # parsed again here only to remove records, from the verified copy (JSONL, checked)
                    copy = SourceTexts(summary.spec, read_jsonl(target), [], "jsonl")
                    write_jsonl(target, [r for r, rid in zip(copy.records, record_ids(copy)) if rid not in drop])
                guarded_md5[str(summary.spec.path)] = dvc_md5(target) if drop else summary.md5
        guarded = {str(s.spec.path): guarded_dir / s.spec.guarded_name for s in summaries}
    elif guarded_dir.exists():
        shutil.rmtree(guarded_dir)  # a failing guard leaves no guarded training data behind

    training_entries = []
    for summary in summaries:
        path = str(summary.spec.path)
        ids = sorted(flagged.get(path, set()))
        training_entries.append(
            {
                "path": path,
                "guarded_name": summary.spec.guarded_name,
                "id_field": summary.spec.id_field,
                "text_fields": list(summary.spec.text_fields),
                "md5": summary.md5,
                "records": summary.records,
                "texts_checked": summary.texts,
                "flagged_records": len(ids),
                "flagged_ids": ids,
                "removed_ids": ids if policy == "quarantine" else [],
                "guarded_path": str(guarded[path]) if passed else None,
                "guarded_md5": guarded_md5[path] if passed else None,
                "guarded_records": (summary.records - (len(ids) if policy == "quarantine" else 0)) if passed else None,
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
            **{k: v for d in REGISTERED for k, v in d.heldout_summary(index, len(held.answers)).items()},
            "answer_variants": len(index.answers),
            "stock": stock_summary(index),
        },
        "training": training_entries,
        "guarded_dir": {"path": str(guarded_dir), "md5": dvc_md5(guarded_dir) if passed else None},
        "normalisation": NORMALISATION,
        "detectors": detectors_section(settings),
        "detector_rows": detector_rows(),
        "tokenizers": tokenizer_entries,
        "decode_views": list(DECODE_VIEW_NAMES),
        "views": scripts_folded(tokenizers),
        "groups": scan.groups,
        "counts": {
            "sources": len(summaries),
            "records_checked": sum(s.records for s in summaries),
            "texts_checked": sum(s.texts for s in summaries),
            "hits": len(hits),
            **{f"hits_{d}": sum(h.detector == d for h in hits) for d in DETECTORS},
            "hits_in_tokenizer_views": sum(h.view in tokenizer_names for h in hits),
            "hits_in_decode_views": sum(h.view in DECODE_VIEW_NAMES for h in hits),
            "flagged_records": sum(len(v) for v in flagged.values()),
            "removed_records": sum(len(v) for v in flagged.values()) if policy == "quarantine" else 0,
        },
        # Hits without the shared passages: those are held-out text and stay in the quarantine file.
        "hits": [h.to_record(with_shared=False) for h in hits[: settings.max_hits_in_certificate]],
        "hits_truncated": len(hits) > settings.max_hits_in_certificate,
        "semantic": scan.semantic,
        "quarantine": {"path": str(quarantine_path), "md5": dvc_md5(quarantine_path)},
        "sketch": {"path": str(sketch_path), "md5": dvc_md5(sketch_path), "key_fingerprint": key_fingerprint(key)},
        "versions": versions(),
    }
    write_json(certificate_path, certificate)
    return GuardOutcome(certificate, hits)


def _scan_local(index: HeldoutIndex, held: Heldout, train: Sequence[SourceSpec], settings: GuardSettings,
                tokenizers: Sequence[TokenizerView], progress: Progress | None) -> Scan:
    sources = load_training(train, held.spec.path, settings.max_text_chars)
    units = _all_units(sources)
    groups = fragment_groups(sources, settings)
    hits = check_units(index, units, groups=groups, views=tokenizers, workers=settings.workers,
                       chunk_size=settings.chunk_size, max_shared=settings.max_shared_reported,
                       progress=_progress_adapter(progress, len(units)))
    semantic = settings.semantic
    scorer = semantic_scorer(held.answers, held.texts, semantic)
    scored = [scorer.pairs(units, semantic.threshold, semantic.max_pairs)] if scorer else []
    return Scan(hits, [summarise(src) for src in sources], group_counts(groups),
                semantic_certificate(len(held.answers), scored, semantic))
