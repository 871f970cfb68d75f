"""Forking paths: every evaluation of one policy against one bar is a look (reappreg.stats.looks).

The stats stage runs for real, tracked in a throwaway MLflow store, over upstream files that
differ the ways a search would: another vignette subset, fewer evals after the judgments were
seen, other samples and seeds. Each is a look at the same policy and bar; a different policy
starts its own count.
"""

from __future__ import annotations

import json

import pytest
import yaml
from stats_fixtures import POLICY_MD5, REFERENCE, TRUSTED, honest_upstream, write_upstream

from reappreg.errors import InputError
from reappreg.settings import Params
from reappreg.settings.generate import GenerateSettings

BAR = "bar/policy/gpt-4-0314"
RATES = [0.9, 0.85, 0.8, 0.9, 0.85, 0.8]


def _params(tracking_uri: str, tmp_path, generate: GenerateSettings) -> Params:
    return Params.model_validate({
        "tracking": {"uri": tracking_uri, "artifact_root": str(tmp_path / "mlartifacts"), "experiment": "looks"},
        "stats": {"bootstrap_iterations": 100, "lc_bootstrap_iterations": 50},
        "judge": {"opponents": ["gpt-4-0314"], "answers_per_generation": 2},
        "generate": generate.model_dump(),
    })


def _run(tmp_path, tracking_uri: str, name: str, generate: GenerateSettings, *, model_md5: str | None = POLICY_MD5,
         stats: dict | None = None) -> list[dict]:
    """One `stats` stage run over an honest upstream sampled under ``generate`` from the policy ``model_md5``."""
    from reappreg.stats.stage import StatsFiles, stats_stage

    folder = tmp_path / name
    upstream = honest_upstream(RATES, opponents=("gpt-4-0314",), answers_per_generation=2, generate=generate,
                               model_md5=model_md5)
    paths = write_upstream(upstream, folder)
    (folder / "calib.json").write_text(json.dumps(TRUSTED))
    (folder / "models.yaml").write_text(yaml.safe_dump({"reference_bar": REFERENCE.model_dump()}))
    params = _params(tracking_uri, tmp_path, generate)
    if stats:
        params = params.model_copy(update={"stats": params.stats.model_copy(update=stats)})
    files = StatsFiles(judgments=paths["judgments"], generations=paths["generations"], answers=paths["answers"],
                       vignettes=paths["vignettes"], calibration=folder / "calib.json", models=folder / "models.yaml",
                       metrics=folder / "out/eval.json", plot=folder / "out/forest.png",
                       plot_data=folder / "out/forest.csv", claims=folder / "out/claims.json")
    stats_stage(params, files)
    return json.loads(files.claims.read_text())


def _claim(claims: list[dict], claim_id: str = BAR) -> dict:
    return next(c for c in claims if c["claim_id"] == claim_id)


def test_every_evaluation_of_one_policy_against_one_bar_is_a_look(tmp_path, tracking_uri):
    """All six vignettes and 3 evals, then 4 of the vignettes, then evals cut 3 -> 2 after those judgments
    were seen, then 2 samples per vignette with another seed: four looks at one policy against one bar,
    whatever each used, each counted and said. Another policy against the same bar is its own first look;
    the first policy's count goes on."""
    first = GenerateSettings(evals=3, samples_per_vignette=1, seed=0)
    subsets = [first, first.model_copy(update={"vignettes": ["v0", "v1", "v2", "v3"]}),
               first.model_copy(update={"evals": 2}),
               first.model_copy(update={"evals": 2, "samples_per_vignette": 2, "seed": 7})]
    runs = [_run(tmp_path, tracking_uri, f"look{i}", generate) for i, generate in enumerate(subsets)]
    bars = [_claim(claims) for claims in runs]
    assert [b["looks"]["earlier"] for b in bars] == [0, 1, 2, 3]
    assert [b["looks"]["look_number"] for b in bars] == [1, 2, 3, 4]
    assert len({b["inputs"]["generations"] for b in bars}) == 4   # four different generations files
    assert all(b["looks"]["keyed_by"] == {"policy_model_md5": POLICY_MD5, "opponent": "gpt-4-0314",
                                          "threshold": REFERENCE.bar} for b in bars)
    assert "repeated_looks" not in bars[0]["flags"] and all("repeated_looks" in b["flags"] for b in bars[1:])
    # what each look evaluated is recorded, and the cut to 2 evals is named in the next claims' reason
    third, fourth = bars[2], bars[3]
    assert third["looks"]["this_look"]["evals"] == 2 and third["looks"]["this_look"]["n_vignettes"] == 6
    assert [e["design"]["n_vignettes"] for e in fourth["looks"]["earlier_looks"]] == [6, 4, 6]
    assert [e["design"]["evals"] for e in fourth["looks"]["earlier_looks"]] == [3, 3, 2]
    assert ("drawn after 3 earlier evaluation(s) of this policy (model " + POLICY_MD5 + ") against gpt-4-0314 at "
            "0.608 (3 eval(s) x 1 sample(s), seed 0, 6 vignette(s), 36 contests; 3 eval(s) x 1 sample(s), seed 0, "
            "4 vignette(s), 24 contests; 2 eval(s) x 1 sample(s), seed 0, 6 vignette(s), 24 contests; this one: "
            "2 eval(s) x 2 sample(s), seed 7, 6 vignette(s), 48 contests)") in fourth["reason"]
    # every claim of a run is keyed by its own bar: the parity claim counts its own looks the same way
    assert _claim(runs[3], "beats_opponent/policy/gpt-4-0314")["looks"]["earlier"] == 3

    other = _claim(_run(tmp_path, tracking_uri, "other-policy", first, model_md5="md5:" + "b" * 32 + ".dir"))
    assert other["looks"]["earlier"] == 0 and "repeated_looks" not in other["flags"]
    again = _claim(_run(tmp_path, tracking_uri, "look4", first))
    assert again["looks"]["earlier"] == 4


def test_fifteen_vignette_subsets_and_four_seeds_are_nineteen_looks(tmp_path, tracking_uri):
    """The issue's store: 15 `generate.vignettes` subsets and 4 seeds, each with generations of its own
    (another md5 each, which the old key counted as 0 earlier looks every time), then `generate.evals` cut
    3 -> 2. Each is recorded the way the stats stage records it (its MLflow run tagged with the question and
    its design, found by later runs among the FINISHED stats runs): looks 1 to 19, then 20. A run that
    fails leaves no look behind."""
    import itertools

    import mlflow

    from reappreg.settings.tracking import TrackingSettings
    from reappreg.stats.looks import earlier_looks, keys_of, look_tags, stamp_claims
    from reappreg.tracking import stage_run

    tracking = TrackingSettings(uri=tracking_uri, artifact_root=str(tmp_path / "mlartifacts"), experiment="looks")
    vignettes = [f"v{i}" for i in range(6)]
    designs = ([{"evals": 3, "samples_per_vignette": 1, "best_of_n": 1, "seed": 1234, "n_vignettes": 4,
                 "vignettes": list(subset)} for subset in itertools.combinations(vignettes, 4)]     # 15 subsets
               + [{"evals": 3, "samples_per_vignette": 1, "best_of_n": 1, "seed": seed, "n_vignettes": 6,
                   "vignettes": vignettes} for seed in (1, 2, 3, 4)]                                 # 4 seeds
               + [{"evals": 2, "samples_per_vignette": 1, "best_of_n": 1, "seed": 4, "n_vignettes": 6,
                   "vignettes": vignettes}])                                                         # 3 -> 2
    assert len(designs) == 20

    def look(design: dict, i: int, *, fail: bool = False) -> dict:
        claim = {"claim_id": BAR, "opponent": "gpt-4-0314", "threshold": REFERENCE.bar, "flags": [], "reason": "r"}
        keys = keys_of([claim], POLICY_MD5)
        generations = tmp_path / f"generations{i}.jsonl"
        generations.write_text(json.dumps({"look": i, **design}) + "\n")   # every look its own generations md5
        with stage_run("stats", tracking=tracking, inputs={"generations": generations}) as run:
            client = mlflow.MlflowClient()
            key = keys[BAR]
            earlier = {key.digest: earlier_looks(client, run.info.experiment_id, key, run.info.run_id)}
            stamp_claims([claim], inputs={}, keys=keys, earlier=earlier, design=design, decision_settings={})
            mlflow.set_tags(look_tags(keys, POLICY_MD5, design))
            if fail:
                raise RuntimeError("the stage failed before writing its claims")
        return claim

    claims = [look(design, i) for i, design in enumerate(designs)]
    assert [c["looks"]["look_number"] for c in claims] == list(range(1, 21))
    last = claims[-1]
    assert last["looks"]["earlier"] == 19 and "repeated_looks" in last["flags"]
    assert [e["design"]["seed"] for e in last["looks"]["earlier_looks"]] == [1234] * 15 + [1, 2, 3, 4]
    assert last["looks"]["this_look"]["evals"] == 2 and last["looks"]["earlier_looks"][-1]["design"]["evals"] == 3
    assert "drawn after 19 earlier evaluation(s) of this policy" in last["reason"]
    assert last["looks"]["summary"].startswith("look 20 at this policy against this bar")

    with pytest.raises(RuntimeError):
        look(designs[0], 20, fail=True)
    assert look(designs[0], 21)["looks"]["earlier"] == 20        # the failed run is not counted


def _signed_link(tmp_path, generate: GenerateSettings) -> dict:
    """The link payload custody.step signs for a stats step whose notes are open (as under `dvc repro`):
    a throwaway clone key, the step reading the ``generate`` params section."""
    import base64
    import types

    from reappreg.custody.links import Signing
    from reappreg.custody.plan import StepPlan
    from reappreg.custody.step import StepRun
    from reappreg.trust.keys import signing_keys

    root = tmp_path / "clone"
    root.mkdir()
    (root / "params.yaml").write_text(yaml.safe_dump({"generate": generate.model_dump(mode="json")}))
    keys = signing_keys(root / "keys", create=True)
    version = types.SimpleNamespace(as_dict=lambda: {"origin": "local", "root": 1, "targets": 1})
    step = StepPlan("stats", ["reappreg", "stats", "run"], [], [], ["generate"], [], [])
    path = StepRun(root, step, Signing(None, keys, version), {}, ["stats", "run"]).finish()
    return json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))


def test_a_custom_bar_is_another_question_and_generations_without_a_policy_are_refused(tmp_path, tracking_uri,
                                                                                       monkeypatch):
    """A custom bar is its own question (its own count), the reference bar asked again is the next look;
    the step's signed custody link records both counts beside the generate params it ran with."""
    from reappreg.custody import notes

    monkeypatch.delenv("REAPPREG_SIGNING_KEY", raising=False)
    generate = GenerateSettings(evals=3, samples_per_vignette=1, seed=0)
    _run(tmp_path, tracking_uri, "plain", generate)
    cut = generate.model_copy(update={"evals": 2})                      # generate.evals 3 -> 2
    notes.begin()                                                         # as begin_step does under dvc repro
    claims = _run(tmp_path, tracking_uri, "custom", cut, stats={"bar": 0.55})
    assert _claim(claims)["looks"]["earlier"] == 1                        # the reference bar, asked again
    custom = _claim(claims, "custom_bar/policy/gpt-4-0314")
    assert custom["looks"]["earlier"] == 0 and custom["looks"]["keyed_by"]["threshold"] == 0.55

    link = _signed_link(tmp_path, cut)
    assert link["environment"]["params"]["generate"]["evals"] == 2
    looks = link["byproducts"]["looks"]
    assert looks["this_look"]["evals"] == 2 and looks["this_look"]["n_vignettes"] == len(RATES)
    # canonical JSON has no floats: the link holds each threshold as its decimal string
    by_bar = {float(q["threshold"]): q for q in looks["questions"] if q["opponent"] == "gpt-4-0314"}
    assert by_bar[REFERENCE.bar]["look_number"] == 2 and by_bar[REFERENCE.bar]["policy_model_md5"] == POLICY_MD5
    assert BAR in by_bar[REFERENCE.bar]["claims"] and len(by_bar[REFERENCE.bar]["earlier_run_ids"]) == 1
    assert by_bar[0.55]["look_number"] == 1 and by_bar[0.55]["claims"] == ["custom_bar/policy/gpt-4-0314"]
    # parity (0.5) asked in both runs, the custom bar only in this one
    assert {q["threshold"]: q["look_number"] for q in looks["questions"]} == {"0.5": 2, "0.55": 1,
                                                                                repr(REFERENCE.bar): 2}
    assert float(link["byproducts"]["custody_seconds"]) >= 0
    assert link["environment"]["params"]["generate"]["temperature"] == repr(cut.temperature)
    assert notes.take() == {}                                             # the step's notes went into its link

    with pytest.raises(InputError, match="name no policy model"):
        _run(tmp_path, tracking_uri, "anonymous", generate, model_md5=None)
