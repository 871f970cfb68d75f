"""stats.design: judgments bound to the design re-derived from upstream outputs.

Each test starts from an honest upstream (vignettes, held-out answers, generations and the
judged orders of exactly the contests the judge's own ``build_contests`` plans), crafts one
edit of a class an adversary or a hurried researcher would make, and asserts refusal or a
claim that can only get harder. The clean control is supported.
"""

from __future__ import annotations

import copy

import pytest
from stats_fixtures import FAST, POLICY, REFERENCE, TRUSTED, claim, honest_upstream, write_upstream

from reappreg.errors import InputError
from reappreg.settings.judge import JudgeSettings
from reappreg.stats import analyze
from reappreg.stats.design import canonical_id, load_bound_judgments

BAR = "bar/policy/gpt-4-0314"
# Two vignettes went badly: honestly, the bar claim is not supported.
MIXED = [0.95, 0.95, 0.95, 0.95, 0.05, 0.05]


def _upstream(rates=MIXED, generations: int = 20):
    return honest_upstream(rates, generations=generations, answers_per_generation=2, opponents=("gpt-4-0314", "claude-3-opus"))


def _run(upstream: dict, tmp_path):
    paths = write_upstream(upstream, tmp_path / "in")
    judge = JudgeSettings(opponents=upstream["opponents"], answers_per_generation=upstream["answers_per_generation"])
    frame, design = load_bound_judgments(paths["judgments"], paths["generations"], paths["answers"], paths["vignettes"],
                                         judge, generate=upstream["generate"])
    return analyze(frame, TRUSTED, settings=FAST, reference=REFERENCE, trust_policy=POLICY, design=design), design


def _edit(upstream: dict, where, change) -> dict:
    edited = copy.deepcopy(upstream)
    edited["judgments"] = [change(dict(r)) if where(r) else r for r in edited["judgments"]]
    return edited


def _lost(row) -> bool:
    return row["policy_score"] == 0.0


def test_clean_control_is_supported_and_an_honest_mixed_run_is_not(tmp_path):
    report, design = _run(_upstream([0.95] * 6), tmp_path / "clean")
    assert claim(report, BAR)["supported"] is True
    assert design["missing_orders"] == 0 and design["planned_contests"] == 480 and design["vignettes"] == [
        f"v{i}" for i in range(6)]
    report, _ = _run(_upstream(), tmp_path / "mixed")
    assert claim(report, BAR)["supported"] is False


@pytest.mark.parametrize("relabel", [str.upper, lambda v: f" {v}", lambda v: f"{v}\u200b", lambda v: f"{v}\u00a0",
                                     lambda v: v.replace("v", "\uff56")])  # fullwidth v
def test_vignette_ids_a_reader_cannot_tell_apart_are_one_id(relabel, tmp_path):
    assert canonical_id(relabel("v3")) == "v3"
    edited = _edit(_upstream(), lambda r: r["generation_id"].endswith(("0-s0", "2-s0")),
                   lambda r: {**r, "vignette_id": relabel(r["vignette_id"])})
    with pytest.raises(InputError, match="differ only by case, width, whitespace or invisible"):
        _run(edited, tmp_path)


def test_opaque_vignette_relabels_are_not_planned(tmp_path):
    edited = _edit(_upstream(), lambda r: True, lambda r: {**r, "vignette_id": f"{r['vignette_id']}/{r['eval_k'] % 3}"})
    with pytest.raises(InputError, match="vignette_id: 'v0/0' \\(planned 'v0'\\)"):
        _run(edited, tmp_path)


def test_vignettes_left_out_come_back_as_worst_case(tmp_path):
    upstream = _upstream(generations=30)
    edited = copy.deepcopy(upstream)
    edited["judgments"] = [r for r in upstream["judgments"] if r["vignette_id"] not in ("v4", "v5")]
    report, design = _run(edited, tmp_path)
    assert design["missing_orders"] == 2 * 30 * 2 * 2 * 2 and design["vignettes"] == [f"v{i}" for i in range(6)]
    bar = claim(report, BAR)
    assert bar["supported"] is False
    # ... while the same rows taken as given (no binding) carry the claim.
    from reappreg.stats.inputs import validate_judgments

    unbound = analyze(validate_judgments(edited["judgments"]), TRUSTED, settings=FAST, reference=REFERENCE,
                      trust_policy=POLICY)
    assert claim(unbound, BAR)["supported"] is True


def test_a_generations_file_without_some_vignettes_is_refused(tmp_path):
    edited = copy.deepcopy(_upstream())
    edited["generations"] = [g for g in edited["generations"] if g["vignette_id"] != "v5"]
    with pytest.raises(InputError, match=r"20 planned generation\(s\) are absent \(none-e0-v5-s0"):
        _run(edited, tmp_path)


def test_deleting_whole_lost_generations_only_makes_the_claim_harder(tmp_path):
    upstream = _upstream([0.7] * 6)
    lost = {r["generation_id"] for r in upstream["judgments"] if _lost(r)}
    edited = copy.deepcopy(upstream)
    edited["judgments"] = [r for r in upstream["judgments"] if r["generation_id"] not in lost]
    honest, _ = _run(upstream, tmp_path / "honest")
    report, design = _run(edited, tmp_path / "edited")
    assert design["missing_orders"] > 0
    win = f"{claim(report, BAR)['metric_refs'][0]}" if claim(report, BAR).get("metric_refs") else None
    assert claim(report, BAR)["supported"] is False
    assert report["metrics"]["policy/gpt-4-0314/cluster_low"] <= honest["metrics"]["policy/gpt-4-0314/cluster_low"], win


def _edit_generations(upstream: dict, change) -> dict:
    """Edit every row of each generation that lost a contest, consistently across its rows (so
    the row-level consistency checks pass and only the design can tell)."""
    losers = {r["generation_id"] for r in upstream["judgments"] if _lost(r)}
    return _edit(upstream, lambda r: r["generation_id"] in losers, change)


@pytest.mark.parametrize("field, value", [
    ("generation_id", lambda r: f"{r['generation_id']}-b"),          # a generation under a new id
    ("opponent_answer_id", lambda r: f"{r['opponent_answer_id']}-{r['contest_id'][:4]}"),  # its own answer id
    ("policy_chars", lambda r: r["policy_chars"] + 1),               # a copy with a new length
    ("eval_k", lambda r: r["eval_k"] + 100),
    ("sampling_seed", lambda r: r["sampling_seed"] + 500_000),
    ("opponent_chars", lambda r: r["opponent_chars"] - 1),
])
def test_answer_and_generation_labels_are_the_plans(field, value, tmp_path):
    edited = _edit_generations(_upstream(), lambda r: {**r, field: value(r)})
    with pytest.raises(InputError, match=f"not contests the design planned|{field}: .* \\(planned "):
        _run(edited, tmp_path)


def test_one_answer_id_everywhere_is_refused(tmp_path):
    edited = _edit(_upstream(), lambda r: r["vignette_id"] == "v4", lambda r: {**r, "opponent_answer_id": "gpt-4-0314-v4-00"})
    with pytest.raises(InputError):  # the row checks already see repeats; the design names the answer too
        _run(edited, tmp_path)


def test_copies_of_won_contests_under_new_ids_are_not_planned(tmp_path):
    upstream = _upstream()
    won = [r for r in upstream["judgments"] if not _lost(r)][:40]
    copies = [{**r, "generation_id": r["generation_id"] + "-copy", "contest_id": r["contest_id"][::-1],
               "sampling_seed": r["sampling_seed"] + 99_000, "p_a": None, "p_b": None, "p_tie": None,
               "verdict_method": "guided", "raw_output": r["verdict"]} for r in won]
    edited = copy.deepcopy(upstream)
    edited["judgments"] += copies
    with pytest.raises(InputError, match="not contests the design planned"):
        _run(edited, tmp_path)


@pytest.mark.parametrize("change", [
    lambda r: {**r, "opponent_source": "GPT-4-0314"} if r["opponent_source"] == "gpt-4-0314" else r,  # look-alike
    lambda r: {**r, "opponent_source": "gpt-4-0314"},                 # a weaker opponent passed off as the bar
    lambda r: {**r, "selection": "best_of_n_selection_pool"},         # losses moved into the selection pool
])
def test_opponent_and_pool_labels_are_the_plans(change, tmp_path):
    edited = _edit_generations(_upstream(), change)
    with pytest.raises(InputError, match="differ only by case|opponent_source: .* \\(planned|selection: .* \\(planned"):
        _run(edited, tmp_path)


def test_a_verdict_against_its_own_probabilities_is_refused(tmp_path):
    def flip(r):
        mine = "A" if r["order"] == "policy_first" else "B"
        return {**r, "verdict": mine, "policy_score": 1.0}

    edited = _edit(_upstream(), _lost, flip)
    with pytest.raises(InputError, match="not the argmax of its label probabilities"):
        _run(edited, tmp_path)


def test_a_fallback_verdict_never_replaces_what_the_probabilities_say(tmp_path):
    def rejudge(r):
        mine = "A" if r["order"] == "policy_first" else "B"
        return {**r, "verdict": mine, "policy_score": 1.0, "verdict_method": "free_text", "raw_output": f"[[{mine}]]"}

    edited = _edit(_upstream(), _lost, rejudge)
    with pytest.raises(InputError, match="not the argmax of its label probabilities .*method free_text"):
        _run(edited, tmp_path)


def test_a_label_only_verdict_is_read_from_its_raw_reply(tmp_path):
    def relabel(r):
        mine = "A" if r["order"] == "policy_first" else "B"
        theirs = "B" if mine == "A" else "A"
        return {**r, "p_a": None, "p_b": None, "p_tie": None, "verdict_method": "free_text",
                "raw_output": f"Assistant {theirs} is better. [[{theirs}]]", "verdict": mine, "policy_score": 1.0}

    edited = _edit(_upstream(), _lost, relabel)
    with pytest.raises(InputError, match="its raw reply .* reads 'B'|its raw reply .* reads 'A'"):
        _run(edited, tmp_path)


def test_logprob_rows_without_probabilities_are_refused(tmp_path):
    edited = _edit(_upstream(), _lost, lambda r: {**r, "p_a": None, "p_b": None, "p_tie": None})
    with pytest.raises(InputError, match="method logprob with verdict .* but no probabilities"):
        _run(edited, tmp_path)


# ----------------------------------------------------------------------------- the sampling plan

def _sampled(tmp_path, rates=None, **generate):
    import json

    from reappreg.settings.generate import GenerateSettings
    from stats_fixtures import sampled_upstream

    g = GenerateSettings(**{"evals": 3, "samples_per_vignette": 2, "seed": 7, **generate})
    judge = JudgeSettings(opponents=["gpt-4-0314"], answers_per_generation=1)
    paths = sampled_upstream(tmp_path, g, judge, rates or {"policy": 0.6})
    read = {k: [json.loads(x) for x in open(v, encoding="utf-8")] for k, v in paths.items()}
    return g, judge, paths, read


def _bind_sampled(g, judge, paths):
    return load_bound_judgments(paths["policy/judgments"], paths["policy/generations"], paths["answers"],
                                paths["vignettes"], judge, generate=g)


def _rewrite(path, records):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_the_sampling_plan_binds_the_generations_clean_control(tmp_path):
    g, judge, paths, _ = _sampled(tmp_path)
    _, design = _bind_sampled(g, judge, paths)
    assert design["generations"] == 36 and design["missing_orders"] == 0
    assert design["sampling_plan"] == {"evals": 3, "samples_per_vignette": 2, "best_of_n": 1, "seed": 7}
    # generate.vignettes selects some vignettes: the plan covers exactly those
    g2, judge2, paths2, read2 = _sampled(tmp_path / "some", vignettes=["v1", "v4"])
    _, design = _bind_sampled(g2, judge2, paths2)
    assert design["vignettes"] == ["v1", "v4"] and design["generations"] == 12


@pytest.mark.parametrize("attack, message", [
    # lost generations deleted from the generations file and the judgments alike
    ("drop_lost", "planned generation\\(s\\) are absent"),
    # a won generation copied under a new id, with its contests
    ("copy_won", "generation\\(s\\) the plan does not have"),
    # every seed moved (another pool's seeds, or seeds chosen after the fact)
    ("reseed", "sampling_seed"),
    # a generation moved to another vignette
    ("move", "vignette_id"),
])
def test_generations_that_are_not_the_sampling_plan_are_refused(attack, message, tmp_path):
    import hashlib

    g, judge, paths, read = _sampled(tmp_path)
    gens, rows = read["policy/generations"], read["policy/judgments"]
    lost = {r["generation_id"] for r in rows if r["policy_score"] == 0.0}
    won = sorted({r["generation_id"] for r in rows} - lost)
    if attack == "drop_lost":
        gens = [x for x in gens if x["generation_id"] not in lost]
        rows = [r for r in rows if r["generation_id"] not in lost]
    elif attack == "copy_won":
        source = won[0]
        original = next(x for x in gens if x["generation_id"] == source)
        seed = original["sampling_seed"] + 12345   # a seed of its own, so no row-level check can tell
        gens.append({**original, "generation_id": f"{source}-b", "pool_id": f"{source}-b", "sampling_seed": seed,
                     "seed": seed})
        for r in [r for r in rows if r["generation_id"] == source]:
            cid = hashlib.sha256(f"{source}-b|{r['opponent_answer_id']}".encode()).hexdigest()[:16]
            rows.append({**r, "generation_id": f"{source}-b", "contest_id": cid, "sampling_seed": seed})
    elif attack == "reseed":
        gens = [{**x, "sampling_seed": x["sampling_seed"] + 1, "seed": x["seed"] + 1} for x in gens]
        rows = [{**r, "sampling_seed": r["sampling_seed"] + 1} for r in rows]
    elif attack == "move":
        gens = [{**x, "vignette_id": "v0"} if x["generation_id"] == won[-1] else x for x in gens]
    _rewrite(paths["policy/generations"], gens)
    _rewrite(paths["policy/judgments"], rows)
    with pytest.raises(InputError, match=message) as refused:
        _bind_sampled(g, judge, paths)
    assert "not the sampling plan of the generate params" in str(refused.value)
