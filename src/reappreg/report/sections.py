"""Each pipeline output file, read tolerantly by key, as one section of the report."""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.card.build import calibration_rows, flatten, fmt, metric_label, training_health
from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl
from reappreg.report.blocks import (Section, Table, count, curves_figure, dot_figure, empty_reason, forest_figure,
                                    is_number, num)


@dataclass(frozen=True)
class ReportSources:
    """The files the report reads; each is optional (a missing one becomes a missing section)."""

    canonical: Path
    train: Path
    heldout: Path
    validation: Path
    certificate: Path
    rm_metrics: Path
    policy_metrics: Path
    calibration: Path
    eval_metrics: Path
    forest: Path
    claims: Path
    registration: Path
    leakscan: Path


# Which stage writes each source: named in a missing section's reason.
STAGE_OF = {
    "canonical": "ingest", "train": "split", "heldout": "split", "validation": "validate", "certificate": "guard",
    "rm_metrics": "rm_train", "policy_metrics": "policy_train", "calibration": "judge_calibrate",
    "eval_metrics": "stats", "forest": "stats", "claims": "stats", "registration": "register", "leakscan": "leakscan",
}


class _Reader:
    """Reads sources, remembering for each section why something could not be read."""

    def __init__(self, sources: ReportSources, root: Path):
        self.sources, self.root = sources, root
        self.health: Any = None
        self.max_completion_length: int | None = None
        self.validate_rules: Any = None

    def path(self, name: str) -> Path:
        return getattr(self.sources, name)

    def shown(self, name: str) -> str:
        return display(self.path(name), self.root)

    def absent(self, name: str, section: Section, sub: str | None = None) -> bool:
        path = self.path(name) / sub if sub else self.path(name)
        if path.exists():
            return False
        section.missing.append(f"`{display(path, self.root)}`: not found (written by `dvc repro {STAGE_OF[name]}`)")
        return True

    def json(self, name: str, section: Section, expect: type) -> Any:
        if self.absent(name, section):
            return None
        try:
            obj = read_json(self.path(name))
        except InputError as exc:
            section.missing.append(f"`{self.shown(name)}`: unreadable ({exc})")
            return None
        if not isinstance(obj, expect):
            section.missing.append(f"`{self.shown(name)}`: expected a JSON {expect.__name__}, found {type(obj).__name__}")
            return None
        return obj

    def jsonl(self, path: Path, section: Section) -> list[dict] | None:
        try:
            return read_jsonl(path)
        except InputError as exc:
            section.missing.append(f"`{display(path, self.root)}`: unreadable ({exc})")
            return None


def display(path: str | os.PathLike, root: str | os.PathLike) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()




def _scalars(obj: Mapping[str, Any], skip: Sequence[str] = ()) -> list[list[Any]]:
    """``[key, value]`` rows of every scalar in ``obj`` (nested keys dotted), lists shown joined."""
    rows = []
    for key, value in flatten(obj).items():
        if any(key == s or key.startswith(f"{s}.") for s in skip):
            continue
        if isinstance(value, list):
            if any(isinstance(v, (dict, list)) for v in value):
                continue
            value = ", ".join(str(v) for v in value) or "(empty)"
        rows.append([key, value])
    return rows


# --------------------------------------------------------------------------- sections


def data_section(r: _Reader) -> Section:
    section = Section("Data", [r.shown("canonical"), r.shown("train"), r.shown("heldout")])
    counts: dict[str, Counter] = {}
    for label, name, sub in (("canonical", "canonical", "reappraisals.jsonl"), ("training pool", "train", "reappraisals.jsonl"),
                             ("held-out answers", "heldout", None)):
        if r.absent(name, section, sub):
            continue
        rows = r.jsonl(r.path(name) / sub if sub else r.path(name), section)
        if rows is not None:
            counts[label] = Counter(str(row.get("source", "(no source field)")) for row in rows)
    if counts:
        sources = sorted(set().union(*counts.values()))
        table = [[s, *[counts[c].get(s, 0) if c in counts else None for c in counts]] for s in sources]
        table.append(["total", *[sum(counts[c].values()) for c in counts]])
        section.blocks.append(Table(["source", *[f"{c} (reappraisals)" if c != "held-out answers" else c for c in counts]],
                                    table, "Reappraisals per source; the split keeps training sources out of the held-out set."))
    other = []
    for name, folder in (("canonical", r.path("canonical")), ("train", r.path("train"))):
        for table_name in ("vignettes", "ratings"):
            path = folder / f"{table_name}.jsonl"
            if path.exists():
                rows = r.jsonl(path, section)
                if rows is not None:
                    other.append([display(path, r.root), len(rows)])
    if other:
        section.blocks.append(Table(["file", "records"], other, "Vignettes and ratings."))
    return section


def validation_section(r: _Reader) -> Section:
    section = Section("Validation (great-expectations)", [r.shown("validation")])
    report = r.json("validation", section, dict)
    if report is None:
        return section
    verdict = {True: "passed", False: "FAILED"}.get(report.get("success"), "not recorded")
    section.blocks.append(f"Result: **{verdict}**: {fmt(report.get('n_failed'))} of {fmt(report.get('n_expectations'))} "
                          f"expectations failed; data source `{report.get('source')}`.")
    section.blocks.append(_validation_binding(r, report))
    if isinstance(report.get("tables"), Mapping):
        section.blocks.append(Table(["table", "rows checked"], [[k, v] for k, v in report["tables"].items()]))
    failed = [f for f in report.get("failed") or [] if isinstance(f, Mapping)]
    if failed:
        section.blocks.append(Table(
            ["table", "expectation", "column", "unexpected", "of rows", "example ids"],
            [[f.get("table"), f.get("expectation"), (f.get("kwargs") or {}).get("column"), f.get("unexpected_count"),
              f.get("element_count"), ", ".join(map(str, f.get("example_ids") or []))] for f in failed],
            "Failed expectations."))
    return section


def _validation_binding(r: _Reader, report: Mapping[str, Any]) -> str:
    """Whether the report describes the canonical data now on disk (md5 of every file, same rules)."""
    if not report.get("success"):
        return "Bound to the data: not checked (the report did not pass)."
    if r.validate_rules is None:
        return "Bound to the data: not checked (no validation settings were given to the report)."
    from reappreg.data.validate import verify_report

    try:
        verify_report(r.path("validation"), r.path("canonical"), r.validate_rules)
    except InputError as exc:
        return f"Bound to the data: **NO**: {exc}"
    return (f"Bound to the data: yes: the md5 of every file under `{r.shown('canonical')}` and the gating rules "
            "match what the report validated.")


def guard_section(r: _Reader) -> Section:
    section = Section("Separation guard certificate", [r.shown("certificate")])
    cert = r.json("certificate", section, dict)
    if cert is None:
        return section
    section.blocks.append(f"Result: **{cert.get('result', 'not recorded')}** (policy `{cert.get('policy')}`, "
                          f"schema `{cert.get('schema')}`). The certificate covers only the sources listed here.")
    summary = _scalars({k: cert[k] for k in ("counts", "detectors", "heldout") if isinstance(cert.get(k), Mapping)})
    if summary:
        section.blocks.append(Table(["key", "value"], summary, "Counts and detector settings, as recorded."))
    training = [t for t in cert.get("training") or [] if isinstance(t, Mapping)]
    if training:
        section.blocks.append(Table(["checked source", "records", "flagged", "guarded copy (trained on)"],
                                    [[t.get("path"), t.get("records"), t.get("flagged_records"), t.get("guarded_path")]
                                     for t in training]))
    return section


def rm_section(r: _Reader) -> Section:
    section = Section("Reward models against their baselines", [r.shown("rm_metrics")])
    if r.absent("rm_metrics", section):
        return section
    files = sorted(r.path("rm_metrics").glob("*.json"))
    if not files:
        section.missing.append(f"`{r.shown('rm_metrics')}`: no metrics files (written by `dvc repro rm_train`)")
        return section
    rows, baselines = [], []
    for file in files:
        try:
            obj = read_json(file)
        except InputError as exc:
            section.missing.append(f"`{display(file, r.root)}`: unreadable ({exc})")
            continue
        if not isinstance(obj, dict):
            section.missing.append(f"`{display(file, r.root)}`: expected a JSON object")
            continue
        # The ensemble's own score is `reward`; a single model's is the split itself.
        holdout = obj.get("holdout", {}).get("reward", obj.get("holdout", {})) if isinstance(obj.get("holdout"), dict) else {}
        lovo = obj.get("lovo", {}).get("reward", obj.get("lovo", {})) if isinstance(obj.get("lovo"), dict) else {}
        rows.append({"model": file.stem, "objective": obj.get("objective"),
                     "acc": holdout.get("pairwise_accuracy"), "acc_low": holdout.get("pairwise_accuracy_low"),
                     "acc_high": holdout.get("pairwise_accuracy_high"), "rho": holdout.get("spearman_within_vignette"),
                     "pairs": holdout.get("n_pairs"), "lovo": lovo.get("pairwise_accuracy")})
        if isinstance(obj.get("baselines"), Mapping):
            baselines += [[file.stem, k, v] for k, v in _scalars(obj["baselines"])]
    if rows:
        section.blocks.append(Table(
            ["model", "objective", "held-out pairwise accuracy", "within-vignette Spearman", "held-out pairs",
             "leave-one-vignette-out accuracy"],
            [[x["model"], x["objective"], x["acc"], x["rho"], x["pairs"], x["lovo"]] for x in rows],
            "Held-out human ratings; pairwise accuracy is the share of rated pairs ordered like the people ordered them."))
        section.blocks.append(dot_figure(
            "Reward models: held-out pairwise accuracy", [x["model"] for x in rows],
            [x["acc"] for x in rows], [(x["acc_low"], x["acc_high"]) for x in rows],
            xlabel="pairwise accuracy on held-out human ratings", second=[x["lovo"] for x in rows],
            labels=("held-out", "leave-one-vignette-out")))
    if baselines:
        section.blocks.append(Table(["model", "baseline", "value"], baselines, "Baselines recorded with each model."))
    return section


def _history(obj: Any) -> list[dict] | None:
    """A per-step log in a policy metrics file: a list of objects with a ``step`` key."""
    if isinstance(obj, Mapping):
        for value in obj.values():
            found = _history(value)
            if found:
                return found
    if isinstance(obj, list) and obj and all(isinstance(x, Mapping) and "step" in x for x in obj):
        return list(obj)
    return None


def policy_section(r: _Reader) -> Section:
    section = Section("Policy training health", [r.shown("policy_metrics")])
    if r.absent("policy_metrics", section):
        return section
    train_path = r.path("policy_metrics") / "train.json"
    if not train_path.exists():
        section.missing.append(f"`{display(train_path, r.root)}`: not found (written by `dvc repro policy_train`)")
        return section
    try:
        train = read_json(train_path)
    except InputError as exc:
        section.missing.append(f"`{display(train_path, r.root)}`: unreadable ({exc})")
        return section
    if not isinstance(train, dict):
        section.missing.append(f"`{display(train_path, r.root)}`: expected a JSON object")
        return section
    verdict = {True: "healthy", False: "UNHEALTHY"}.get(train.get("healthy"), "not recorded")
    reason = f" ({train['unhealthy_reason']})" if train.get("unhealthy_reason") else ""
    section.blocks.append(f"Training monitor verdict: **{verdict}**{reason} after {fmt(train.get('steps_run'))} steps.")
    if r.health is not None:
        health = training_health(flatten(train, "train"), r.health, r.max_completion_length)
        section.blocks.append(f"Verdict with the format-gate and truncation gates (as on the model card): "
                              f"**{health.verdict}**.")
        section.blocks.append(Table(
            ["gate", "value", "pass if at most", "result", "read from"],
            [[g.name, g.value, g.threshold, {None: "not checked", True: "pass", False: "FAIL"}[g.passed], g.source]
             for g in health.gates], "Thresholds: `card.health` in params.yaml."))
    history = _history(train)
    if history:
        keys = sorted({k for row in history for k, v in row.items() if k != "step" and is_number(v)})
        section.blocks.append(curves_figure(history, keys))
    else:
        section.missing.append(f"`{display(train_path, r.root)}`: no per-step history (a list of records with a `step` key), "
                               "so no curves; final values below")
    rows = _scalars(train, skip=[k for k, v in train.items() if isinstance(v, list)])
    section.blocks.append(Table(["metric", "value", "recorded as"], [[metric_label(f"train.{k}"), v, k] for k, v in rows],
                                "Recorded in train.json."))
    return section


def calibration_section(r: _Reader) -> Section:
    section = Section("Judge calibration", [r.shown("calibration")])
    calib = r.json("calibration", section, dict)
    if calib is None:
        return section
    trusted = {True: "trusted", False: "NOT trusted: no win-rate claim can be supported"}.get(calib.get("trusted"), "not recorded")
    section.blocks.append(f"Judge `{calib.get('judge_model', calib.get('model'))}`: **{trusted}**.")
    rows = calibration_rows(flatten(calib))  # the cards' rows: x_low / x_high joined to x, readable names
    section.blocks.append(Table(["measure", "value", "interval low", "interval high", "recorded as"],
                                [[row["label"], row["value"], row["low"], row["high"], row["key"]] for row in rows]))
    return section


def _forest_rows(r: _Reader, section: Section, eval_metrics: Mapping[str, Any] | None) -> list[dict]:
    if r.path("forest").exists():
        with open(r.path("forest"), encoding="utf-8", newline="") as fh:
            return [dict(row) for row in csv.DictReader(fh)]
    section.missing.append(f"`{r.shown('forest')}`: not found (written by `dvc repro stats`); pooled rows from eval.json only")
    rows = []
    for key in sorted(eval_metrics or {}):
        parts = key.split("/")
        if len(parts) == 3 and parts[2] == "win_rate":
            prefix = "/".join(parts[:2])
            row = {c: eval_metrics.get(f"{prefix}/{c}") for c in
                   ("n", "n_unparseable", "win_rate", "iid_low", "iid_high", "cluster_low", "cluster_high", "n_clusters", "n_eff")}
            rows.append({"condition": parts[0], "opponent": parts[1], "row": "pooled", "row_kind": "pooled", **row})
    return rows



def winrate_section(r: _Reader) -> Section:
    section = Section("Win-rates against held-out answers", [r.shown("eval_metrics"), r.shown("forest")])
    eval_metrics = r.json("eval_metrics", section, dict)
    rows = _forest_rows(r, section, eval_metrics)
    if not rows:
        section.missing.append("no win-rate rows in the stats outputs")
        return section
    table = []
    for row in rows:
        pooled = row.get("row_kind") == "pooled"
        note = empty_reason(row) or ""
        if pooled and num(row.get("n_eff")) is not None:
            # n_eff counts judgments; the cluster interval's real sample is the vignettes.
            note = (f"{fmt(count(row.get('n')))} scored judgments (effective sample size {fmt(num(row.get('n_eff')), 1)}, "
                    f"as stats recorded it) from only {fmt(count(row.get('n_clusters')))} vignette(s): the vignette-cluster "
                    "interval reflects that")
        table.append([row.get("condition"), row.get("opponent"), row.get("row"), count(row.get("n")), num(row.get("win_rate")),
                      _interval(row, "iid"), _interval(row, "cluster"), note])
    section.blocks.append(Table(
        ["condition", "opponent", "row", "n scored", "win-rate", "iid 95% interval", "vignette-cluster 95% interval", "note"],
        table, "Claims use the vignette-cluster interval; the iid (Wilson) interval is shown for reference."))
    for (condition, opponent) in dict.fromkeys((row.get("condition"), row.get("opponent")) for row in rows):
        group = [row for row in rows if (row.get("condition"), row.get("opponent")) == (condition, opponent)]
        section.blocks.append(forest_figure(f"Win-rate of {condition} against {opponent}", group))
    return section


def _interval(row: Mapping[str, Any], kind: str) -> str | None:
    low, high = num(row.get(f"{kind}_low")), num(row.get(f"{kind}_high"))
    return None if low is None or high is None else f"[{fmt(low)}, {fmt(high)}]"


def claims_section(r: _Reader) -> Section:
    section = Section("Claims", [r.shown("claims")])
    claims = r.json("claims", section, list)
    if claims is None:
        return section
    rows = [[c.get("claim_id"), c.get("status"), c.get("supported"), c.get("statement"), c.get("reason"),
             ", ".join(map(str, c.get("flags") or []))] for c in claims if isinstance(c, Mapping)]
    if not rows:
        section.blocks.append("No claims recorded.")
    else:
        section.blocks.append(Table(["claim", "status", "supported", "statement", "reason", "flags"], rows))
    return section


def registry_section(r: _Reader) -> Section:
    section = Section("Registry: versions, aliases and gates", [r.shown("registration"), r.shown("leakscan")])
    receipt = r.json("registration", section, dict)
    if receipt is not None:
        for key, entries in receipt.items():
            if _records(entries):
                section.blocks += _record_tables(entries, f"`{key}` in the receipt")
        rest = _scalars({k: v for k, v in receipt.items() if not isinstance(v, list)})
        if rest:
            section.blocks.append(Table(["key", "value"], rest))
    scan = r.json("leakscan", section, dict)
    if scan is not None:
        verdict = {True: "passed", False: "FAILED"}.get(scan.get("passed"), "not recorded")
        section.blocks.append(f"Leak scan: **{verdict}**: {fmt(scan.get('n_hits'))} hit(s) in {fmt(scan.get('n_probes'))} "
                              f"probes of {fmt(scan.get('mlflow_runs_scanned'))} MLflow runs and the listed folders.")
        section.blocks.append(Table(["key", "value"], _scalars(scan, skip=["hits"])))
    return section


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(e, Mapping) for e in value)


def _record_tables(entries: list[Mapping[str, Any]], caption: str) -> list[Table]:
    """One table of the entries' scalars; each list of records inside an entry (gate results, say)
    gets its own table, captioned with the entry it belongs to."""
    flat = [{k: v for k, v in flatten(e).items() if not _records(v)} for e in entries]
    columns = list(dict.fromkeys(k for f in flat for k in f))
    tables = [Table(columns, [[_cell(f.get(c)) for c in columns] for f in flat], f"{caption}.")]
    for entry in entries:
        label = " ".join(str(entry[k]) for k in ("name", "version") if k in entry) or "entry"
        for key, value in flatten(entry).items():
            if _records(value):
                tables += _record_tables(value, f"{caption}: `{key}` of {label}")
    return tables


def _cell(value: Any) -> Any:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return value


def collect(sources: ReportSources, root: str | os.PathLike = ".", *, health: Any = None,
            max_completion_length: int | None = None, validate_rules: Any = None) -> list[Section]:
    """Every section; with ``health`` (CardHealthSettings) the policy section also applies the cards' health gates;
    with ``validate_rules`` (ValidateSettings) the validation section re-checks that its report is bound to the
    canonical data now on disk."""
    r = _Reader(sources, Path(root))
    r.health, r.max_completion_length, r.validate_rules = health, max_completion_length, validate_rules
    return [f(r) for f in (data_section, validation_section, guard_section, rm_section, policy_section,
                           calibration_section, winrate_section, claims_section, registry_section)]
