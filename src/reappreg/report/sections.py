"""Each pipeline output file, read tolerantly by key, as one section of the report."""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.card.build import calibration_rows, metric_label
from reappreg.errors import InputError
from reappreg.evidence.flat import flatten
from reappreg.evidence.formatting import fmt
from reappreg.io import read_json, read_jsonl
from reappreg.report.blocks import (Details, Figure, Section, Table, count, curves_figure, empty_reason, forest_figure,
                                    is_number, num)
from reappreg.report.facts import (beats_length, judge_criteria, judge_trust, policy_health, result_rows, results_judge,
                                   rm_scores)


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
    samples: Path | None = None
    results: Path | None = None          # metrics/results.json: the table the report leads with
    rm_comparison: Path | None = None    # plots/rm/comparison.png: every RM beside the trivial rankers


# Which stage writes each source: named in a missing section's reason.
STAGE_OF = {
    "canonical": "ingest", "train": "split", "heldout": "split", "validation": "validate", "certificate": "guard",
    "rm_metrics": "rm_train", "policy_metrics": "policy_train", "calibration": "judge_calibrate",
    "eval_metrics": "stats", "forest": "stats", "claims": "stats", "registration": "register", "leakscan": "leakscan",
    "samples": "samples", "results": "results", "rm_comparison": "rm_compare",
}


class _Reader:
    """Reads sources, remembering for each section why something could not be read."""

    def __init__(self, sources: ReportSources, root: Path):
        self.sources, self.root = sources, root
        self.health: Any = None
        self.max_completion_length: int | None = None
        self.validate_rules: Any = None
        self.trust_policy: Any = None
        self.settings_dump: dict[str, Any] = {}

    def path(self, name: str) -> Path:
        return getattr(self.sources, name)

    def shown(self, name: str) -> str:
        return display(self.path(name), self.root)

    def display(self, path: Path) -> str:
        return display(path, self.root)

    def absent(self, name: str, section: Section, sub: str | None = None) -> bool:
        if self.path(name) is None:
            section.missing.append(f"no `{name}` file was given to the report (written by `dvc repro {STAGE_OF[name]}`)")
            return True
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


def _interval_cell(low: Any, high: Any) -> str | None:
    """``[low, high]`` as read, or None (shown as a dash) when either end is missing."""
    return None if num(low) is None or num(high) is None else f"[{fmt(low)}, {fmt(high)}]"


def _bar_cell(row: dict[str, Any], bar: Any) -> str | None:
    if row["status"] == "not_run":
        return None
    if row["bar"] is None:
        return "n/a (off-distribution)" if row["ood"] else "n/a (not the bar's opponent)"
    cleared = {True: "yes", False: "no"}.get(row["bar_cleared"])
    if cleared is None:
        return None
    claim = f" (claim {row['bar_status']}{', supported' if row['bar_supported'] else ''})" if row["bar_status"] else ""
    return cleared + claim


def _flags_cell(row: dict[str, Any]) -> str:
    if row["status"] == "not_run":
        return f"not run: {row['reason']}" if row["reason"] else "not run"
    flags = row["flags"] if isinstance(row["flags"], list) else []
    return ", ".join(map(str, flags)) or "none"


RESULTS_TITLE = "Results across models"


def results_section(r: _Reader) -> Section:
    """The table the report leads with: one row per row of metrics/results.json (every condition
    against each opponent: the policy, each kept checkpoint, base and the other conditions), its
    numbers as the stats stage wrote them (reappreg.report.facts.result_rows), both interval kinds."""
    section = Section(RESULTS_TITLE, [r.shown("results")] if r.sources.results else [], anchor="results")
    obj = r.json("results", section, dict)
    if obj is None:
        return section
    judge = {k: v[0] for k, v in results_judge(obj).items()}
    rows = [{k: v[0] for k, v in row.items()} for row in result_rows(obj)]
    if not rows:
        section.missing.append(f"`{r.shown('results')}`: no rows")
        return section
    conf = judge["confidence"]
    level = f"{num(conf) * 100:g}% " if num(conf) is not None else ""
    trusted = {True: "yes", False: "NO"}.get(judge["trusted"])
    bar = judge["bar"]
    section.blocks.append(
        f"Every condition against the bar's opponent `{judge['opponent']}` (and any other opponent a row names), "
        f"judged by `{judge['model']}`: trusted (as the stats stage recomputed it) **{trusted or 'not recorded'}**"
        + (f" ({judge['trust_reason']})" if judge["trusted"] is False and judge["trust_reason"] else "")
        + f". Reference bar: {fmt(bar)}, cleared only by the vignette-cluster lower bound.")
    table = []
    for row in rows:
        kind = str(row["kind"]) + ("" if row["pool"] in (None, "policy") else f", {row['pool']}")
        table.append([row["condition"], kind, row["opponent"], row["n"], row["win_rate"],
                      _interval_cell(row["iid_screening_low"], row["iid_screening_high"]),
                      _interval_cell(row["cluster_low"], row["cluster_high"]),
                      row["lc_win_rate"], _interval_cell(row["lc_low"], row["lc_high"]),
                      None if num(row["mean_length"]) is None else fmt(num(row["mean_length"]), 1),
                      _bar_cell(row, bar), None if row["status"] == "not_run" else judge["trusted"], _flags_cell(row)])
    section.blocks.append(Table(
        ["condition", "kind", "opponent", "contests", "win-rate vs opponent", f"iid Wilson {level}interval (screening only)",
         f"vignette-cluster {level}interval (claims use it)", "length-controlled win-rate",
         f"length-controlled {level}interval", "mean length (characters)", f"clears the bar {fmt(bar)} (cluster lower bound)",
         "judge trusted", "flags"],
        table, "One row per row of the results table, as the stats stage wrote it; a dash is a value the file does not "
               "have. The iid (Wilson) interval ignores that contests share vignettes: screening only. The "
               "length-controlled win-rate is the judge's preference read at equal length (AlpacaEval 2's GLM)."))
    return section


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


def _detector_rows(cert: Mapping, detectors: Mapping, counts: Mapping) -> list[list[Any]]:
    """The detector table's rows as the certificate declares them (``detector_rows``: each
    detector's own label and the settings it shows, ``reappreg.guard.certificate``); a
    certificate without them (made before detectors declared their rows) shows every
    recorded setting of each detector under "not declared"."""
    declared = cert.get("detector_rows")
    if isinstance(declared, list):
        wanted = [(str(r.get("detector")), str(r.get("what")), [str(k) for k in r.get("shown") or []])
                  for r in declared if isinstance(r, Mapping)]
    else:
        wanted = [(name, "not declared in the certificate", [k for k, v in section.items() if not isinstance(v, Mapping)])
                  for name, section in detectors.items() if isinstance(section, Mapping)]
    rows = []
    for name, label, keys in wanted:
        settings = detectors.get(name)
        if isinstance(settings, Mapping):
            setting = ", ".join(f"{k}={_cell(settings[k]) if isinstance(settings[k], list) else fmt(settings[k])}"
                                for k in keys if k in settings)
            rows.append([name, label, setting, counts.get(f"hits_{name}")])
    return rows


def guard_section(r: _Reader) -> Section:
    section = Section("Separation guard certificate", [r.shown("certificate")])
    cert = r.json("certificate", section, dict)
    if cert is None:
        return section
    section.blocks.append(f"Result: **{cert.get('result', 'not recorded')}** (policy `{cert.get('policy')}`, "
                          f"schema `{cert.get('schema')}`). The certificate covers only the sources listed here.")
    detectors = cert.get("detectors") if isinstance(cert.get("detectors"), Mapping) else {}
    counts = cert.get("counts") if isinstance(cert.get("counts"), Mapping) else {}
    rows = _detector_rows(cert, detectors, counts)
    tokenizers = [t.get("name") for t in cert.get("tokenizers") or [] if isinstance(t, Mapping)]
    if tokenizers or "hits_in_tokenizer_views" in counts:
        rows.append(["tokenizer views", "every detector again on the text as each tokenizer sees it",
                     ", ".join(map(str, tokenizers)) or "none", counts.get("hits_in_tokenizer_views")])
    decode_views = cert.get("decode_views")
    if isinstance(decode_views, list):
        rows.append(["decoding views", "every detector again on the text decoded (escapes, HTML source, markup, "
                     "upside-down text, transliteration, leetspeak)",
                     ", ".join(map(str, decode_views)) or "none", counts.get("hits_in_decode_views")])
    semantic = cert.get("semantic") if isinstance(cert.get("semantic"), Mapping) else None
    if semantic is not None and semantic.get("enabled"):
        rows.append(["semantic", f"embedding cosine ({'blocking' if semantic.get('blocking') else 'reported, not blocking'})",
                     f"threshold={fmt(semantic.get('threshold'))}", semantic.get("pairs_above_threshold")])
    if rows:
        section.blocks.append(Table(["detector", "what it matches", "setting", "hits"], rows,
                                    f"Normalisation `{str(detectors.get('normalisation', cert.get('normalisation')))[:60]}…` "
                                    "before every detector (full string in the raw certificate below)."))
    heldout = cert.get("heldout") if isinstance(cert.get("heldout"), Mapping) else {}
    section.blocks.append(Table(["checked", "count"], [
        ["training sources", counts.get("sources")], ["records", counts.get("records_checked")],
        ["texts", counts.get("texts_checked")], ["held-out answers (variants)",
                                                  f"{fmt(heldout.get('answers'))} ({fmt(heldout.get('answer_variants'))})"],
        ["hits", counts.get("hits")], ["records flagged", counts.get("flagged_records")],
        ["records removed", counts.get("removed_records")]]))
    training = [t for t in cert.get("training") or [] if isinstance(t, Mapping)]
    if training:
        section.blocks.append(Table(["checked source", "records", "flagged", "guarded copy (trained on)"],
                                    [[t.get("path"), t.get("records"), t.get("flagged_records"), t.get("guarded_path")]
                                     for t in training]))
    summary = _scalars({k: cert[k] for k in ("counts", "detectors", "heldout") if isinstance(cert.get(k), Mapping)})
    if summary:
        section.blocks.append(Details("The certificate's counts and detector settings (raw)",
                                      [Table(["key", "value"], summary, "As recorded.")]))
    return section


def _ci(value: Any, low: Any, high: Any) -> str | None:
    if num(value) is None:
        return None
    if num(low) is None or num(high) is None:
        return f"{fmt(value)} (no interval)"
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def rm_files(r: _Reader, section: Section) -> list[tuple[Path, dict]]:
    out = []
    for file in sorted(r.path("rm_metrics").glob("*.json")):
        try:
            obj = read_json(file)
        except InputError as exc:
            section.missing.append(f"`{display(file, r.root)}`: unreadable ({exc})")
            continue
        if not isinstance(obj, dict):
            section.missing.append(f"`{display(file, r.root)}`: expected a JSON object")
            continue
        out.append((file, obj))
    return out


def rm_section(r: _Reader) -> Section:
    section = Section("Reward models against their baselines", [r.shown("rm_metrics")])
    if r.absent("rm_metrics", section):
        return section
    files = rm_files(r, section)
    if not files and not section.missing:
        section.missing.append(f"`{r.shown('rm_metrics')}`: no metrics files (written by `dvc repro rm_train`)")
    if not files:
        return section
    rows, raw, rules = [], [], []

    def row(name: str, scores: dict[str, Any], verdict_cell: str) -> list[Any]:
        sc = {k: v[0] for k, v in scores.items()}
        rivals = [r for r in dict.fromkeys((sc["holdout.rival"], sc["lovo.rival"])) if r]
        return [name, sc["objective"],
                _ci(sc["holdout.acc"], sc["holdout.low"], sc["holdout.high"]),
                _ci(sc["lovo.acc"], sc["lovo.low"], sc["lovo.high"]),
                f"{fmt(sc['holdout.rival_acc'])} / {fmt(sc['lovo.rival_acc'])}" + (f" ({' / '.join(rivals)})" if rivals else ""),
                f"{fmt(sc['holdout.regression'])} / {fmt(sc['lovo.regression'])}",
                _ci(sc["lovo.vs_rival.difference"], sc["lovo.vs_rival.cluster_low"], sc["lovo.vs_rival.cluster_high"]),
                _ci(sc["lovo.vs_regression.value"], sc["lovo.vs_regression.low"], sc["lovo.vs_regression.high"]),
                _ci(sc["lovo.longer_worse.value"], sc["lovo.longer_worse.low"], sc["lovo.longer_worse.high"]),
                verdict_cell]

    for file, obj in files:
        scores = rm_scores(obj)
        sc = {k: v[0] for k, v in scores.items()}
        verdict = beats_length(scores)
        gate = "" if sc["gate"] is None else f" (registry gate: {'pass' if sc['gate'] else 'FAIL'})"
        two_part = sc["two_part"] is True
        rows.append(row(f"{file.stem} (two-part ranking model)" if two_part else file.stem, scores,
                        {True: "yes", False: "NO", None: "not measured"}[verdict] + gate))
        if two_part:
            # The reward GRPO reads: measured on the same pairs, gated only where length misleads.
            rows.append(row(f"{file.stem} (residual part: the GRPO reward)", rm_scores(obj, "residual"),
                            f"longer-is-worse lower bound {fmt(sc['lovo.reward_longer_worse.low'])} vs chance "
                            f"{fmt(sc['lovo.reward_longer_worse.chance'])}"))
        if isinstance(sc["rule"], str):
            rules.append(sc["rule"])
        if isinstance(obj.get("baselines"), Mapping):
            raw += [[file.stem, k, v] for k, v in _scalars(obj["baselines"])]
    gate_rows = []
    for file, obj in files:
        sc = {k: v[0] for k, v in rm_scores(obj).items()}
        for split, label in (("holdout", "held-out"), ("lovo", "leave-one-vignette-out (every training text once)")):
            if num(sc[f"{split}.format_gate.rejected"]) is None:
                continue
            g, u = f"{split}.format_gate.gated", f"{split}.format_gate.ungated"
            gate_rows.append([file.stem, label, fmt(sc[f"{split}.format_gate.rejected"]),
                              _ci(sc[f"{g}.accuracy"], sc[f"{g}.cluster_low"], sc[f"{g}.cluster_high"]),
                              _ci(sc[f"{u}.accuracy"], sc[f"{u}.cluster_low"], sc[f"{u}.cluster_high"])])
    rule = (f"the registry gate `beats_length_baseline`, in the words of the metrics that computed it: {rules[0]}" if rules
            else "the registry gate `beats_length_baseline` (its rule is in no metrics file here)")
    section.blocks.append(Table(
        ["model", "objective", "held-out accuracy [95% CI]", "leave-one-vignette-out accuracy [95% CI]",
         "strongest trivial rival (held-out / LOVO)", "length regression (held-out / LOVO)",
         "model minus strongest rival, LOVO [vignette-cluster 95% CI]",
         "model minus length regression, LOVO [vignette-cluster 95% CI]",
         "accuracy where the longer text is worse, LOVO [vignette-cluster 95% CI]", "beats length?"],
        rows, "Pairwise accuracy: the share of human-rated pairs ordered like the people ordered them. The strongest trivial "
              "rival is the most accurate ranker that reads no quality, on the same pairs. 'Beats length' applies " + rule
              + " (a member's or baseline's file records no reward part: only its difference is tested). The length "
              "regression is a "
              "least-squares fit of the rating on length features alone; 'where the longer text is worse' scores the model "
              "on the pairs a length ranker gets wrong by construction."))
    if gate_rows:
        section.blocks.append(Table(
            ["model", "texts", "share the format gate rejects", "reward's accuracy, gated [vignette-cluster 95% CI]",
             "ungated [vignette-cluster 95% CI]"],
            gate_rows, "The policy's reward is gated: a text the format gate rejects (empty, or more sentences than "
                       "rm.ensemble.max_sentences) gets rm.ensemble.format_penalty. The share is of the human-rated texts "
                       "each split evaluates; the accuracies are the reward part's on the same pairs."))
    figure = rm_comparison_figure(r, section)
    if figure is not None:
        section.blocks.append(figure)
    if raw:
        section.blocks.append(Details("Every baseline recorded with each model (raw)",
                                      [Table(["model", "baseline", "value"], raw)]))
    return section


RM_COMPARISON_TITLE = "Reward models and trivial rankers: pairwise accuracy"


def rm_comparison_figure(r: _Reader, section: Section) -> Figure | None:
    """The comparison figure `reappreg rm compare` draws (every reward model beside the trivial
    rankers, held out and leave one vignette out, with vignette-cluster intervals and chance),
    embedded as it was written; its numbers are the table's above."""
    if r.absent("rm_comparison", section):
        return None
    try:
        png = r.path("rm_comparison").read_bytes()
    except OSError as exc:
        section.missing.append(f"`{r.shown('rm_comparison')}`: unreadable ({exc})")
        return None
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        section.missing.append(f"`{r.shown('rm_comparison')}`: not a PNG image")
        return None
    return Figure(RM_COMPARISON_TITLE, png,
                  f"From `{r.shown('rm_comparison')}` (`dvc repro rm_compare`): each reward model (blue) and each trivial "
                  "ranker that reads no quality (grey: the length baselines), held out and leave one vignette out, with "
                  "95% vignette-cluster intervals; the dashed line is chance (0.5).")


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
    try:
        monitor, health = policy_health(r.path("policy_metrics"), r.health, r.max_completion_length)
    except InputError as exc:
        section.missing.append(f"`{r.shown('policy_metrics')}`: unreadable ({exc})")
        return section
    verdict = {True: "healthy", False: "UNHEALTHY"}.get(monitor, "not recorded")
    reason = f" ({train['unhealthy_reason']})" if train.get("unhealthy_reason") else ""
    section.blocks.append(f"Training monitor verdict: **{verdict}**{reason} after {fmt(train.get('steps_run'))} steps.")
    if health is not None:
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
    section.blocks.append(Details("Everything train.json records (raw)", [
        Table(["metric", "value", "recorded as"], [[metric_label(f"train.{k}"), v, k] for k, v in rows])]))
    return section


def calibration_section(r: _Reader) -> Section:
    section = Section("Judge calibration", [r.shown("calibration")])
    calib = r.json("calibration", section, dict)
    if calib is None:
        return section
    trusted, how = judge_trust(calib, r.trust_policy)
    word = {True: "trusted", False: "NOT trusted: no win-rate claim can be supported", None: "not recorded"}[trusted]
    section.blocks.append(f"Judge `{calib.get('judge_model', calib.get('model'))}`: **{word}** ({how}).")
    section.blocks.append(Table(["criterion", "value", "needs", "met"],
                                [[name, value, f"{op} {fmt(bar)}", {True: "yes", False: "NO", None: "not measured"}[met]]
                                 for name, value, op, bar, met, _ in judge_criteria(calib, r.trust_policy)],
                                "A judge is trusted only when every criterion is met (reappreg.stats.trust)."))
    rows = calibration_rows(flatten(calib))  # the cards' rows: x_low / x_high joined to x, readable names
    section.blocks.append(Details("Every calibration measure (raw)", [
        Table(["measure", "value", "interval low", "interval high", "recorded as"],
              [[row["label"], row["value"], row["low"], row["high"], row["key"]] for row in rows])]))
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


def _orders(verdicts: list[Mapping[str, Any]], order: str) -> str:
    rows = [v for v in verdicts if v.get("order") == order]
    if not rows:
        return "not judged"
    return "\n".join(f"{v.get('outcome')} ({v.get('verdict')}) vs {v.get('opponent_source')} {v.get('opponent_answer_id') or ''}".rstrip()
                     for v in rows)


def _gate(sample: Mapping[str, Any]) -> str:
    words = ["HIT: format penalty" if sample.get("format_gate_hit") else "passed"]
    if sample.get("missing_close_tag"):
        words.append("no </think>")
    if sample.get("hit_max_new_tokens"):
        words.append("cut at the token limit")
    return "; ".join(words)


def samples_section(r: _Reader) -> Section:
    section = Section("The policy's own words", [r.shown("samples")] if r.sources.samples else [])
    if r.sources.samples is None:
        section.missing.append("no samples file was given to the report (written by `dvc repro samples`)")
        return section
    obj = r.json("samples", section, dict)
    if obj is None:
        return section
    samples = [x for x in obj.get("samples") or [] if isinstance(x, Mapping)]
    conditions = obj.get("conditions") if isinstance(obj.get("conditions"), Mapping) else {}
    section.blocks.append(
        f"Shown: the {obj.get('rule')}, of {', '.join(f'`{c}`' for c in conditions) or 'no condition'}. RM reward: "
        f"{obj.get('reward')}. The judge saw each answer against a held-out answer in both orders; the held-out "
        "answers themselves are never shown here (their source and id are). This file is leak-scanned.")
    if not samples:
        section.missing.append(f"`{r.shown('samples')}`: no samples")
        return section
    for vignette in sorted({str(x.get("vignette_id")) for x in samples}):
        group = [x for x in samples if str(x.get("vignette_id")) == vignette]
        section.blocks.append(f"**{vignette}**: {group[0].get('scenario', '(scenario not recorded)')}")
        section.blocks.append(Table(
            ["condition", "answer", "RM reward", "format gate", "judge, policy first", "judge, policy second"],
            [[x.get("condition"), x.get("answer"), x.get("rm_reward"), _gate(x),
              _orders(x.get("verdicts") or [], "policy_first"), _orders(x.get("verdicts") or [], "policy_second")]
             for x in group]))
    return section


def registry_section(r: _Reader) -> Section:
    section = Section("Registry: versions, aliases and gates", [r.shown("registration"), r.shown("leakscan")])
    receipt = r.json("registration", section, dict)
    if receipt is not None:
        registered = [e for e in receipt.get("registered") or [] if isinstance(e, Mapping)]
        if registered:
            section.blocks.append(Table(["model", "version", "new?", "note", "content md5"],
                                        [[e.get("name"), e.get("version"), e.get("created"), e.get("note"), e.get("content_md5")]
                                         for e in registered], "Versions the last `dvc repro register` registered or found."))
        state = receipt.get("verify")
        if isinstance(state, Mapping):
            verdict = {True: "passes", False: "FAILS"}.get(state.get("verify_passes"), "not recorded")
            section.blocks.append(f"`reappreg registry verify` right after registration: **{verdict}** "
                                  f"({fmt(state.get('verified'))} alias(es) verified, {fmt(state.get('violations'))} violation(s), "
                                  f"{fmt(state.get('pending'))} pending UI request(s), "
                                  f"{len(state.get('history_problems') or [])} history problem(s)); checked: {state.get('checked')}. "
                                  "Run it again for the registry's state now.")
            rows = [[a.get("name"), a.get("alias"), a.get("version"), a.get("verified"), a.get("detail")]
                    for a in state.get("aliases") or [] if isinstance(a, Mapping)]
            if rows:
                section.blocks.append(Table(["model", "alias", "version", "verified", "what verify says"], rows))
        else:
            section.missing.append(f"`{r.shown('registration')}`: no `verify` block (an older receipt); "
                                   "re-run `dvc repro register` or `reappreg registry verify`")
        raw = [t for key, entries in receipt.items() if _records(entries) for t in _record_tables(entries, f"`{key}` in the receipt")]
        rest = _scalars({k: v for k, v in receipt.items() if not isinstance(v, (list, dict))})
        section.blocks.append(Details("The receipt (raw)", [*raw, *([Table(["key", "value"], rest)] if rest else [])]))
    scan = r.json("leakscan", section, dict)
    if scan is not None:
        verdict = {True: "passed", False: "FAILED"}.get(scan.get("passed"), "not recorded")
        section.blocks.append(f"Leak scan: **{verdict}**: {fmt(scan.get('n_hits'))} hit(s) in {fmt(scan.get('n_probes'))} "
                              f"probes of {fmt(scan.get('mlflow_runs_scanned'))} MLflow runs and the listed folders.")
        section.blocks.append(Details("The leak scan's counts (raw)", [Table(["key", "value"], _scalars(scan, skip=["hits"]))]))
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
            max_completion_length: int | None = None, validate_rules: Any = None, trust_policy: Any = None,
            settings_dump: Mapping[str, Any] | None = None) -> list[Section]:
    """The summary, then the results table across models, then every section. With ``health`` (CardHealthSettings) the policy section also applies the cards'
    health gates; with ``validate_rules`` (ValidateSettings) the validation section re-checks that its report is bound
    to the canonical data now on disk; with ``trust_policy`` (reappreg.stats.trust.TrustPolicy) the judge's trust is
    recomputed rather than read; ``settings_dump`` (the params as a dict) is where the summary reads thresholds."""
    from reappreg.report.summary import summary_section

    r = _Reader(sources, Path(root))
    r.health, r.max_completion_length, r.validate_rules = health, max_completion_length, validate_rules
    r.trust_policy, r.settings_dump = trust_policy, dict(settings_dump or {})
    sections = [f(r) for f in (results_section, data_section, validation_section, guard_section, rm_section, policy_section,
                               calibration_section, winrate_section, claims_section, samples_section, registry_section)]
    return [summary_section(r, sections), *sections]
