"""Leak scan: no held-out answer text may surface anywhere on the training side.

The separation guard checks what goes *into* training. This scan checks what comes *out*
and what is recorded about it: every MLflow param, tag and text artifact of the
non-evaluation runs in the experiment, every text file in the model folders (checkpoints,
configs, tokenizers, cards), and the published held-out sketch. It reuses the guard's
detectors (exact n-gram containment and MinHash-LSH Jaccard, same thresholds), so
"leaked" means exactly what the guard would have blocked.

Evaluation stages (generation, judging, statistics) legitimately handle held-out answers
and are excluded by name; everything else is scanned. Binary files (weights) are skipped
by extension; a text file over ``max_file_bytes`` is an error, not a silent skip.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reappreg.errors import InputError
from reappreg.guard.detect import check_units
from reappreg.guard.hashing import FastHasher
from reappreg.guard.index import AnswerMeta, HeldoutIndex
from reappreg.guard.text import TextUnit
from reappreg.io import read_jsonl
from reappreg.settings.guard import GuardSettings

TEXT_SUFFIXES = {".txt", ".json", ".jsonl", ".md", ".yaml", ".yml", ".csv", ".tsv", ".py", ".jinja", ".html", ".log"}
EVAL_STAGES = ("generate", "judge", "judge_calibrate", "stats")


@dataclass(frozen=True)
class ScanTarget:
    """Where a scanned text came from, for the report."""

    kind: str       # "mlflow_param" | "mlflow_tag" | "mlflow_artifact" | "file" | "sketch"
    location: str   # run id + key/path, or file path


def heldout_index(heldout_path: str | Path, settings: GuardSettings) -> HeldoutIndex:
    records = read_jsonl(heldout_path)
    if not records:
        raise InputError(f"{heldout_path}: held-out set is empty; nothing to scan for")
    answers = [AnswerMeta(answer_id=r["answer_id"], source=r.get("source"), vignette_id=r.get("vignette_id")) for r in records]
    return HeldoutIndex.build(answers, [r["text"] for r in records], settings, FastHasher())


def _read_text_file(path: Path, max_file_bytes: int) -> str | None:
    if path.suffix.lower() not in TEXT_SUFFIXES:
        return None
    size = path.stat().st_size
    if size > max_file_bytes:
        raise InputError(f"{path}: text file of {size} bytes exceeds leak-scan max_file_bytes={max_file_bytes}")
    return path.read_bytes().decode("utf-8", errors="replace")


def folder_units(folders: Iterable[str | Path], max_file_bytes: int) -> list[tuple[ScanTarget, str]]:
    """Every text file under the given folders (missing folders are an error: the scan
    must not pass because it looked at nothing)."""
    out = []
    for folder in folders:
        folder = Path(folder)
        if not folder.exists():
            raise InputError(f"{folder}: leak-scan target does not exist")
        files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
        for file in files:
            text = _read_text_file(file, max_file_bytes)
            if text is not None:
                out.append((ScanTarget("file", str(file)), text))
    return out


def mlflow_units(
    tracking_uri: str, experiment: str, exclude_stages: Sequence[str], max_file_bytes: int
) -> tuple[list[tuple[ScanTarget, str]], int]:
    """Params, tags and text artifacts of every run not in ``exclude_stages``.
    Returns (units, number of runs scanned)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise InputError(f"MLflow experiment '{experiment}' not found at {tracking_uri}")
    runs = client.search_runs([exp.experiment_id], max_results=50_000)
    out: list[tuple[ScanTarget, str]] = []
    scanned = 0
    for run in runs:
        stage = run.data.tags.get("stage", "")
        if stage.split("@")[0] in exclude_stages:
            continue
        scanned += 1
        rid = run.info.run_id
        for key, value in run.data.params.items():
            out.append((ScanTarget("mlflow_param", f"{rid}:{key}"), f"{value}"))
        for key, value in run.data.tags.items():
            out.append((ScanTarget("mlflow_tag", f"{rid}:{key}"), f"{value}"))
        in_place = _local_root(run.info.artifact_uri)
        with tempfile.TemporaryDirectory() as tmp:
            for artifact in _walk_artifacts(client, rid, ""):
                if Path(artifact.path).suffix.lower() not in TEXT_SUFFIXES:
                    continue
                if artifact.file_size is not None and artifact.file_size > max_file_bytes:
                    raise InputError(f"run {rid} artifact {artifact.path}: {artifact.file_size} bytes exceeds max_file_bytes")
                local = in_place / artifact.path if in_place else Path(client.download_artifacts(rid, artifact.path, tmp))
                text = _read_text_file(local, max_file_bytes)
                if text is not None:
                    out.append((ScanTarget("mlflow_artifact", f"{rid}:{artifact.path}"), text))
    # MLflow 3 stores logged models (e.g. the RM ensemble's pyfunc and its data) as their
    # own entities, not as run artifacts: scan those whose source run is scanned too.
    scanned_runs = {r.info.run_id for r in runs if r.data.tags.get("stage", "").split("@")[0] not in exclude_stages}
    for model in client.search_logged_models(experiment_ids=[exp.experiment_id]):
        if model.source_run_id is not None and model.source_run_id not in scanned_runs:
            continue
        listing = lambda path, mid=model.model_id: client.list_logged_model_artifacts(mid, path or None)  # noqa: E731
        with tempfile.TemporaryDirectory() as tmp:
            for artifact in _walk(listing, ""):
                if Path(artifact.path).suffix.lower() not in TEXT_SUFFIXES:
                    continue
                if artifact.file_size is not None and artifact.file_size > max_file_bytes:
                    raise InputError(f"logged model {model.model_id} artifact {artifact.path}: too large for the scan")
                in_place = _local_root(model.artifact_location)
                local = in_place / artifact.path if in_place else Path(mlflow.artifacts.download_artifacts(
                    artifact_uri=f"{model.artifact_location.rstrip('/')}/{artifact.path}", dst_path=tmp))
                text = _read_text_file(local, max_file_bytes)
                if text is not None:
                    out.append((ScanTarget("mlflow_model_artifact", f"{model.model_id}:{artifact.path}"), text))
    return out, scanned


def _local_root(artifact_uri: str | None) -> Path | None:
    """The folder of a local artifact store (read in place: copying hundreds of small files one
    download call at a time took most of the scan); None for a remote store (downloaded)."""
    from urllib.parse import unquote, urlparse

    if not artifact_uri:
        return None
    parsed = urlparse(artifact_uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and artifact_uri[1:3] in (":/", ":\\")):  # a bare path
        return Path(artifact_uri)
    return None


def _walk(listing, path: str):
    for info in listing(path):
        if info.is_dir:
            yield from _walk(listing, info.path)
        else:
            yield info


def _walk_artifacts(client, run_id: str, path: str):
    yield from _walk(lambda p: client.list_artifacts(run_id, p or None), path)


def scan(index: HeldoutIndex, units: Sequence[tuple[ScanTarget, str]], max_shared: int = 3) -> list[dict]:
    """Guard hits of the units against the held-out index, as report rows.

    Identical texts (one tokenizer in every policy folder, again in each registered model's
    run artifacts) are checked once and every location holding one is reported: the verdict
    on a text does not depend on where it lies, and the largest files repeat the most."""
    places: dict[str, list[ScanTarget]] = {}
    for target, text in units:
        places.setdefault(text, []).append(target)
    locations = list(places.values())
    text_units = [TextUnit(source="text", record_id=str(k), field="text", text=text) for k, text in enumerate(places)]
    hits = check_units(index, text_units, max_shared=max_shared) if text_units else []
    return [
        {"kind": target.kind, "location": target.location, "answer_id": h.answer_id, "detector": h.detector,
         "score": round(h.score, 4), "threshold": h.threshold}
        for h in hits for target in locations[int(h.record_id)]
    ]


def run_leakscan(
    *,
    heldout_path: str | Path,
    settings: GuardSettings,
    folders: Sequence[str | Path],
    sketch_path: str | Path | None,
    tracking_uri: str | None,
    experiment: str,
    exclude_stages: Sequence[str] = EVAL_STAGES,
    max_file_bytes: int = 20_000_000,
) -> dict:
    """Scan everything; return a report. ``passed`` is False when any probe hits."""
    index = heldout_index(heldout_path, settings)
    units = folder_units(folders, max_file_bytes)
    if sketch_path is not None:
        units += [(ScanTarget("sketch", str(sketch_path)), Path(sketch_path).read_text(encoding="utf-8"))]
    runs_scanned = 0
    if tracking_uri is not None:
        mlflow_part, runs_scanned = mlflow_units(tracking_uri, experiment, exclude_stages, max_file_bytes)
        units += mlflow_part
    hits = scan(index, units)
    counts: dict[str, int] = {}
    for target, _ in units:
        counts[target.kind] = counts.get(target.kind, 0) + 1
    return {
        "passed": not hits,
        "n_heldout_answers": len(index.answers),
        "n_probes": len(units),
        "n_distinct_texts": len({text for _, text in units}),
        "probes_by_kind": counts,
        "mlflow_runs_scanned": runs_scanned,
        "excluded_stages": list(exclude_stages),
        "n_hits": len(hits),
        # Hits name where the leak is and which answer, never the answer text itself.
        "hits": hits,
    }
