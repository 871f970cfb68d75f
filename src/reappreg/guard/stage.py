"""What ``reappreg guard run|check|sketch`` and ``reappreg leakscan run`` do, given the validated settings.

The commands parse their options, call one function here and print what it returns; every
check, the MLflow run of the two DVC stages (``guard``, ``leakscan``) and the order of the
steps live here. Showing progress and hits is the command's: a function takes a
:data:`ProgressDisplay` (and ``run`` an ``on_blocked`` callback that sees the hits before the
stage fails), never a console.

* :func:`run`: every training source against the held-out answers, through every tokenizer
  view (the RM encoder's added from the active profile), into guarded copies, a certificate
  and a sketch; a block-policy overlap fails the stage.
* :func:`check`: ad-hoc files against the held-out set or a sketch, as ``run`` would see them.
* :func:`sketch`: the held-out sketch and its key on their own.
* :func:`leakscan`: no held-out text in the training-side MLflow records, folders or sketch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.errors import InputError

if TYPE_CHECKING:
    from reappreg.guard.detector import Hit
    from reappreg.guard.run import GuardOutcome, GuardPaths, Progress
    from reappreg.guard.views import TokenizerView
    from reappreg.settings import Params

# (label, inputs of fewer texts show nothing) -> a context yielding the guard's progress callback.
ProgressDisplay = Callable[[str, int], AbstractContextManager["Progress"]]

# The training source format (`reappreg guard run --help` states the same).
TRAIN_SPEC = "[NAME=]PATH:ID_FIELD:TEXT_FIELD[,...] (NAME: guarded file name, default the source's)"
RM_TOKENIZER_VIEW = "rm-encoder"
POLICY_TOKENIZER_VIEW = "policy"
# `guard check` without a params file runs in one process unless --workers says otherwise (its help says so).
CHECK_WORKERS_WITHOUT_PARAMS = 1


def _ignore(_done: int, _total: int) -> None:
    return None


def no_progress(_label: str, _show_from: int) -> AbstractContextManager[Progress]:
    """Show nothing (library callers and tests)."""
    return nullcontext(_ignore)


# ----------------------------------------------------------------------------- tokenizer views


def _views(specs: Sequence[str]) -> list[TokenizerView]:
    from reappreg.guard.views import TokenizerSpec, load_views

    return load_views([TokenizerSpec.parse(s) for s in specs])


def _with_rm_tokenizer(specs: Sequence[str], rm_encoder_path: str) -> list[str]:
    """The --tokenizer specs plus the RM encoder's (view `rm-encoder`) unless one is given by that name."""
    from reappreg.guard.views import TokenizerSpec

    if any(TokenizerSpec.parse(s).name == RM_TOKENIZER_VIEW for s in specs):
        return list(specs)
    return [f"{RM_TOKENIZER_VIEW}={rm_encoder_path}", *specs]


def _with_profile_tokenizers(specs: Sequence[str], params: Params) -> list[str]:
    """The --tokenizer specs plus the active profile's: the RM encoder's (`rm-encoder`) and the
    base policy's (`policy`: its local folder, or the GGUF file in its package), each unless a
    view of that name is given."""
    from reappreg.guard.views import TokenizerSpec

    base = params.policy.base
    policy = base.local_path if base.source == "local" else f"pkg:{base.gguf_package}/{base.gguf_file}"
    given = {TokenizerSpec.parse(s).name for s in specs}
    extra = [f"{name}={spec}" for name, spec in ((RM_TOKENIZER_VIEW, params.rm.encoder.path), (POLICY_TOKENIZER_VIEW, policy))
             if name not in given]
    return [*extra, *specs]


def _require_rm_tokenizer(views: Sequence[TokenizerView], rm_encoder_path: str) -> None:
    """The RM trains on what its encoder's tokenizer sees: refuse a guard that did not look."""
    from reappreg.guard.views import files_digest, tokenizer_files
    from reappreg.lm import resolve_model

    location = resolve_model(rm_encoder_path, "rm.encoder.path", kind="encoder")
    digest = files_digest(tokenizer_files(location.folder, location.gguf_file))
    if digest not in {v.files_sha256 for v in views}:
        raise InputError(
            f"guard run: the RM encoder's tokenizer (rm.encoder.path '{rm_encoder_path}', files sha256 {digest[:12]}) "
            f"is not among the --tokenizer views ({', '.join(f'{v.name}={v.spec}' for v in views) or 'none'}); "
            f"add --tokenizer rm-encoder={rm_encoder_path}"
        )


def _match_sketch_tokenizers(views: Sequence[TokenizerView], sketch: dict, path: Path) -> None:
    """The views given must be exactly the sketch's tokenizers (same names, same file hashes)."""
    expected = {t["name"]: t["files_sha256"] for t in sketch.get("tokenizers", [])}
    given = {v.name: v.files_sha256 for v in views}
    if given != expected:
        raise InputError(
            f"{path}: the sketch was made with tokenizer views {sorted(expected) or 'none'}; give exactly those with "
            f"--tokenizer NAME=SPEC (given {sorted(given) or 'none'}"
            + ("; a tokenizer's files differ" if set(given) == set(expected) else "") + ")"
        )


# ----------------------------------------------------------------------------- run


@dataclass(frozen=True)
class GuardSources:
    """What the guard stage reads, as the command line names it: the held-out answers and each
    training source (guard source specs, ``train`` as :data:`TRAIN_SPEC`), and the tokenizer
    views (``NAME=SPEC``) of every consuming model."""

    heldout: str
    train: Sequence[str]
    tokenizers: Sequence[str] = ()


def _hits_summary(hits: Sequence[Hit], limit: int = 5) -> str:
    lines = []
    for h in hits[:limit]:
        members = f" records {h.members}" if h.members else ""
        lines.append(f"  {h.source} record '{h.record_id}'{members} ({h.field}) ~ held-out '{h.answer_id}': "
                     f"{h.detector} {h.score_text()} (view {h.view}); shared: {'; '.join(repr(s) for s in h.shared[:2])}")
    if len(hits) > limit:
        lines.append(f"  ... and {len(hits) - limit} more")
    return "\n".join(lines)


def run(params: Params, sources: GuardSources, paths: GuardPaths, *, progress: ProgressDisplay = no_progress,
        on_blocked: Callable[[Sequence[Hit]], None] | None = None) -> GuardOutcome:
    """Check every training source against the held-out answers; block or quarantine overlaps.

    Every text is also checked through each tokenizer view and through the RM encoder's
    tokenizer, view `rm-encoder`, read from rm.encoder.path of the active profile (so the full
    profile checks what its own RM sees, with no path to keep in step). Under policy ``block``
    an overlap fails the stage (``GuardViolation``) after ``on_blocked(hits)``."""
    from reappreg.errors import GuardViolation
    from reappreg.guard import SourceSpec, run_guard
    from reappreg.guard.run import HELDOUT_DEFAULTS
    from reappreg.tracking import stage_run

    settings = params.guard
    views = _views(_with_rm_tokenizer(sources.tokenizers, params.rm.encoder.path))
    _require_rm_tokenizer(views, params.rm.encoder.path)
    heldout_spec = SourceSpec.parse(sources.heldout, **HELDOUT_DEFAULTS)
    train_specs = [SourceSpec.parse(t) for t in sources.train]
    for spec in train_specs:
        if not spec.text_fields:
            raise InputError(f"--train '{spec.path}': give the fields as {TRAIN_SPEC}")
    inputs = {"heldout": heldout_spec.path, **{f"train_{Path(s.guarded_name).stem}": s.path for s in train_specs}}
    with stage_run("guard", tracking=params.tracking, params=settings.model_dump(), inputs=inputs):
        with progress("guard", settings.chunk_size) as callback:
            outcome = run_guard(heldout=heldout_spec, train=train_specs, settings=settings, tokenizers=views,
                                progress=callback, paths=paths)
        _log_certificate(outcome.certificate, paths.certificate_path, passed=outcome.passed)
        counts = outcome.certificate["counts"]
        if not outcome.passed:
            if on_blocked is not None:
                on_blocked(outcome.hits)
            raise GuardViolation(
                f"guard: {counts['flagged_records']} training record(s) overlap held-out answers "
                f"({counts['hits']} hit(s)); policy 'block' stops the pipeline. Hits: {paths.quarantine_path}\n"
                + _hits_summary(outcome.hits)
            )
    return outcome


def _log_certificate(cert: dict[str, Any], certificate_path: Path, *, passed: bool) -> None:
    """The certificate's counts, result, policy, hashes and tokenizers on the stage run, and the file itself."""
    import mlflow

    lsh = cert["detectors"]["minhash"]["lsh"]
    mlflow.log_metrics({
        **{k: float(v) for k, v in cert["counts"].items()},
        "passed": float(passed),
        "seconds": cert["seconds"],
        "lsh_fn_probability_at_threshold": lsh["fn_probability_at_threshold"],
    })
    mlflow.set_tags({"guard.result": cert["result"], "guard.policy": cert["policy"],
                     "guard.heldout_md5": cert["heldout"]["md5"], "guard.normalisation": cert["normalisation"],
                     **{f"guard.tokenizer.{t['name']}.sha256": t["files_sha256"] for t in cert["tokenizers"]}})
    if cert["semantic"].get("enabled"):
        mlflow.log_metric("semantic_pairs_above_threshold", float(cert["semantic"]["pairs_above_threshold"]))
    mlflow.log_artifact(str(certificate_path))


# ----------------------------------------------------------------------------- check


@dataclass(frozen=True)
class CheckRequest:
    """What `guard check` compares: ``files`` (PATH or a guard source spec; ``id_field`` and
    ``text_fields`` serve PATH-only JSONL/CSV files) against exactly one of the held-out set
    ``heldout`` (a spec) or a ``sketch`` with its ``key``; where to write the hits (``report``),
    how many processes (``workers``, None: the params' or one), the extra tokenizer views, and
    whether the profile's views (rm-encoder, policy) join a held-out check."""

    files: Sequence[str]
    heldout: str | None = None
    sketch: Path | None = None
    key: Path | None = None
    id_field: str | None = None
    text_fields: Sequence[str] = ("text",)
    report: Path | None = None
    workers: int | None = None
    tokenizers: Sequence[str] = ()
    profile_views: bool = True

    def __post_init__(self) -> None:
        if (self.heldout is None) == (self.sketch is None):
            raise InputError("guard check: give exactly one of --heldout or --sketch")


@dataclass(frozen=True)
class Checked:
    """What `guard check` found: the hits, how many texts and held-out answers it compared,
    what it compared against, and the tokenizer views it looked through."""

    hits: list[Hit]
    n_texts: int
    n_answers: int
    against: str
    views: list[str]


def check(params: Params | None, request: CheckRequest, *, progress: ProgressDisplay = no_progress) -> Checked:
    """Compare ad-hoc texts with the held-out set (as `guard run` sees them: the active profile's
    tokenizer views too, unless ``request.profile_views`` is off) or with a sketch (through
    exactly the sketch's views). ``params``: None when there is no params file (an outside team
    with a sketch), which checks under the guard's default settings."""
    from reappreg.settings.guard import GuardSettings

    settings = params.guard if params is not None else GuardSettings()
    workers = request.workers or (settings.workers if params is not None else CHECK_WORKERS_WITHOUT_PARAMS)
    if request.sketch is not None:
        index, views, against = _sketch_index(request)
    else:
        index, views, against = _heldout_index(params, settings, request)
    return check_texts(settings, request, index=index, views=views, against=against, workers=workers,
                       progress=progress)


def _sketch_index(request: CheckRequest):
    from reappreg.guard.sketch import index_from_sketch, load_sketch, read_key

    if request.key is None:
        raise InputError("guard check --sketch needs --key (the sketch key that came with it)")
    loaded = load_sketch(request.sketch)
    index = index_from_sketch(loaded, read_key(request.key), source=str(request.sketch))
    views = _views(request.tokenizers)
    _match_sketch_tokenizers(views, loaded, request.sketch)
    return index, views, f"sketch {request.sketch}"


def _heldout_index(params: Params, settings, request: CheckRequest):
    from reappreg.guard import FastHasher, HeldoutIndex, SourceSpec
    from reappreg.guard.run import HELDOUT_DEFAULTS, load_heldout

    held = load_heldout(SourceSpec.parse(request.heldout, **HELDOUT_DEFAULTS))
    # As `guard run` sees them: the active profile's tokenizers (the RM encoder's and the
    # base policy's) are on unless turned off, so an outsider's check equals the pipeline's
    # (a text that only matches once a tokenizer decodes its special tokens away is a hit
    # here too).
    specs = _with_profile_tokenizers(request.tokenizers, params) if request.profile_views else request.tokenizers
    views = _views(specs)
    index = HeldoutIndex.build(held.answers, held.texts, settings, FastHasher(), views=views)
    return index, views, f"held-out {held.spec.path}"


def check_texts(settings, request: CheckRequest, *, index, views: Sequence[TokenizerView], against: str, workers: int,
                progress: ProgressDisplay = no_progress) -> Checked:
    """Scan ``request.files`` against ``index`` under the guard ``settings``; write the hits to
    ``request.report`` when asked."""
    from reappreg.guard import SourceSpec, check_units, fragment_groups, read_source
    from reappreg.guard.text import check_sizes
    from reappreg.io import write_jsonl

    sources = [read_source(SourceSpec.parse(t, default_id=request.id_field, default_text=tuple(request.text_fields)))
               for t in request.files]
    units = [u for src in sources for u in src.units]
    check_sizes(units, settings.max_text_chars)
    groups = fragment_groups(sources, index.settings)
    with progress("check", settings.chunk_size) as callback:
        hits = check_units(index, units, groups=groups, views=views, workers=workers, chunk_size=settings.chunk_size,
                           max_shared=settings.max_shared_reported, progress=(lambda done: callback(done, len(units))))
    if request.report is not None:
        write_jsonl(request.report, (h.to_record() for h in hits))
    return Checked(hits=hits, n_texts=len(units), n_answers=len(index.answer_ids), against=against,
                   views=[v.name for v in views])


# ----------------------------------------------------------------------------- sketch


def sketch(params: Params, *, heldout: str, out: Path, secret_dir: Path, key_out: Path,
           tokenizers: Sequence[str] = ()) -> int:
    """Export the held-out set (a guard source spec) as a sketch (keyed hashes only) to ``out``
    and its key to ``key_out`` (derived from the master secret under ``secret_dir``, created
    once); returns how many answers it holds."""
    from reappreg.guard import SourceSpec, build_sketch, derive_key, ensure_secret, load_heldout
    from reappreg.guard.certificate import sketch_tokenizers
    from reappreg.guard.run import HELDOUT_DEFAULTS
    from reappreg.guard.sketch import write_key
    from reappreg.hashing import dvc_md5
    from reappreg.io import write_json

    held = load_heldout(SourceSpec.parse(heldout, **HELDOUT_DEFAULTS))
    md5 = dvc_md5(held.spec.path)
    key = derive_key(ensure_secret(secret_dir), md5)
    write_key(key_out, key)
    views = _views(tokenizers)
    write_json(out, build_sketch(held.answers, held.texts, params.guard, key, md5, views=views,
                                 tokenizers=sketch_tokenizers([v.describe() for v in views])))
    return len(held.answers)


# ----------------------------------------------------------------------------- leakscan


@dataclass(frozen=True)
class LeakscanFiles:
    """What the leak scan reads (the ``heldout`` answers, the ``folders`` (or files) whose text
    files it scans, the published ``sketch``) and the ``report`` it writes when nothing leaked."""

    heldout: Path
    report: Path
    folders: Sequence[Path] = ()
    sketch: Path | None = None


def leakscan(params: Params, files: LeakscanFiles, *, scan_mlflow: bool = True) -> dict[str, Any]:
    """Probe every training-side MLflow record (unless ``scan_mlflow`` is off), folder and the
    sketch for held-out text; log the scan as its own stage run afterwards and write the report
    when it passed. Returns the result (``passed``, ``hits``, counts)."""
    import mlflow

    from reappreg.guard.leakscan import run_leakscan
    from reappreg.io import write_json
    from reappreg.tracking import configure, stage_run

    p, f = params, files
    tracking_uri = None
    if scan_mlflow:
        configure(p.tracking.uri, p.tracking.experiment, p.tracking.artifact_root)
        tracking_uri = mlflow.get_tracking_uri()
    result = run_leakscan(
        heldout_path=f.heldout, settings=p.guard, folders=list(f.folders), sketch_path=f.sketch,
        tracking_uri=tracking_uri, experiment=p.tracking.experiment,
        exclude_stages=p.leakscan.exclude_stages, max_file_bytes=p.leakscan.max_file_bytes,
    )
    # Logged after the scan so this run's own records are not part of what it scanned.
    with stage_run("leakscan", tracking=p.tracking, params=p.leakscan.model_dump(), inputs={"heldout": f.heldout}):
        mlflow.log_metrics({"n_probes": result["n_probes"], "n_hits": result["n_hits"],
                            "mlflow_runs_scanned": result["mlflow_runs_scanned"]})
        mlflow.set_tag("leakscan.passed", str(result["passed"]).lower())
    if result["passed"]:
        write_json(f.report, result)
    return result


__all__ = ["CheckRequest", "Checked", "GuardSources", "LeakscanFiles", "ProgressDisplay", "TRAIN_SPEC", "check",
           "check_texts", "leakscan", "no_progress", "run", "sketch"]
