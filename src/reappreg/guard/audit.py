"""The auditor's re-check of a guard certificate (``audit``).

Every hash the certificate names is recomputed, every certified tokenizer reloaded and its
files hashed, the certified detector settings read back (``certificate.settings_from_certificate``:
complete, same normalisation, hasher and detector versions), every registered detector re-run
on the guarded copies and on the sources (tokenizer views and fragment groups included), the
sketch re-derived when the master secret is at hand, and the semantic report recomputed; any
difference is a problem, named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reappreg.errors import InputError
from reappreg.guard.certificate import (
    detectors_section,
    read_certificate,
    settings_from_certificate,
    sketch_tokenizers,
    versions,
)
from reappreg.guard.detect import HeldoutIndex, Hit, check_units
from reappreg.guard.fragments import fragment_groups, group_counts
from reappreg.guard.hashing import FastHasher
from reappreg.guard.normalise import NORMALISATION
from reappreg.guard.run import (
    Heldout,
    Progress,
    _all_units,
    _flagged,
    _progress_adapter,
    load_heldout,
)
from reappreg.guard.scripts import scripts_folded
from reappreg.guard.sketch import (
    build_sketch,
    derive_key,
    key_fingerprint,
    load_sketch,
    read_secret,
    sketch_digest,
)
from reappreg.guard.text import SourceSpec, TextUnit, read_source
from reappreg.guard.views import TokenizerSpec, TokenizerView, files_digest
from reappreg.hashing import dvc_md5
from reappreg.settings.guard import SemanticSettings


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
    cert = read_certificate(certificate_path)
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
    settings = settings_from_certificate(detectors, str(certificate_path))
    if detectors_section(settings) != detectors:
        report.problems.append("certificate detector settings do not round-trip (edited or from another version): "
                               f"certified {detectors}, re-checking would use {detectors_section(settings)}")
    settings = _with_reference(report, settings, heldout_c.get("stock"), root)
    if settings is None:
        return report
    tokenizers = _audit_tokenizers(report, cert.get("tokenizers", []), root)
    if tokenizers is None:
        return report
    if "views" in cert and scripts_folded(tokenizers) != cert["views"]:
        report.notes.append("the scripts each view folds to Latin letters (views.scripts_folded) differ here from the "
                            "certified table (other Unicode, ICU or AnyAscii data): the re-check sees them as measured here")
    if cert.get("versions", {}).get("datasketch") != versions()["datasketch"]:
        report.notes.append(f"datasketch {versions()['datasketch']} re-checks a certificate made with "
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
    index = HeldoutIndex.build(held.answers, held.texts, settings, FastHasher(), views=tokenizers)

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
    groups = fragment_groups(guarded_src + source_src, settings)
    hits = check_units(index, units, groups=groups, views=tokenizers, workers=workers, chunk_size=chunk_size,
                       progress=_progress_adapter(progress, len(units)))
    if group_counts(fragment_groups(source_src, settings)) != cert.get("groups"):
        report.problems.append(f"fragment groups of the sources now {group_counts(fragment_groups(source_src, settings))}, "
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
                rebuilt = build_sketch(held.answers, held.texts, settings, key, heldout_c["md5"], views=tokenizers,
                                       tokenizers=sketch_tokenizers(cert.get("tokenizers", [])))
                if sketch_digest(rebuilt) != sketch_digest(load_sketch(sketch_file)):
                    report.problems.append(f"sketch {cert['sketch']['path']} is not the sketch of the certified held-out set")
    return report


def _with_reference(report: AuditReport, settings, certified: dict | None, root: Path):
    """The settings with the stock weighting's reference corpus (``stock.reference``) found
    under ``root``, when its md5 is the certified one (None: cannot re-check: the weights would
    differ, and with them every score)."""
    if settings.stock.reference is None:
        return settings
    recorded = (certified or {}).get("reference") or {}
    path = root / settings.stock.reference
    if not path.is_file():
        report.problems.append(f"stock reference corpus {settings.stock.reference} is missing: the stock weights "
                               "cannot be re-derived")
        return None
    if dvc_md5(path) != recorded.get("md5"):
        report.problems.append(f"stock reference corpus {settings.stock.reference} has md5 {dvc_md5(path)}, the "
                               f"certificate says {recorded.get('md5')} (changed since certified)")
        return None
    return settings.model_copy(update={"stock": settings.stock.model_copy(update={"reference": str(path)})})


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
