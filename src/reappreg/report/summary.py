"""The report's first screen: one line per stage answering its question, each linking to its section.

Every number a line shows is a :class:`~reappreg.report.blocks.Fact`: the value, the file it
was read from and where in that file (``params.yaml`` for a threshold from the settings). The
tests re-read every fact from its file, and check that the line shows no number without one.
Verdicts are derived, not copied: the judge's trust is recomputed from the calibration's
numbers, "beats length" is the registry gate's test applied to every reward model, the policy
verdict applies the cards' health gates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reappreg.errors import InputError
from reappreg.evidence.formatting import fmt
from reappreg.io import read_jsonl
from reappreg.report.blocks import Fact, Section, Summary, SummaryLine, Table, read_if_present, slug, walk

PARAMS = "params.yaml"


class _Line:
    """Builds one line; :meth:`f` reads a value, remembers where from and returns it formatted."""

    def __init__(self, title: str, anchor: str):
        self.title, self.anchor = title, anchor
        self.facts: list[Fact] = []
        self.sentences: list[str] = []
        self.table: Table | None = None

    def f(self, source: str, obj: Any, *path: Any) -> str:
        value = walk(obj, path)
        self.facts.append(Fact(value, source, tuple(path)))
        return fmt(value)

    def n(self, source: str, rows: list, *path: Any) -> str:
        self.facts.append(Fact(len(rows), source, tuple(path), count=True))
        return str(len(rows))

    def done(self, verdict: str, ok: bool | None) -> SummaryLine:
        return SummaryLine(self.title, self.anchor, verdict, self.sentences, self.facts, ok, self.table)


def _missing(title: str, anchor: str, what: str) -> SummaryLine:
    return SummaryLine(title, anchor, "missing", [f"{what} (see its section)"], [], None)


def summary_section(r: Any, sections: list[Section]) -> Section:
    """The summary, built from the same files as ``sections`` (a ``sections._Reader`` gives paths and settings)."""
    anchors = {s.title: s.anchor for s in sections}

    def anchor(prefix: str) -> str:
        return next((a for t, a in anchors.items() if t.startswith(prefix)), slug(prefix))

    lines = [data_line(r, anchor("Data")), guard_line(r, anchor("Separation guard")), *rm_line(r, anchor("Reward models")),
             policy_line(r, anchor("Policy training")), judge_line(r, anchor("Judge")), claim_line(r, anchor("Claims")),
             registry_line(r, anchor("Registry")), leakscan_line(r, anchor("Registry")),
             samples_line(r, anchor("The policy's own words"))]
    return Section("Summary", [], [Summary(lines)], anchor="summary")


def data_line(r: Any, anchor: str) -> SummaryLine:
    line = _Line("Data and validation", anchor)
    try:
        canonical = read_jsonl(r.path("canonical") / "reappraisals.jsonl")
        train = read_jsonl(r.path("train") / "reappraisals.jsonl")
        heldout = read_jsonl(r.path("heldout"))
    except (InputError, OSError):
        return _missing(line.title, anchor, "the canonical, training or held-out files could not be read")
    line.sentences.append(f"{line.n(r.shown('canonical') + '/reappraisals.jsonl', canonical)} reappraisals: "
                          f"{line.n(r.shown('train') + '/reappraisals.jsonl', train)} in the training pool, "
                          f"{line.n(r.shown('heldout'), heldout)} held out.")
    report = read_if_present(r.path("validation"))
    if not isinstance(report, dict):
        line.sentences.append("No readable validation report.")
        return line.done("not validated", None)
    src = r.shown("validation")
    passed = report.get("success") is True
    line.sentences.append(f"great-expectations: {line.f(src, report, 'n_failed')} of {line.f(src, report, 'n_expectations')} "
                          "expectations failed.")
    return line.done("validated" if passed else "validation FAILED", passed)


def guard_line(r: Any, anchor: str) -> SummaryLine:
    line = _Line("Separation guard", anchor)
    cert, src = read_if_present(r.path("certificate")), r.shown("certificate")
    if not isinstance(cert, dict):
        return _missing(line.title, anchor, "no readable guard certificate")
    detectors = [name for name, value in (cert.get("detectors") or {}).items() if isinstance(value, Mapping)]
    views = [t.get("name") for t in cert.get("tokenizers") or [] if isinstance(t, Mapping)]
    line.sentences.append(
        f"{line.f(src, cert, 'counts', 'texts_checked')} texts in {line.f(src, cert, 'counts', 'records_checked')} records of "
        f"{line.f(src, cert, 'counts', 'sources')} training sources checked against {line.f(src, cert, 'heldout', 'answers')} "
        f"held-out answers by {', '.join(detectors) or 'no detector'}"
        + (f", also as the tokenizer(s) {', '.join(map(str, views))} see them" if views else "") + ".")
    line.sentences.append(f"{line.f(src, cert, 'counts', 'hits')} hit(s); "
                          f"{line.f(src, cert, 'counts', 'removed_records')} record(s) removed (policy `{cert.get('policy')}`).")
    result = cert.get("result")
    return line.done("PASS" if result == "pass" else f"{str(result).upper()}", result == "pass")


# The summary's reward-model columns: one kind of number each, the header saying which. The
# difference column is the paired difference of the two accuracies beside it (same pairs, same split).
RM_COLUMNS = ["model", "held-out accuracy", "strongest trivial rival (LOVO)", "LOVO accuracy: model",
              "LOVO accuracy: rival", "LOVO difference, model − rival [vignette-cluster 95% CI]",
              "reward part where the longer text is worse, LOVO accuracy (lower bound; chance)", "beats length?"]


def rm_line(r: Any, anchor: str) -> list[SummaryLine]:
    from reappreg.report.facts import beats_length, rm_scores

    line = _Line("Reward models vs length", anchor)
    folder = r.path("rm_metrics")
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    verdicts, gate, rows = [], None, []
    for file in files:
        obj = read_if_present(file)
        if not isinstance(obj, dict):
            continue
        src, scores = r.display(file), rm_scores(obj)
        beats = beats_length(scores)
        verdicts.append(beats)

        def v(key: str) -> str:
            return line.f(src, obj, *scores[key][1])

        def ci(key: str) -> str:
            low, high = (scores[f"{key}.cluster_{end}"][0] for end in ("low", "high"))
            shown = v(f"{key}.difference")
            return shown if low is None or high is None else \
                f"{shown} [{v(f'{key}.cluster_low')}, {v(f'{key}.cluster_high')}]"

        reward = None
        if scores["lovo.reward_longer_worse.accuracy"][0] is not None:
            reward = (f"{v('lovo.reward_longer_worse.accuracy')} ({v('lovo.reward_longer_worse.low')}; "
                      f"{v('lovo.reward_longer_worse.chance')})")
        verdict = {True: "beats length", False: "does NOT beat length", None: "not measured"}[beats]
        if scores["gate"][0] is not None:
            gate = bool(scores["gate"][0])
            verdict += f" (registry gate `beats_length_baseline`: {'pass' if gate else 'FAIL'})"
        name = f"`{file.stem}`" + (" (two-part: ranking model; its residual part is the reward)"
                                   if scores["two_part"][0] is True else "")
        rows.append([name, v("holdout.acc"), scores["lovo.rival"][0] and v("lovo.rival"), v("lovo.acc"),
                     v("lovo.rival_acc"), ci("lovo.vs_rival"), reward, verdict])
        if scores["reward"][0] is not None:
            line.sentences.append(f"`{file.stem}` as the GRPO reward: {v('reward')}.")
    if not verdicts:
        return [_missing(line.title, anchor, "no readable reward-model metrics")]
    line.sentences.insert(0, "Each reward model's pairwise accuracy beside its strongest trivial rival's on the same "
                             "pairs, leave one vignette out (LOVO) as the gate reads them.")
    line.table = Table(RM_COLUMNS, rows)
    measured = [b for b in verdicts if b is not None]
    if not measured:
        return [line.done("not measured", None)]
    beating = sum(1 for b in measured if b)
    unmeasured = f" ({len(verdicts) - len(measured)} not measured)" if len(measured) < len(verdicts) else ""
    ok = gate if gate is not None else all(measured)
    return [line.done(f"{beating} of {len(measured)} beat length{unmeasured}", ok)]


def policy_line(r: Any, anchor: str) -> SummaryLine:
    from reappreg.report.facts import policy_health

    line = _Line("Policy training", anchor)
    path = r.path("policy_metrics") / "train.json"
    train, src = read_if_present(path), r.display(path)
    if not isinstance(train, dict):
        return _missing(line.title, anchor, "no readable train.json")
    try:
        monitor, health = policy_health(r.path("policy_metrics"), r.health, r.max_completion_length)
    except InputError as exc:
        return _missing(line.title, anchor, f"unreadable policy metrics ({exc})")
    word = {True: "healthy", False: "UNHEALTHY"}.get(monitor, "not recorded")
    line.sentences.append(f"{line.f(src, train, 'steps_run')} step(s); training monitor (reward spread, KL): {word}"
                          + (f" ({train['unhealthy_reason']})" if train.get("unhealthy_reason") else "") + "; final KL "
                          f"{line.f(src, train, 'final', 'health/kl')}, mean reward {line.f(src, train, 'final', 'health/reward_mean')}.")
    if isinstance(train.get("reward"), Mapping):
        # What the policy was paid for (policy.reward; the RM's residual part unless the prior was added).
        line.sentences.append(f"Reward: {line.f(src, train, 'reward', 'reads')} (length prior weight "
                              f"{line.f(src, train, 'reward', 'length_prior_weight')}).")
    if health is None:
        # Without the card.health params no verdict can be stated: only the monitor's flag, named as such.
        return line.done(f"monitor: {word}", monitor)
    cuts = []
    for gate in health.gates:
        if gate.passed is None:
            cuts.append(f"{gate.name} not recorded")
            continue
        key = gate.source.split(" ", 1)[0].removeprefix("train.")
        shown = line.f(src, train, *key.split(".", 1)) if gate.source.startswith("train.") and "=" not in gate.source \
            else fmt(gate.value)
        setting = "max_format_gate_hit_rate" if gate.name.startswith("format") else "max_truncation_rate"
        bar = line.f(PARAMS, r.settings_dump, "card", "health", setting)
        cuts.append(f"{gate.name} {shown} ({'≤' if gate.passed else '>'} {bar})"
                    + ("" if "=" not in gate.source else " (every completion reached the token limit)"))
    line.sentences.append("Cards' gates: " + "; ".join(cuts) + ".")
    return line.done(health.verdict, health.verdict == "healthy")


def judge_line(r: Any, anchor: str) -> SummaryLine:
    from reappreg.report.facts import judge_criteria, judge_trust

    line = _Line("Judge", anchor)
    calib, src = read_if_present(r.path("calibration")), r.shown("calibration")
    if not isinstance(calib, dict):
        return _missing(line.title, anchor, "no readable judge calibration")
    trusted, how = judge_trust(calib, r.trust_policy)
    line.sentences.append(f"`{calib.get('judge_model')}` agrees with people on {line.f(src, calib, 'agreement')} "
                          f"[{line.f(src, calib, 'agreement_low')}, {line.f(src, calib, 'agreement_high')}] of "
                          f"{line.f(src, calib, 'n_pairs')} preference pairs ({how}).")
    failed = []
    for name, value, op, bar, met, path in judge_criteria(calib, r.trust_policy) if r.trust_policy is not None else []:
        if met:
            continue
        shown = line.f(src, calib, *path)
        bar_src, bar_path = _bar_source(calib, r, path[0], bar)
        bar_shown = line.f(bar_src, calib if bar_src == src else r.settings_dump, *bar_path) if bar_path else fmt(bar)
        failed.append(f"{name} {shown}, needs {op} {bar_shown}" if met is False else f"{name} not measured")
    if failed:
        line.sentences.append("Fails: " + "; ".join(failed) + ".")
    return line.done({True: "trusted", False: "NOT trusted", None: "not recorded"}[trusted], trusted)


def _bar_source(calib: Mapping[str, Any], r: Any, key: str, bar: Any) -> tuple[str, tuple]:
    """Where a trust threshold came from: the calibration file or params.yaml (the stricter wins)."""
    own = {"agreement_low": "min_agreement", "n_pairs": "min_pairs"}.get(key)
    if own and calib.get(own) == bar:
        return r.shown("calibration"), (own,)
    params = {"agreement_low": ("judge", "min_agreement"), "n_pairs": ("judge", "calibration_min_pairs"),
              "position_bias_A": ("stats", "max_position_bias"), "position_bias_B": ("stats", "max_position_bias"),
              "unparseable_rate": ("stats", "max_unparseable_rate")}[key]
    return (PARAMS, params) if walk(r.settings_dump, params) == bar else ("", ())


def claim_line(r: Any, anchor: str) -> SummaryLine:
    line = _Line("Bar claim", anchor)
    claims, src = read_if_present(r.path("claims")), r.shown("claims")
    if not isinstance(claims, list):
        return _missing(line.title, anchor, "no readable claims")
    bars = [(i, c) for i, c in enumerate(claims) if isinstance(c, Mapping) and c.get("kind") == "bar"]
    if not bars:
        line.sentences.append("No claim against the reference bar was made.")
        return line.done("no bar claim", None)
    for i, claim in bars:
        flags = ", ".join(claim.get("blocking_flags") or []) or "none"
        line.sentences.append(
            f"`{claim.get('claim_id')}`: **{claim.get('status')}**: win-rate {line.f(src, claims, i, 'evidence', 'win_rate')} "
            f"over {line.f(src, claims, i, 'evidence', 'n')} contests, binding interval "
            f"({claim.get('evidence', {}).get('binding_interval')}) [{line.f(src, claims, i, 'evidence', 'cluster_low')}, "
            f"{line.f(src, claims, i, 'evidence', 'cluster_high')}] against the bar {line.f(src, claims, i, 'threshold')}; "
            f"blocking flags: {flags}.")
    supported = all(c.get("supported") is True for _, c in bars)
    return line.done("supported" if supported else "NOT supported", supported)


def registry_line(r: Any, anchor: str) -> SummaryLine:
    line = _Line("Registry aliases", anchor)
    receipt, src = read_if_present(r.path("registration")), r.shown("registration")
    state = receipt.get("verify") if isinstance(receipt, dict) else None
    if not isinstance(state, Mapping):
        return _missing(line.title, anchor, "no registration receipt with a verify block")
    rows = [a for a in state.get("aliases") or [] if isinstance(a, Mapping)]
    by_alias: dict[str, list[str]] = {}
    for a in rows:
        by_alias.setdefault(str(a.get("alias")), []).append(
            f"{a.get('name')} v{a.get('version')}" + ("" if a.get("verified") else " (NOT verified)"))
    for alias in sorted(by_alias, key=lambda x: (x != "champion", x)):
        line.sentences.append(f"`{alias}` → " + ", ".join(by_alias[alias]) + ".")
    if "champion" not in by_alias:
        line.sentences.append("No `champion` alias: nothing is promoted.")
    passes = state.get("verify_passes")
    line.sentences.append(f"`registry verify` at registration: {'passes' if passes else 'FAILS'} "
                          f"({line.f(src, receipt, 'verify', 'verified')} verified, "
                          f"{line.f(src, receipt, 'verify', 'violations')} violation(s), "
                          f"{line.f(src, receipt, 'verify', 'pending')} pending request(s)).")
    return line.done("verify passes" if passes else "verify FAILS", bool(passes))


def leakscan_line(r: Any, anchor: str) -> SummaryLine:
    line = _Line("Leak scan", anchor)
    scan, src = read_if_present(r.path("leakscan")), r.shown("leakscan")
    if not isinstance(scan, dict):
        return _missing(line.title, anchor, "no readable leak scan")
    line.sentences.append(f"{line.f(src, scan, 'n_hits')} hit(s) in {line.f(src, scan, 'n_probes')} probes of MLflow records "
                          f"({line.f(src, scan, 'mlflow_runs_scanned')} runs), model folders, cards and the samples below.")
    return line.done("clean" if scan.get("passed") else "LEAK", scan.get("passed") is True)


def samples_line(r: Any, anchor: str) -> SummaryLine:
    line = _Line("The policy's own words", anchor)
    obj = read_if_present(r.sources.samples) if r.sources.samples is not None else None
    if not isinstance(obj, dict):
        return _missing(line.title, anchor, "no samples file")
    src = r.shown("samples")
    samples = [x for x in obj.get("samples") or [] if isinstance(x, Mapping)]
    names = list(obj.get("conditions") or {})
    line.sentences.append(f"{line.n(src, samples, 'samples')} answers of {', '.join(f'`{c}`' for c in names)} "
                          f"({line.f(src, obj, 'per_vignette')} per vignette), with RM reward, format gate and both verdicts.")
    return line.done("read them", None)
