"""Custody by signed links, tried by an attacker with write access to the repository files and the
tracking store but no key: every rewrite that kept the files and dvc.lock consistent is refused at
`register` by in-toto's verification of the signed links, naming the step and the file; the honest
re-run (the pipeline signs new links) registers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from reappreg.custody.links import CustodyError
from reappreg.errors import GateFailed
from stage_commands import stage_argv
from registry_fixtures import (  # noqa: F401 (fixtures)
    POLICY,
    client_for,
    plant_stage_runs,
    register_after_pipeline,
    register_ok,
    repo,
    run_cli,
    templates,
)


def rewrite_lock_only(root: Path) -> None:
    """What the attacker can do without a key: make dvc.lock agree with the edited files (not the links)."""
    import registry_fixtures

    lock = yaml.safe_load((root / "dvc.lock").read_text())
    from reappreg.hashing import dvc_md5

    for stage in lock["stages"].values():
        for out in stage.get("outs") or []:
            if (root / out["path"]).exists():
                out["md5"] = dvc_md5(root / out["path"])
        for dep in stage.get("deps") or []:
            if (root / dep["path"]).exists():
                dep["md5"] = dvc_md5(root / dep["path"])
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    claims = json.loads((root / "reports/claims.json").read_text())
    for claim in claims:
        claim["inputs"] = {role: dvc_md5(root / rel) for role, rel in registry_fixtures.stats_paths().items()}
    (root / "reports/claims.json").write_text(json.dumps(claims))
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    for out in lock["stages"]["stats"]["outs"]:
        out["md5"] = dvc_md5(root / out["path"])
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


def refused(root: Path) -> str:
    code, out, exc = run_cli(*stage_argv("register"))
    assert code != 0 and isinstance(exc, (CustodyError, GateFailed)), (out, exc)
    return " ".join(str(exc).split())


def test_the_control_registers_with_its_chain_verified(repo):
    out = register_ok()
    receipt = json.loads((repo / "reports/registry/registration.json").read_text())
    assert receipt["custody"].startswith("in-toto verified"), receipt["custody"]
    assert "every link signed by a 'pipeline' key" in receipt["custody"]


@pytest.mark.parametrize("attack", ["judgments_and_claims", "verdicts_flipped", "eval_metrics", "results_table",
                                    "calibration_counts"])
def test_consistent_rewrites_of_upstream_files_are_refused_at_register(repo, attack):
    register_ok()
    import registry_fixtures

    paths = registry_fixtures.stats_paths()
    if attack in ("judgments_and_claims", "verdicts_flipped"):
        path = repo / paths["judgments"]
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows.append({"planted": "a rewritten judgment", "verdict": "A", "probability": 0.99})
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        target = paths["judgments"]
    elif attack == "eval_metrics":
        data = json.loads((repo / "metrics/eval.json").read_text())
        data["policy/gpt-4-0314/cluster_low"] = 0.99
        (repo / "metrics/eval.json").write_text(json.dumps(data))
        target = "metrics/eval.json"
    elif attack == "results_table":
        data = json.loads((repo / "metrics/results.json").read_text())
        data["selection"]["reason"] = "rewritten"
        (repo / "metrics/results.json").write_text(json.dumps(data))
        target = "metrics/results.json"
    else:
        data = json.loads((repo / "metrics/judge_calibration.json").read_text())
        data["n_pairs"], data["agreement"] = 240, 1.0
        (repo / "metrics/judge_calibration.json").write_text(json.dumps(data))
        target = "metrics/judge_calibration.json"
    rewrite_lock_only(repo)
    plant_stage_runs(repo)  # and forged finished tracked runs that "wrote" them: a view, not evidence
    message = refused(repo)
    assert f"{target}" in message and "is not what step 'upstream' produced" in message, message


def test_a_lowered_bar_in_registry_models_yaml_is_refused_without_a_key(repo):
    register_ok()
    decl = yaml.safe_load((repo / "registry/models.yaml").read_text())
    decl["reference_bar"]["bar"] = 0.5
    (repo / "registry/models.yaml").write_text(yaml.safe_dump(decl, sort_keys=False))
    message = refused(repo)
    assert "registry/models.yaml is not what step 'declarations' produced" in message, message


def test_a_link_signed_by_a_key_the_layout_does_not_name_is_refused(repo, tmp_path):
    register_ok()
    from reappreg.custody.links import Signing, sign_link
    from reappreg.custody.plan import link_path
    from reappreg.trust.keys import generate_key, _load_private

    generate_key(tmp_path / "mallory.pem")
    mallory = _load_private(tmp_path / "mallory.pem", named=True, create=False)
    envelope = json.loads((repo / link_path("upstream")).read_text())
    payload = json.loads(__import__("base64").b64decode(envelope["payload"]))
    data = sign_link(Signing(None, [mallory], None), "upstream", materials={}, products=payload["products"],
                     command=["planted"], environment=payload["environment"])
    (repo / link_path("upstream")).write_bytes(data)
    message = refused(repo)
    assert "the link of step 'upstream' (custody/links/upstream.link) is signed by" in message, message
    assert "a key the layout does not name for that step" in message, message


def test_a_step_without_its_link_is_refused(repo):
    register_ok()
    from reappreg.custody.plan import link_path

    (repo / link_path("card")).unlink()
    message = refused(repo)
    assert "Step 'card' requires '1' link metadata file(s), found '0'" in message, message


def test_verify_re_checks_the_links_a_registration_named(repo):
    register_ok()
    client = client_for(repo)
    mv = client.get_model_version(POLICY, "1")
    import mlflow

    stored = Path(mlflow.artifacts.download_artifacts(run_id=mv.run_id, artifact_path="custody/upstream.link",
                                                      tracking_uri=str(__import__("os").environ["MLFLOW_TRACKING_URI"])))
    # The local store's own copy (the run's artifact folder) rewritten after registration.
    run_dir = Path(client.get_run(mv.run_id).info.artifact_uri.removeprefix("file://"))
    (run_dir / "custody" / "upstream.link").write_text(stored.read_text().replace('"sig"', '"sig" ', 1))
    code, out, _ = run_cli("registry", "verify")
    assert code == 1 and "custody link custody/links/upstream.link in the store is not the one the statement names" in \
        " ".join(out.split()), out


def test_a_link_with_floats_in_its_params_and_byproducts_is_signed(tmp_path, monkeypatch):
    """in-toto signs a link as canonical JSON, which has no floats: a stage whose params hold 0.95, or
    whose byproducts hold custody_seconds, could not sign its link. Each float is its decimal string."""
    import base64

    from reappreg.custody.links import Signing, sign_link
    from reappreg.trust.keys import signing_keys

    monkeypatch.delenv("REAPPREG_SIGNING_KEY", raising=False)
    keys = signing_keys(tmp_path / "keys", create=True)
    data = sign_link(Signing(None, keys, None), "stats", materials={}, products={}, command=["reappreg"],
                     environment={"params": {"stats": {"confidence": 0.95, "min_n_confirm": 240, "bar": None}}},
                     byproducts={"custody_seconds": 0.392, "looks": {"questions": [{"threshold": 0.608}]}})
    payload = json.loads(base64.b64decode(json.loads(data)["payload"]))
    assert payload["environment"]["params"]["stats"] == {"confidence": "0.95", "min_n_confirm": 240, "bar": None}
    assert payload["byproducts"] == {"custody_seconds": "0.392", "looks": {"questions": [{"threshold": "0.608"}]}}
    assert float(payload["byproducts"]["custody_seconds"]) == 0.392


def test_dvcs_gitignore_inside_a_consumed_folder_is_not_recorded(tmp_path, monkeypatch):
    """`dvc repro` writes .gitignore beside each out, e.g. in models/rm/multidim/ which a later step consumes
    whole: no step produced it, so recording it made register's layout check refuse a real pipeline run."""
    from reappreg.custody.links import record

    folder = tmp_path / "models/rm/multidim"
    (folder / "seed_0").mkdir(parents=True)
    (folder / "seed_0/head.safetensors").write_bytes(b"weights")
    (folder / ".gitignore").write_text("/seed_0\n")
    (folder / "seed_0/.gitignore").write_text("/x\n")
    monkeypatch.chdir(tmp_path)
    recorded = record(["models/rm/multidim"])
    assert sorted(recorded) == ["models/rm/multidim/seed_0/head.safetensors"]
    # every other file is still recorded: a planted file inside the folder is a material like any other
    (folder / "planted.txt").write_text("x")
    assert "models/rm/multidim/planted.txt" in record(["models/rm/multidim"])


# --------------------------------------------------------------------------- from the local root to a team root


def _team_root_naming(repo: Path, tmp_path: Path, monkeypatch, pipeline_keys: list[Path]) -> Path:
    """The team's first root, made after the pipeline ran under this clone's local root: alice holds root,
    the online roles and `layout`; ``pipeline_keys`` hold `pipeline`. Signs as alice from here on."""
    from reappreg.trust.admin import RoleSpec, init
    from reappreg.trust.keys import _load_private, generate_key

    keys = tmp_path / "team-keys"
    keys.mkdir(exist_ok=True)
    generate_key(keys / "alice.pem")
    alice = _load_private(keys / "alice.pem", named=True, create=False)
    init(repo / "registry/keys", root=RoleSpec([keys / "alice.pub.pem"]), online=RoleSpec([keys / "alice.pub.pem"]),
         roles={"pipeline": RoleSpec(pipeline_keys, 1)}, signers=[alice], expiry_days=30)
    monkeypatch.setenv("REAPPREG_SIGNING_KEY", str(keys / "alice.pem"))
    code, out, exc = run_cli("registry", "keys", "sign-layout", "--reason", "first team root")
    assert code == 0 and "under team root v1" in " ".join(out.split()), (out, exc)
    return keys


def _trust_team_only(repo: Path) -> None:
    """A teammate's clone: only the team root is trusted (this clone's local key counts for nothing)."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["registry"]["trust_local_key"] = False
    (repo / "params.yaml").write_text(yaml.safe_dump(params))


RUNNER = "work/registry/keys/local-signing-key.pub.pem"


def test_a_team_root_naming_the_runners_key_adopts_the_links_it_signed_before_the_root_existed(repo, tmp_path,
                                                                                              monkeypatch):
    """The user's path from local to team (docs/trust.md): no re-run; register under the team root verifies the
    links the runner's key signed under its local root, says so, and a clone trusting the team root only re-checks
    them in `verify`."""
    from registry_fixtures import record_outputs, run_verify

    record_outputs(repo)  # the pipeline ran: every link signed under this clone's local root
    _team_root_naming(repo, tmp_path, monkeypatch, [repo / RUNNER])
    code, out, exc = run_cli(*stage_argv("register"))
    assert code == 0, (out, exc)
    custody = json.loads((repo / "reports/registry/registration.json").read_text())["custody"]
    assert "against the layout signed by the team 'layout' role" in custody, custody
    assert "link(s) signed under another root by a key the team root names for 'pipeline' now" in custody, custody
    _trust_team_only(repo)
    code, out = run_verify()
    assert code == 0, out


def test_a_team_root_that_does_not_name_the_runners_key_refuses_its_links(repo, tmp_path, monkeypatch):
    """The attacker's version of the same path: links signed under some other root (here this clone's local one)
    by a key the team root does not name for `pipeline` do not count for the team chain."""
    from registry_fixtures import record_outputs
    from reappreg.trust.keys import generate_key

    record_outputs(repo)
    generate_key(tmp_path / "ci" / "ci.pem")
    _team_root_naming(repo, tmp_path, monkeypatch, [tmp_path / "ci" / "ci.pub.pem"])
    message = refused(repo)
    assert "a key the layout does not name for that step" in message, message


def test_a_layout_signed_before_the_pipeline_key_changed_is_refused_until_re_signed(repo, tmp_path, monkeypatch):
    """A key removed from `pipeline` must not keep signing through a layout signed while it held the role."""
    from registry_fixtures import record_outputs
    from reappreg.trust.admin import RoleSpec, set_role
    from reappreg.trust.keys import _load_private, generate_key

    record_outputs(repo)
    keys = _team_root_naming(repo, tmp_path, monkeypatch, [repo / RUNNER])
    generate_key(keys / "ci.pem")
    alice = _load_private(keys / "alice.pem", named=True, create=False)
    set_role(repo / "registry/keys", "pipeline", RoleSpec([keys / "ci.pub.pem"], 1), signers=[alice], expiry_days=30)
    message = refused(repo)
    assert "names other 'pipeline' keys or threshold than team root v1 / targets v2" in message, message
    assert "sign-layout" in message, message
    # Re-signed, the layout names the new key only: the retired runner's links no longer count (re-run the pipeline).
    assert run_cli("registry", "keys", "sign-layout", "--reason", "ci key replaces the runner")[0] == 0
    message = refused(repo)
    assert "a key the layout does not name for that step" in message, message
    # The user's path after the rotation: the pipeline re-runs under the new key, and register passes.
    from registry_fixtures import register_ok

    monkeypatch.setenv("REAPPREG_SIGNING_KEY", f"{keys / 'ci.pem'}:{keys / 'alice.pem'}")
    register_ok()
