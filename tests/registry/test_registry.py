"""The MLflow registry: provenance-tagged versions, no duplicates, gated promotion, alias audit, verified pulls."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from reappreg.errors import GateFailed, InputError
from reappreg.evidence.declarations import load_declarations
from reappreg.hashing import dvc_md5
from reappreg.registry import (
    CONTENT_TAG,
    ENVELOPE_TAG,
    KEY_TAG,
    STATUS_TAG,
    IntegrityError,
    RegistrationHooks,
    RegistryUnavailable,
    VersionContent,
    WebhookListener,
    audit,
    connect,
    folder_md5,
    manifest_of,
    register_version,
    registration_key,
    signing_key,
    verify_signature,
    watch_poll,
    watch_webhook,
)
from reappreg.trust.keys import sign_statement
from reappreg.registry.registration import attestation_paths
from reappreg.settings.registry import RegistrySettings


from reappreg.commands.registry import PENDING_EXIT
from registry_fixtures import (  # noqa: F401 (fixtures: templates, repo, store, store_repo, postgres_registry)
    aliases,
    client_for,
    ids,
    trust_of,
    make_repo,
    on_store,
    postgres_registry,
    register_after_pipeline,
    register_ok,
    repo,
    run_verify,
    session_of,
    store,
    store_repo,
    templates,
    two_good_policy_versions,
    versions,
    CLEAN_REVISION,
    POLICY,
    RM,
    bind_claims_to_lock,
    plant_stage_runs,
    record_outputs,
    fail_guard,
    json_file,
    jsonl_file,
    make_unique_policy,
    registered_version,
    retrain_policy,
    run_cli,
    start_mlflow_server,
    stats_paths,
    stop_server,
    write_pipeline,
)
from stage_commands import stage_argv

REPO = Path(__file__).resolve().parents[2]
# --------------------------------------------------------------------------- registration


def test_register_records_provenance_card_and_candidate_alias(repo):
    register_ok()
    client = client_for(repo)
    (mv,) = versions(client, POLICY)
    tags = mv.tags
    assert tags[STATUS_TAG] == "complete"
    assert tags[CONTENT_TAG] == dvc_md5(repo / "models/policy/grpo")
    for path in ("data/guarded/prompts.jsonl", "models/rm/ensemble", "models/policy/base", "metrics/eval.json",
                 "reports/claims.json", "data/guard/certificate.json", "metrics/judge_calibration.json"):
        assert tags[f"md5.{path}"] == dvc_md5(repo / path), path
    assert tags["guard.result"] == "pass" and tags["guard.certificate_md5"] == dvc_md5(repo / "data/guard/certificate.json")
    metrics = json.loads((repo / "metrics/eval.json").read_text())
    assert float(tags["eval.n"]) == metrics["policy/gpt-4-0314/n"]
    assert float(tags["eval.cluster_ci_low"]) == metrics["policy/gpt-4-0314/cluster_low"]
    assert tags["judge.trusted"] == "true" and tags["training.healthy"] == "true"
    assert "git.commit" in tags
    manifest = dict(json.loads(tags["reappreg.manifest"]))
    assert set(manifest) == {"config.json", "model.safetensors", "tokenizer/tokenizer.json"}
    card = (repo / "reports/cards" / f"{POLICY}.md").read_text()
    # The description is the card's body: its front matter's facts are the tags already.
    assert mv.description.startswith("# reappraisal-policy-grpo") and "license:" not in mv.description
    import mlflow

    logged = mlflow.artifacts.load_text(f"runs:/{mv.run_id}/{POLICY}/README.md")
    assert logged == card
    assert aliases(client, POLICY) == {"candidate": str(mv.version)}
    receipt = json.loads((repo / "reports/registry/registration.json").read_text())
    assert {r["name"]: r["created"] for r in receipt["registered"]} == {RM: True, POLICY: True}
    # The receipt says where every alias points and whether `registry verify` passes, from the same audit.
    state = receipt["verify"]
    assert {(a["name"], a["alias"], a["version"]) for a in state["aliases"]} == {(RM, "candidate", "1"),
                                                                                (POLICY, "candidate", str(mv.version))}
    assert state["verify_passes"] is True and state["violations"] == 0 and all(a["verified"] for a in state["aliases"])


def test_the_receipt_says_verify_fails_when_the_alias_state_was_tampered_with(repo):
    register_ok()
    client = client_for(repo)
    client.delete_registered_model_alias(POLICY, "candidate")  # an MLflow writer, no signing key
    register_ok()                                              # unchanged artifacts: nothing new registered
    state = json.loads((repo / "reports/registry/registration.json").read_text())["verify"]
    assert state["verify_passes"] is False and state["pending"] == 1
    (missing,) = [a for a in state["aliases"] if not a["verified"]]
    assert (missing["name"], missing["alias"], missing["version"]) == (POLICY, "candidate", None)
    assert missing["pending"] and "PENDING request" in missing["detail"] and "will RESTORE v1" in missing["detail"]


def test_reregistering_unchanged_artifacts_creates_no_version(repo):
    register_ok()
    out = register_ok()
    client = client_for(repo)
    assert ids(client, POLICY) == ["1"]
    assert ids(client, RM) == ["1"]
    assert "unchanged" in out
    # A changed artifact is a new version, and `candidate` moves to it; the RM stays put.
    retrain_policy(repo, "retrained-weights")
    register_ok()
    assert ids(client, POLICY) == ["1", "2"]
    assert ids(client, RM) == ["1"]
    assert aliases(client, POLICY) == {"candidate": "2"}


def test_registration_refuses_training_inputs_that_do_not_match_the_certificate(repo):
    (repo / "data/guarded/prompts.jsonl").write_text('{"prompt": "edited after the guard ran"}\n')
    code, _, exc = register_after_pipeline()
    assert code == 1 and isinstance(exc, GateFailed)
    assert "data/guarded/prompts.jsonl has md5" in str(exc) and "refusing to register" in str(exc)
    assert client_for(repo).search_registered_models() == []


def test_registration_refuses_an_artifact_its_training_metrics_do_not_describe(repo):
    (repo / "models/policy/grpo/model.safetensors").write_text("weights copied in by hand")
    code, _, exc = register_after_pipeline()
    assert isinstance(exc, GateFailed) and "its training metrics describe" in str(exc)
    assert client_for(repo).search_registered_models() == []


def _edit_claims(root: Path, **fields) -> None:
    claims = json.loads((root / "reports/claims.json").read_text())
    claims[0].update(fields)
    json_file(root / "reports/claims.json", claims)


def _relock_claims(root: Path) -> None:
    """The attacker also edits dvc.lock so that it records the claims file as it is now."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["stats"]["outs"][0]["md5"] = dvc_md5(root / "reports/claims.json")
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


def _other_judgments(root: Path) -> None:
    """Judgments relabelled by hand, the claims re-stamped and dvc.lock's stats entry made to agree;
    only the judge stage's own record of what it wrote is left as it was."""
    rel = stats_paths()["judgments"]
    wrote = dvc_md5(root / rel)
    jsonl_file(root / rel, [{"planted": "judgments", "verdict": "policy wins, relabelled"}])
    bind_claims_to_lock(root, judge_wrote=wrote)


@pytest.mark.parametrize("attack, expect", [
    (lambda root: _edit_claims(root, supported=True, status="confirmed", flags=[]),
     "reports/claims.json has md5 {claims}, but the 'stats' stage wrote"),
    (lambda root: (_edit_claims(root, inputs={**json.loads((root / "reports/claims.json").read_text())[0]["inputs"],
                                             "judgments": "0" * 32}), _relock_claims(root)),
     "bar/policy/gpt-4-0314: judgments md5 00000000000000000000000000000000 but the 'stats' stage read"),
    (lambda root: (_edit_claims(root, inputs=None), _relock_claims(root)),
     "bar/policy/gpt-4-0314: records no inputs"),
    (_other_judgments, "the 'stats' stage read md5 {judgments}, the 'judge' stage wrote"),
    (lambda root: (root / "dvc.lock").unlink(), "dvc.lock: not found"),
    # judgments relabelled, claims re-stamped and the whole dvc.lock rewritten to agree: the signed
    # custody links (what each step signed it produced) tell, whatever the lock and the tracking store say
    (lambda root: (jsonl_file(root / stats_paths()["judgments"], [{"planted": "judgments", "verdict": "relabelled"}]),
                   bind_claims_to_lock(root, sign=False)),
     "reports/claims.json is not what step"),
    (lambda root: (_edit_claims(root, supported=True, status="confirmed", flags=[]), _relock_claims(root)),
     "reports/claims.json is not what step"),
], ids=["claims-edited", "claim-names-other-judgments", "claim-without-inputs", "judgments-swapped", "no-lock",
        "lock-rewritten-to-agree", "claims-edited-lock-rewritten"])
def test_registration_refuses_claims_the_pipeline_did_not_draw(repo, attack, expect):
    attack(repo)
    code, out, exc = run_cli(*stage_argv("register"))
    message = " ".join(str(exc).split())
    expect = expect.format(claims=dvc_md5(repo / "reports/claims.json"),
                           judgments=dvc_md5(repo / stats_paths()["judgments"]))
    assert code != 0 and expect in message, (out, message)
    assert client_for(repo).search_registered_models() == [], "something was registered"


def test_a_pipeline_tracked_locally_registers_on_another_store_and_its_runs_are_found(repo, monkeypatch):
    """The stages tracked to the clone's own store (params tracking.uri); the maintainer registers on
    another store: the runs that wrote the claims are looked up in both, and found in the first."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{repo / 'elsewhere.db'}")
    register_ok()
    receipt = json.loads((repo / "reports/registry/registration.json").read_text())
    assert "written by finished stats run" in receipt["claims_tracked"]
    assert receipt["claims_tracked"].endswith(f"(sqlite:///{repo / 'registry/mlflow.db'})")
    # With no stage runs in either store the tracked view finds nothing, and says so naming both stores;
    # it is a view, not evidence: the signed custody links are, so the registration still goes through.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["tracking"]["uri"] = "sqlite:///no-stage-runs.db"
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{repo / 'empty.db'}")
    code, out, exc = register_after_pipeline()
    assert code == 0, (out, exc)
    view = json.loads((repo / "reports/registry/registration.json").read_text())["claims_tracked"]
    assert view.startswith("not found (a view only, not evidence)") and "empty.db" in view, view
    assert f"{repo / 'no-stage-runs.db'}" in view and "no experiment 'reappraisal-registry'" in view, view


def test_the_receipt_says_how_the_claims_were_bound_to_the_lock(repo):
    register_ok()
    receipt = json.loads((repo / "reports/registry/registration.json").read_text())
    assert receipt["claims_lineage"].startswith("1 claims: reports/claims.json is the 'stats' stage's output and every "
                                                "claim read answers, calibration, generations, judgments, models, vignettes")


def test_registration_refuses_a_failed_certificate(repo):
    fail_guard(repo)  # the guard found a held-out answer in the training text
    assert json.loads((repo / "data/guard/certificate.json").read_text())["result"] == "fail"
    code, _, exc = register_after_pipeline()
    assert isinstance(exc, GateFailed) and "did not pass" in str(exc)
    assert client_for(repo).search_registered_models() == []


def test_registration_refuses_a_card_built_from_a_dirty_tree_unless_allowed(repo):
    card = repo / "reports/cards" / f"{POLICY}.md"
    clean = card.read_text()
    card.write_text(clean.replace("git_dirty: 'false', dirty_paths: []", "git_dirty: 'true', dirty_paths: [src/x.py]"))
    code, _, exc = register_after_pipeline()
    assert code != 0 and "uncommitted changes (src/x.py)" in str(exc) and "--allow-dirty" in str(exc)
    assert client_for(repo).search_registered_models() == []
    card.write_text(clean.replace("git_dirty: 'false', dirty_paths: [], dirty_allowed: false",
                                  "git_dirty: 'true', dirty_paths: [src/x.py], dirty_allowed: true"))
    register_ok()  # built with --allow-dirty: registered, and the card says so


def _signed_gates(repo: Path, name: str) -> dict[str, bool]:
    from reappreg.registry import evaluate_gates, evidence_of
    from reappreg.card.build import load_evidence
    from reappreg.settings import load_params

    settings = load_params(repo / "params.yaml")
    evidence = load_evidence(certificate=repo / "data/guard/certificate.json", eval_metrics=repo / "metrics/eval.json",
                             calibration=repo / "metrics/judge_calibration.json", claims=repo / "reports/claims.json",
                             rm_metrics=repo / "metrics/rm", policy_metrics=repo / "metrics/policy",
                             results=repo / "metrics/results.json")
    model = load_declarations(repo / "registry/models.yaml").models[name]
    flat = evidence_of(model.kind, evidence, health=settings.card.health,
                       max_completion_length=settings.policy.train.max_completion_length)
    return {c.gate: c.passed for c in evaluate_gates(list(model.gates), flat)}


def test_healthy_training_gate_is_the_cards_verdict_not_the_monitor_flag(repo):
    assert _signed_gates(repo, POLICY)["healthy_training"] is True
    metrics = json.loads((repo / "metrics/policy/train.json").read_text())
    metrics["final"]["format_gate_hit_rate"] = 0.75  # the monitor still says healthy
    json_file(repo / "metrics/policy/train.json", metrics)
    assert metrics["healthy"] is True and _signed_gates(repo, POLICY)["healthy_training"] is False
    del metrics["final"]["truncation_rate"]
    metrics["final"]["format_gate_hit_rate"] = 0.1
    json_file(repo / "metrics/policy/train.json", metrics)
    assert _signed_gates(repo, POLICY)["healthy_training"] is False  # not established is not healthy


def test_a_winner_without_a_fresh_pool_confirmation_fails_its_gate(tmp_path, monkeypatch, templates):
    make_repo(tmp_path, monkeypatch, templates, promotable=False)
    gates = _signed_gates(Path.cwd(), POLICY)
    assert gates["fresh_pool_promotable"] is False and gates["guard_pass"] is True


def test_two_concurrent_register_processes_create_exactly_one_version(repo):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [
        subprocess.Popen([sys.executable, "-m", "reappreg", *stage_argv("register", receipt=f"receipt_{i}.json")],
                         cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    client = client_for(repo)
    assert ids(client, POLICY) == ["1"]
    assert ids(client, RM) == ["1"]
    receipts = [json.loads((repo / f"receipt_{i}.json").read_text())["registered"] for i in range(2)]
    created = sorted(([r["created"] for r in rs] for rs in receipts), key=sum)
    assert created == [[False, False], [True, True]]  # one process created both versions
    waited = next(rs for rs in receipts if not rs[0]["created"])
    # ... and the other, once it had the lock, found them by their registration key.
    assert [r["note"] for r in waited] == ["unchanged: same registration key"] * 2


def test_server_down_fails_after_bounded_retries_and_registers_nothing(repo, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    code, _, exc = register_after_pipeline()
    assert isinstance(exc, RegistryUnavailable)  # bounded: the attempts are counted, not timed
    assert "did not answer after 3 attempt(s)" in str(exc) and "Nothing was registered" in str(exc)
    assert not (repo / "reports/registry/registration.json").exists()


def _library_registration(client, root: Path, name: str = POLICY, **hook_overrides):
    import mlflow

    from reappreg.tracking import configure

    configure(os.environ["MLFLOW_TRACKING_URI"], "reappraisal-registry", str(root / "registry/mlartifacts"))
    artifact = root / "models/policy/grpo"
    training = {"data/guarded/prompts.jsonl": dvc_md5(root / "data/guarded/prompts.jsonl")}
    decl = load_declarations(root / "registry/models.yaml")
    with mlflow.start_run():

        def log(folder, artifact_path):
            mlflow.log_artifacts(str(folder), artifact_path)
            return mlflow.get_artifact_uri(artifact_path)

        def attest(attested):
            return {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": k, "digest": {"sha256": v}} for k, v in attested.subjects.items()],
                    "predicateType": "https://slsa.dev/provenance/v1", "predicate": {}}

        content = VersionContent(artifact_dir=artifact, manifest=manifest_of(artifact), training_md5s=training,
                                 tags={"guard.result": "pass"}, card="---\nlicense: x\n---\n# card\n")
        # these tests are about rollback and races: a planted version is never a signed registration
        # (the squat check has its own test)
        hooks = RegistrationHooks(**{"log_artifacts": log, "attest": attest, "squat": lambda mv, key: "planted: unsigned",
                                     "signed": lambda mv: False, **hook_overrides})
        return register_version(client, name=name, model=decl.models[POLICY], content=content,
                                keys=[signing_key(root / "work/registry/keys", create=True)], hooks=hooks,
                                settings=RegistrySettings(candidate_alias="candidate", stale_registration_s=3600),
                                chain=session_of(root).chain)


def test_a_failure_after_creating_the_version_rolls_it_back(repo):
    client = client_for(repo)
    connect(os.environ["MLFLOW_TRACKING_URI"], attempts=1, backoff_s=0)

    class AliasFails:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

        def set_registered_model_alias(self, *args):
            raise ConnectionError("server went away")

    with pytest.raises(ConnectionError):
        _library_registration(AliasFails(client), repo)
    assert versions(client, POLICY) == []  # nothing half-registered is left
    reg = _library_registration(client, repo)  # a rerun registers it properly
    assert reg.created and client.get_model_version(POLICY, reg.version).tags[STATUS_TAG] == "complete"


def test_a_concurrent_version_from_another_host_is_resolved_to_the_lowest(repo):
    client = client_for(repo)
    connect(os.environ["MLFLOW_TRACKING_URI"], attempts=1, backoff_s=0)
    content = dvc_md5(repo / "models/policy/grpo")
    key = registration_key(content, {"data/guarded/prompts.jsonl": dvc_md5(repo / "data/guarded/prompts.jsonl")})
    import mlflow

    def log_while_another_host_registers(folder, artifact_path):
        # Another host (no shared lock) creates its version of the same key right now.
        if artifact_path.endswith("/model"):
                client.create_model_version(POLICY, source="file:///elsewhere", tags={KEY_TAG: key, STATUS_TAG: "registering"})
        mlflow.log_artifacts(str(folder), artifact_path)
        return mlflow.get_artifact_uri(artifact_path)

    reg = _library_registration(client, repo, log_artifacts=log_while_another_host_registers)
    assert not reg.created and reg.version == "1" and "duplicate" in reg.note
    assert ids(client, POLICY) == ["1"]


def test_a_stale_unfinished_registration_is_cleaned_up(repo):
    client = client_for(repo)
    connect(os.environ["MLFLOW_TRACKING_URI"], attempts=1, backoff_s=0)
    content = dvc_md5(repo / "models/policy/grpo")
    key = registration_key(content, {"data/guarded/prompts.jsonl": dvc_md5(repo / "data/guarded/prompts.jsonl")})
    client.create_registered_model(POLICY)
    client.create_model_version(POLICY, source="file:///crashed", tags={KEY_TAG: key, STATUS_TAG: "registering"})
    later = time.time() * 1000 + 2 * 3600 * 1000  # two hours on: past stale_after_s
    reg = _library_registration(client, repo, now_ms=lambda: later)
    assert reg.created and reg.version == "2"
    assert ids(client, POLICY) == ["2"]


def test_a_version_squatting_the_next_registration_key_is_refused_by_name(store_repo):
    repo = store_repo
    # Anyone with MLflow write access can learn the next registration key (it is a tag, and
    # computable from public md5s) and pre-create a version with it and status=complete.
    client = client_for(repo)
    register_ok()
    key = client.get_model_version(POLICY, "1").tags[KEY_TAG]
    client.delete_model_version(POLICY, "1")
    client.create_model_version(POLICY, source="s3://attacker-bucket/policy", tags={KEY_TAG: key, STATUS_TAG: "complete"})
    code, out, exc = register_after_pipeline()
    message = " ".join(f"{out} {exc}".split())
    assert code == 1, message
    assert f"{POLICY} version 2 carries registration key {key[:16]}" in message
    assert "not a signed registration of these bytes: no provenance envelope" in message, message
    assert f"{POLICY} version 2: unchanged" not in message
    assert ids(client, POLICY) == ["2"] and "candidate" not in aliases(client, POLICY)

    # Replay: the attacker copies an honest, signed version (same run, source, tags and
    # envelope) into a new number and deletes the original: its statement names another version.
    client.delete_model_version(POLICY, "2")
    register_ok()
    honest = client.get_model_version(POLICY, "3")
    envelope, _ = envelope_of(client, POLICY, "3")
    client.create_model_version(POLICY, source=honest.source, run_id=honest.run_id, tags=dict(honest.tags))
    client.log_text(honest.run_id, envelope.decode(), attestation_paths(POLICY, "4")[0])
    client.delete_model_version(POLICY, "3")
    code, out, exc = register_after_pipeline()
    message = " ".join(f"{out} {exc}".split())
    assert code == 1 and f"{POLICY} version 4 carries registration key" in message, message
    assert "signed statement describes another version: version='3' (this version: '4')" in message
    assert ids(client, POLICY) == ["4"]


# --------------------------------------------------------------------------- signed evidence


def envelope_of(client, name: str, version: str) -> tuple[bytes, dict]:
    import mlflow

    mv = client.get_model_version(name, version)
    text = mlflow.artifacts.load_text(f"runs:/{mv.run_id}/{attestation_paths(name, version)[0]}")
    stmt, _ = trust_of(Path.cwd()).open(text.encode(), role="registration")
    return text.encode(), stmt


def stored(client, name: str, version: str, rel: str) -> Path:
    """A file of a version as it lies in the (local) artifact store."""
    mv = client.get_model_version(name, version)
    if rel.startswith("attestations/"):
        root = Path(mv.source.removeprefix("file://")).parent
    else:
        root = Path(mv.source.removeprefix("file://"))
    return root / rel


def test_registration_signs_an_in_toto_slsa_statement_and_the_model_folder(repo):
    register_ok()
    client = client_for(repo)
    mv = client.get_model_version(POLICY, "1")
    data, stmt = envelope_of(client, POLICY, "1")
    import hashlib

    assert mv.tags[ENVELOPE_TAG] == hashlib.sha256(data).hexdigest()
    assert stmt["_type"] == "https://in-toto.io/Statement/v1" and stmt["predicateType"] == "https://slsa.dev/provenance/v1"
    subjects = {s["name"] for s in stmt["subject"]}
    assert "MLmodel" in subjects and "data/grpo/model.safetensors" in subjects
    deps = {d["name"]: d for d in stmt["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["data/guarded/prompts.jsonl"]["digest"]["md5"] == dvc_md5(repo / "data/guarded/prompts.jsonl")
    assert deps["data/guard/certificate.json"]["annotations"]["result"] == "pass"
    params = stmt["predicate"]["buildDefinition"]["externalParameters"]
    assert params["version"] == "1" and params["model"] == POLICY and params["artifact_dvc_md5"] == dvc_md5(repo / "models/policy/grpo")
    evidence = next(b for b in stmt["predicate"]["runDetails"]["byproducts"] if b["name"] == "reappreg.evidence")["annotations"]
    assert evidence["training.healthy"] is True and evidence["guard.result"] == "pass" and evidence["eval.bar.n"] >= 240
    # A real MLflow Model: the UI shows its signature, and the input example is stored.
    mlmodel = yaml.safe_load(stored(client, POLICY, "1", "MLmodel").read_text())
    assert "python_function" in mlmodel["flavors"] and "prompt" in mlmodel["signature"]["inputs"]
    assert (stored(client, POLICY, "1", "attestations/model.sig.json")).exists()
    # UI lineage: the DVC-tracked inputs are logged as datasets with their md5 as digest.
    run = client.get_run(mv.run_id)
    digests = {d.dataset.name: d.dataset.digest for d in run.inputs.dataset_inputs}
    assert digests["data/guarded/prompts.jsonl"] == dvc_md5(repo / "data/guarded/prompts.jsonl")[:36]


def forge_gate_tag(client, root):
    client.set_model_version_tag(POLICY, "1", "training.healthy", "true")
    client.set_model_version_tag(POLICY, "1", "gate.healthy_training", "pass")


def forge_artifact_and_manifest(client, root):
    path = stored(client, POLICY, "1", "data/grpo/model.safetensors")
    path.write_text("weights swapped in the artifact store")
    manifest = [[rel, md5] for rel, md5 in json.loads(client.get_model_version(POLICY, "1").tags["reappreg.manifest"])]
    manifest = [[rel, dvc_md5(path) if rel == "model.safetensors" else md5] for rel, md5 in manifest]
    client.set_model_version_tag(POLICY, "1", "reappreg.manifest", json.dumps(manifest, separators=(",", ":")))
    client.set_model_version_tag(POLICY, "1", CONTENT_TAG, folder_md5([{"relpath": r, "md5": m} for r, m in manifest]))


def forge_envelope_bytes(client, root):
    path = stored(client, POLICY, "1", "attestations/v1.provenance.dsse.json")
    env = json.loads(path.read_text())
    import base64

    payload = json.loads(base64.b64decode(env["payload"]))
    for b in payload["predicate"]["runDetails"]["byproducts"]:
        if b["name"] == "reappreg.evidence":
            b["annotations"]["training.healthy"] = True
    env["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    path.write_text(json.dumps(env))
    import hashlib

    client.set_model_version_tag(POLICY, "1", ENVELOPE_TAG, hashlib.sha256(path.read_bytes()).hexdigest())


def forge_untrusted_resignature(client, root):
    """An MLflow admin rebuilds the statement with healthy evidence and signs it with a key of their own."""
    path = stored(client, POLICY, "1", "attestations/v1.provenance.dsse.json")
    _, stmt = envelope_of(client, POLICY, "1")
    for b in stmt["predicate"]["runDetails"]["byproducts"]:
        if b["name"] == "reappreg.evidence":
            b["annotations"]["training.healthy"] = True
    attacker = signing_key(root / "attacker", create=True)
    forged = sign_statement(stmt, attacker)
    path.write_bytes(forged)
    import hashlib

    client.set_model_version_tag(POLICY, "1", ENVELOPE_TAG, hashlib.sha256(forged).hexdigest())


@pytest.mark.parametrize("forge, expect", [
    (forge_gate_tag, "TAMPERING: tag training.healthy=true but the signed statement says false"),
    (forge_artifact_and_manifest, "data/grpo/model.safetensors: sha256"),
    (forge_envelope_bytes, "provenance envelope rejected"),
    (forge_untrusted_resignature, "not a valid 'registration' key there"),
])
def test_each_forgery_is_caught_by_verify_and_refused_by_pull(tmp_path, monkeypatch, templates, forge, expect):
    """The unhealthy policy fails its gates; an MLflow admin without the key tries to make it pass and sets `champion`."""
    root = make_repo(tmp_path, monkeypatch, templates, healthy=False)
    register_ok()
    client = client_for(root)
    forge(client, root)
    client.set_registered_model_alias(POLICY, "champion", "1")  # as the UI does
    code, out, _ = run_cli("registry", "verify")
    flat = " ".join(out.split())
    # v1 is `candidate` (signed state): the forgery is a violation there; `champion` is a request the
    # watcher will restore, because the forged version fails.
    assert code == 1, out
    assert "VIOLATION reappraisal-policy-grpo@candidate -> v1: FAILS" in flat and expect in flat, out
    assert "PENDING reappraisal-policy-grpo@champion -> v1: PENDING request" in flat and "will RESTORE unset" in flat, out
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "pulled"))
    assert code == 1 and isinstance(exc, IntegrityError), exc
    assert not (tmp_path / "pulled").exists() and not list(tmp_path.glob(".pulled.partial-*"))
    code, _, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "production", "--reason", "forged")
    assert code == 1 and isinstance(exc, GateFailed)


def test_a_version_without_a_valid_envelope_fails_every_gate(repo):
    register_ok()
    client = client_for(repo)
    stored(client, POLICY, "1", "attestations/v1.provenance.dsse.json").unlink()
    client.set_registered_model_alias(POLICY, "champion", "1")
    code, out, _ = run_cli("registry", "verify")
    assert code == 1
    line = next(l for l in out.splitlines() if "@champion" in l)
    for gate in ("signed_evidence", "guard_pass", "judge_trusted", "min_n", "cluster_ci_low_above_bar", "healthy_training"):
        assert f"{gate} (" in line, (gate, line)


# --------------------------------------------------------------------------- promotion and verify


def test_a_version_failing_a_gate_cannot_be_promoted_without_force(tmp_path, monkeypatch, templates):
    root = make_repo(tmp_path, monkeypatch, templates, trusted=False)
    register_ok()
    client = client_for(root)
    code, _, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "looks good")
    assert isinstance(exc, GateFailed) and "judge_trusted (judge.trusted=false == true)" in str(exc)
    assert "champion" not in aliases(client, POLICY)
    # only the registration's own signed entry (candidate): nothing for champion, nothing forced
    assert [k for k in client.get_registered_model(POLICY).tags if k.startswith(("reappreg.history", "FORCED"))] == [
        "reappreg.history.000001"]
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "demo for the lab meeting",
                             "--force", "--actor", "alice")
    assert code == 0, (out, exc)
    assert "FORCED PROMOTION" in out
    history = __import__("reappreg.registry", fromlist=["read_history"]).read_history(client, POLICY, session_of(root).chain)
    registration, entry = history.entries  # the registration's candidate entry, then the promotion
    assert registration.body["kind"] == "register" and registration.body["alias"] == "candidate"
    assert entry.body["forced"] is True and entry.body["by"] == "alice" and entry.body["to"] == "1" and history.problems == []
    assert "forced by alice" in client.get_registered_model(POLICY).tags["FORCED.champion"]
    code, out, _ = run_cli("registry", "verify")
    assert code == 1 and "forced promotion (recorded)" in out


@pytest.mark.parametrize("edit", ["remove", "loosen"])
def test_a_gate_removed_or_loosened_in_git_still_binds_the_versions_it_was_signed_for(tmp_path, monkeypatch, templates,
                                                                                      edit, store):
    # An insider commit that drops or relaxes a failing gate in registry/models.yaml must not
    # let a version pass what its signed statement says it was judged under.
    root = on_store(make_repo(tmp_path, monkeypatch, templates, trusted=False), store, monkeypatch)
    register_ok()
    client = client_for(root)
    models_path = root / "registry/models.yaml"
    models = yaml.safe_load(models_path.read_text())
    gates = models["models"][POLICY]["gates"]
    if edit == "remove":
        models["models"][POLICY]["gates"] = [g for g in gates if g["name"] != "judge_trusted"]
    else:
        for g in gates:
            if g["name"] == "judge_trusted":
                g["op"] = "!="  # judge.trusted=false != true: passes today
    models_path.write_text(yaml.safe_dump(models, sort_keys=False))
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "gate relaxed")
    assert isinstance(exc, GateFailed), (code, out, exc)
    change = "removed from" if edit == "remove" else "changed in"
    assert f"judge_trusted@registration (judge.trusted=false == true (as signed; {change} registry/models.yaml" in str(exc)
    assert "champion" not in aliases(client, POLICY)
    # Forced anyway: verify names the signed gate it fails.
    assert run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "x", "--force")[0] == 0
    code, out, _ = run_cli("registry", "verify")
    assert code == 1 and "judge_trusted@registration" in " ".join(out.split())


def test_promotion_is_signed_history_and_verify_lists_signed_gate_results(repo):
    register_ok()
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "beats the bar", "--actor", "bob")
    assert code == 0, (out, exc)
    code, out, _ = run_cli("registry", "verify")
    assert code == 0, out
    text = " ".join(out.split())
    assert "reappraisal-policy-grpo@champion -> v1: passes its signed gates [signed_evidence=pass, guard_pass=pass," in text
    assert ("judge_trusted=pass, min_n=pass, cluster_ci_low_above_bar=pass, healthy_training=pass, "
            "fresh_pool_promotable=pass]") in text
    assert "promoted by bob" in text and "local one-key root" in text
    champion = text.split("@champion")[1].split("reappraisal-")[0]
    assert "promoted by bob" in champion and "signed history #2" in champion, champion  # after the registration's #1
    # Editing the signed history is caught.
    client = client_for(repo)
    tag = "reappreg.history.000001"
    env = json.loads(client.get_registered_model(POLICY).tags[tag])
    env["signatures"][0]["sig"] = env["signatures"][0]["sig"][:-4] + "AAAA"
    client.set_registered_model_tag(POLICY, tag, json.dumps(env))
    code, out, _ = run_cli("registry", "verify")
    assert code == 1 and "HISTORY reappraisal-policy-grpo: history entry reappreg.history.000001" in out


def test_eight_concurrent_promotions_exactly_one_wins(repo):
    register_ok()
    client = client_for(repo)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [subprocess.Popen([sys.executable, "-m", "reappreg", "registry", "promote", POLICY, "1", "--alias", "champion",
                               "--expect", "none", "--reason", f"race {i}", "--actor", f"p{i}"],
                              cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(8)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0] + [1] * 7, list(zip(codes, outputs))
    for code, out in zip(codes, outputs):
        if code:
            assert "alias moved under you" in out and "Traceback" not in out, out
    tags = client.get_registered_model(POLICY).tags
    # the registration's entry (candidate) and exactly one promotion's
    assert len([k for k in tags if k.startswith("reappreg.history.")]) == 2
    assert not [k for k in tags if k.startswith("FORCED")]
    assert aliases(client, POLICY)["champion"] == "1"
    assert [m.name for m in client.search_registered_models()] == sorted([POLICY, RM])  # no lock left behind


def _set_lock_params(repo: Path, **values) -> None:
    import yaml

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params.setdefault("registry", {}).update(values)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def test_a_lock_claiming_a_far_future_time_is_broken_after_its_lease_by_the_stores_clock(store_repo):
    """A writer without a key creates the lock with a time a century ahead: the lease runs on the store's
    creation time, so the next promotion breaks it once the lease is over instead of waiting forever."""
    repo = store_repo
    register_ok()
    client = client_for(repo)
    _set_lock_params(repo, promotion_lock_stale_s=2, promotion_lock_timeout_s=60)
    client.create_registered_model(f"{POLICY}.reappreg-lock", tags={"reappreg.kind": "promotion-lock"},
                                   description=json.dumps({"holder": "mallory", "pid": 1, "at": time.time() + 100 * 365 * 86400}))
    started = time.monotonic()
    code, out, err = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "after a squat")
    assert code == 0, (out, err)
    assert time.monotonic() - started < 45
    assert aliases(client, POLICY)["champion"] == "1"


def test_four_promoters_with_the_lock_deleted_under_them_fork_nothing(store_repo):
    """The lock is deleted again and again while four `promote --expect none` run: the signed chain decides.
    Exactly one promoter succeeds, the others exit 1 with one line each, the alias equals the one entry."""
    repo = store_repo
    register_ok()
    client = client_for(repo)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    stop = threading.Event()
    deleted = []

    def delete_locks():
        from mlflow.exceptions import MlflowException

        while not stop.is_set():
            try:
                client.delete_registered_model(f"{POLICY}.reappreg-lock")
                deleted.append(1)
            except MlflowException:
                pass
            time.sleep(0.005)

    deleter = threading.Thread(target=delete_locks, daemon=True)
    deleter.start()
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "reappreg", "registry", "promote", POLICY, "1", "--alias",
                                   "production", "--expect", "none", "--reason", f"race {i}", "--actor", f"p{i}"],
                                  cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for i in range(4)]
        outputs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        stop.set()
        deleter.join()
    assert deleted, "the attack never deleted a lock"
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1, 1, 1], list(zip(codes, outputs))
    for code, out in zip(codes, outputs):
        assert "Traceback" not in out, out
        if code:
            assert "alias moved under you" in out or "extended the signed history" in out or "claimed history entry" in out, out
    from reappreg.registry import read_history

    history = read_history(client, POLICY, session_of(repo).chain)
    assert history.problems == []
    moves = [e for e in history.entries if e.body.get("alias") == "production"]
    assert len(moves) == 1 and moves[0].body["from"] is None and moves[0].body["to"] == "1"
    winner = outputs[codes.index(0)]
    assert moves[0].body["by"] in winner
    assert aliases(client, POLICY)["production"] == "1"
    assert [m.name for m in client.search_registered_models()] == sorted([POLICY, RM])  # no lock or claim left


def test_watch_enforce_restores_ui_requests_that_fail_their_gates_and_says_why_on_the_version(tmp_path, monkeypatch,
                                                                                                 templates):
    root = make_repo(tmp_path, monkeypatch, templates)
    register_ok()
    assert run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "good")[0] == 0
    # A newer, unhealthy policy; someone sets champion (and a new alias) on it in the UI.
    retrain_policy(root, "unhealthy-weights")
    metrics = json.loads((root / "metrics/policy/train.json").read_text())
    metrics["healthy"] = False
    (root / "metrics/policy/train.json").write_text(json.dumps(metrics))
    register_ok()
    client = client_for(root)
    client.set_registered_model_alias(POLICY, "champion", "2")
    client.set_registered_model_alias(POLICY, "production", "2")
    code, out = run_verify()
    flat = " ".join(out.split())
    assert code == PENDING_EXIT and "PENDING reappraisal-policy-grpo@champion -> v2" in flat, out
    assert "the watcher will RESTORE v1: v2 fails its gates: healthy_training" in flat, out
    code, out, _ = run_cli("registry", "watch", "--max-polls", "1", "--enforce", "--actor", "watcher")
    flat = " ".join(out.split())
    assert code == 0, out  # both requests decided: nothing left for a key holder
    assert "ENFORCED restored reappraisal-policy-grpo@champion to v1 (the UI request named v2)" in flat, out
    assert "ENFORCED restored reappraisal-policy-grpo@production to no version (the UI request named v2)" in flat, out
    assert aliases(client, POLICY) == {"candidate": "2", "champion": "1"}
    # The reason is where the person who asked looks: on the model and on the version they chose.
    for tags in (client.get_registered_model(POLICY).tags, client.get_model_version(POLICY, "2").tags):
        assert "healthy_training" in tags["reappreg.request.champion"], tags
    code, out = run_verify()
    assert code == 0, out  # candidate (ungated) on the unhealthy version is fine; champion is back on v1


def test_poll_watcher_reports_a_ui_alias_once(tmp_path, monkeypatch, templates):
    root = make_repo(tmp_path, monkeypatch, templates, healthy=False)
    register_ok()
    client = client_for(root)
    naps = []

    def sleep(seconds):
        naps.append(seconds)
        if len(naps) == 1:
            client.set_registered_model_alias(POLICY, "production", "1")

    reported = []
    session = session_of(root)
    check = lambda: audit(session).findings  # noqa: E731
    found = watch_poll(check, interval_s=5, max_polls=3, report=reported.append, sleep=sleep)
    assert naps == [5, 5]  # bounded: three polls, two waits
    assert [(f.alias, f.version) for f in reported] == [("production", "1")]
    assert found == reported


def test_webhook_listener_address_is_host_and_port():
    assert WebhookListener(listen="127.0.0.1:0", public_url=None, duration=1, max_events=1).address() == ("127.0.0.1", 0)
    for bad in ("8080", ":8080", "localhost:", "localhost:http"):
        with pytest.raises(InputError, match="--listen must be HOST:PORT"):
            WebhookListener(listen=bad, public_url=None, duration=1, max_events=1).address()


# --------------------------------------------------------------------------- pull and clear failures


def test_pull_verifies_every_file_accepts_models_uris_and_prints_the_card(repo, tmp_path):
    register_ok()
    for i, spec in enumerate((f"{POLICY}@candidate", f"models:/{POLICY}@candidate", f"models:/{POLICY}/1")):
        code, out, exc = run_cli("registry", "pull", spec, "--to", str(tmp_path / f"pulled{i}"))
        assert code == 0, (spec, out, exc)
        assert dvc_md5(tmp_path / f"pulled{i}" / "data/grpo") == dvc_md5(repo / "models/policy/grpo")
        assert "# reappraisal-policy-grpo" in out and "each sha256 equal to the statement signed by registration key" in out, out


def test_pull_refuses_failing_gates_unless_allowed_and_records_it(tmp_path, monkeypatch, templates):
    root = make_repo(tmp_path, monkeypatch, templates, healthy=False)
    register_ok()
    client = client_for(root)
    client.set_registered_model_alias(POLICY, "production", "1")  # as in the UI: no signed entry
    for extra in ([], ["--allow-failing-gates"]):
        code, _, exc = run_cli("registry", "pull", f"{POLICY}@production", "--to", str(tmp_path / "p"), *extra)
        assert isinstance(exc, IntegrityError) and "the signed alias state is no version: a PENDING request" in str(exc)
    client.delete_registered_model_alias(POLICY, "production")
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "production", "--reason", "for the test",
                             "--force", "--actor", "alice")
    assert code == 0, (out, exc)
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@production", "--to", str(tmp_path / "p"))
    assert isinstance(exc, IntegrityError) and "healthy_training" in str(exc) and "--allow-failing-gates" in str(exc)
    assert not (tmp_path / "p").exists()
    code, out, exc = run_cli("registry", "pull", f"{POLICY}@production", "--to", str(tmp_path / "p"), "--allow-failing-gates",
                             "--actor", "carol")
    assert code == 0, (out, exc) and "FAILING GATES" in out
    recorded = [v for k, v in client.get_model_version(POLICY, "1").tags.items() if k.startswith("reappreg.pulled_failing.")]
    assert len(recorded) == 1 and "pulled by carol" in recorded[0]


def test_pull_refuses_a_bad_spec_and_a_non_empty_target(repo, tmp_path):
    register_ok()
    assert "expected NAME@ALIAS or NAME/VERSION" in str(run_cli("registry", "pull", POLICY)[2])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    exc = run_cli("registry", "pull", f"{POLICY}/1", "--to", str(tmp_path / "full"))[2]
    assert "not empty" in str(exc) and (tmp_path / "full" / "keep.txt").read_text() == "mine"


def cli_process(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "reappreg", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_missing_model_version_or_alias_is_one_line_and_exit_1(repo):
    register_ok()
    for args, says in ((["registry", "promote", POLICY, "99", "--reason", "x"], f"registered model '{POLICY}' has no version 99"),
                       (["registry", "promote", "no-such-model", "1", "--reason", "x"], "not declared"),
                       (["registry", "pull", f"{POLICY}@nope", "--to", "x"], f"registered model '{POLICY}' has no alias 'nope'"),
                       (["registry", "pull", "ghost@champion", "--to", "x"], "no registered model 'ghost'")):
        done = cli_process(repo, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        lines = [l for l in (done.stdout + done.stderr).splitlines() if l.strip()]
        # one error line; besides it only the line every registry command opens with (which root it trusts)
        errors = [l for l in lines if not l.startswith("trust: ")]
        assert len(errors) == 1 and says in errors[0] and "Traceback" not in done.stderr, (args, lines)


def test_verify_on_an_empty_or_unreachable_registry_is_not_a_pass(repo, monkeypatch):
    code, out, _ = run_cli("registry", "verify")
    assert code == 1 and "nothing to verify" in out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    code, _, exc = run_cli("registry", "verify")
    assert code == 1 and isinstance(exc, RegistryUnavailable) and "verified" in str(exc)


def test_a_gate_is_one_declaration(tmp_path):
    from reappreg.evidence.declarations import Gate
    from reappreg.registry import evaluate_gates

    text = (REPO / "registry/models.yaml").read_text()
    text = text.replace("      - {name: healthy_training,",
                        '      - {name: beats_pinned_reference, evidence: eval.bar.cluster_low, op: ">", value: 0.608, source: "pinned"}\n'
                        "      - {name: healthy_training,", 1)
    (tmp_path / "models.yaml").write_text(text)
    gates = load_declarations(tmp_path / "models.yaml").models[POLICY].gates
    names = [g.name for g in gates]
    assert names[names.index("beats_pinned_reference") + 1] == "healthy_training"
    checks = {c.gate: c for c in evaluate_gates(gates, {"eval.bar.cluster_low": 0.6, "training.healthy": True})}
    assert not checks["beats_pinned_reference"].passed and "0.6 > 0.608 [pinned]" in checks["beats_pinned_reference"].detail
    assert not checks["guard_pass"].passed and "missing from the signed evidence" in checks["guard_pass"].detail
    assert checks["healthy_training"].passed
    with pytest.raises(Exception, match="exactly one of 'value' and 'than'"):
        Gate(name="x", evidence="a", op=">")
    assert all(not c.passed for c in evaluate_gates(gates, None, unsigned_reason="no envelope"))


# --------------------------------------------------------------------------- declarations



def test_webhook_signature_check_follows_mlflow_and_rejects_forgeries():
    from mlflow.webhooks.delivery import _generate_hmac_signature

    body = '{"entity": "model_version_alias", "action": "created", "data": {}}'
    headers = {"X-MLflow-Delivery-Id": "d-1", "X-MLflow-Timestamp": "1700000000",
               "X-MLflow-Signature": _generate_hmac_signature("s3cret", "d-1", "1700000000", body)}
    assert verify_signature("s3cret", headers, body.encode())
    assert not verify_signature("other", headers, body.encode())
    assert not verify_signature("s3cret", headers, body.replace("created", "deleted").encode())


def test_folder_hash_from_the_manifest_is_dvcs(tmp_path):
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "b.bin").write_bytes(b"\x00\x01")
    (tmp_path / "m" / "sub" / "a.txt").write_text("weights")
    assert folder_md5(manifest_of(tmp_path / "m")) == dvc_md5(tmp_path / "m")


def test_dvc_stages_depend_on_every_declared_path():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    decl = load_declarations(REPO / "registry/models.yaml")
    declared = {p for m in decl.models.values() for p in (*m.training_inputs, *m.other_inputs)}
    assert declared <= set(stages["card"]["deps"])
    assert declared | {m.artifact for m in decl.models.values()} <= set(stages["register"]["deps"])


# --------------------------------------------------------------------------- remote server


@pytest.mark.slow
def test_remote_server_register_pull_and_webhook_watch(tmp_path, monkeypatch, templates, webhook_mlflow_server):
    url = webhook_mlflow_server
    root = make_repo(tmp_path, monkeypatch, templates, healthy=False)
    make_unique_policy(root)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    register_ok()
    version = registered_version(root, POLICY)
    assert "unchanged" in register_ok()
    assert registered_version(root, POLICY) == version
    client = client_for(root)
    same_key = client.search_model_versions(f"name='{POLICY}' and tags.`{KEY_TAG}` = '{client.get_model_version(POLICY, version).tags[KEY_TAG]}'")
    assert [str(v.version) for v in same_key] == [version]
    assert client.get_model_version(POLICY, version).source.startswith("mlflow-artifacts:")
    # The unhealthy policy fails its gates: taken only with the flag, which is recorded.
    code, out, exc = run_cli("registry", "pull", f"{POLICY}/{version}", "--to", str(tmp_path / "pulled"), "--allow-failing-gates")
    assert code == 0, (out, exc)
    assert dvc_md5(tmp_path / "pulled" / "data/grpo") == dvc_md5(root / "models/policy/grpo")

    # Webhook watcher: the server posts alias events to a loopback listener.
    ready = threading.Event()
    reported, result = [], {}

    def watch():
        # Without a key: this watch only reports, it never enforces.
        session = session_of(root, uri=url)
        listener = WebhookListener(listen="127.0.0.1:0", public_url=None, duration=60, max_events=2)
        result["findings"] = watch_webhook(session, listener, report=reported.append,
                                           check=lambda: audit(session).findings, on_ready=lambda _: ready.set())

    thread = threading.Thread(target=watch)
    thread.start()
    assert ready.wait(30)
    client.set_registered_model_alias(RM, "reviewed", registered_version(root, RM))  # passes the RM's gates
    client.set_registered_model_alias(POLICY, "production", version)               # unhealthy policy: fails
    thread.join(90)
    assert not thread.is_alive()
    # Both UI edits differ from the signed alias state: pending requests, previewed from signed evidence.
    found = {(f.name, f.alias, f.version): f for f in result["findings"]}
    assert set(found) == {(POLICY, "production", version), (RM, "reviewed", registered_version(root, RM))}, [
        f.describe() for f in result["findings"]]
    reviewed = found[(RM, "reviewed", registered_version(root, RM))].describe()
    assert "PENDING request" in reviewed and "the watcher will ACCEPT it" in reviewed, reviewed
    production = found[(POLICY, "production", version)].describe()
    assert "the watcher will RESTORE unset" in production and "fails its gates" in production, production
    assert sorted(reported, key=id) == sorted(result["findings"], key=id)
    assert list(client.list_webhooks()) == []  # the watcher removed its webhook


@pytest.fixture
def postgres_webhook_server(tmp_path, postgres_server):
    """``mlflow server`` on a fresh PostgreSQL database (tests/conftest.py), delivering webhooks to loopback."""
    from conftest import _new_postgres_db

    tmp = tmp_path / "pg-server"
    tmp.mkdir()
    proc, url = start_mlflow_server(tmp, webhooks=True, backend=_new_postgres_db(postgres_server))
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_watch_enforce_restores_a_failing_ui_request_through_a_real_webhook_delivery(tmp_path, monkeypatch, templates, postgres_webhook_server):
    url = postgres_webhook_server
    root = make_repo(tmp_path, monkeypatch, templates)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    register_ok()
    good = registered_version(root, POLICY)
    assert run_cli("registry", "promote", POLICY, good, "--alias", "champion", "--reason", "passes")[0] == 0
    retrain_policy(root, "unhealthy-weights")
    metrics = json.loads((root / "metrics/policy/train.json").read_text())
    metrics["healthy"] = False
    (root / "metrics/policy/train.json").write_text(json.dumps(metrics))
    register_ok()
    bad = registered_version(root, POLICY)
    assert bad != good
    client = client_for(root)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "MLFLOW_TRACKING_URI": url}
    watcher = subprocess.Popen([sys.executable, "-m", "reappreg", "registry", "watch", "--enforce", "--mode", "webhook",
                                "--duration", "120", "--max-events", "2", "--actor", "watcher"],
                               cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read():
        for line in watcher.stdout:
            lines.append(line)
            if "watching via webhook" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(120), "".join(lines)
        time.sleep(2)  # past the server's 1 s webhook cache
        client.set_registered_model_alias(POLICY, "champion", bad)  # what the UI does
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and aliases(client, POLICY).get("champion") != good:
            time.sleep(1)
        assert aliases(client, POLICY).get("champion") == good, "".join(lines)
        watcher.wait(timeout=150)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    reader.join(10)
    out = "".join(lines)
    flat = " ".join(out.split())
    assert watcher.returncode == 0 and f"ENFORCED restored {POLICY}@champion to v{good} (the UI request named v{bad})" in flat, out
    assert "healthy_training" in client.get_registered_model(POLICY).tags["reappreg.request.champion"]
    assert list(client.list_webhooks()) == []  # the watcher removed its webhook


@pytest.mark.slow
def test_models_uri_loads_in_a_fresh_process_with_the_ensembles_rewards(tmp_path, monkeypatch):
    """A real (tiny) ensemble registered through the library scores like the folder in a fresh process; a bare
    ``models:/NAME@candidate`` outside a clone is refused (test_registry_trust loads one inside a clone)."""
    import pandas as pd

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rm_fixtures import certify, train_on_pool  # the RM tests' trainers (real members on the sample pool)

    from reappreg.rm.ensemble import build_ensemble, load_ensemble
    from reappreg.data.sample import generate_sample
    from reappreg.settings import Params
    from reappreg.data.split import split, write_split
    from reappreg.tracking import configure

    pool_root = tmp_path / "pool"
    train, answers = split(generate_sample(seed=7, reappraisals_per_vignette=12, gpt4_answers_per_vignette=2,
                                           opponent_answers_per_vignette=2), ["human"])
    write_split(train, answers, pool_root / "train", pool_root / "heldout" / "answers.jsonl")
    pool = {"root": pool_root, "vignettes": pool_root / "train/vignettes.jsonl",
            "reappraisals": pool_root / "train/reappraisals.jsonl", "ratings": pool_root / "train/ratings.jsonl"}
    pool["certificate"] = certify(pool_root / "certificate.json", [pool["vignettes"], pool["reappraisals"]])
    members = [train_on_pool(pool, Params().rm.ensemble.objective, seed, Params().rm, f"m{seed}")[1] / "model" for seed in (0, 1)]
    ensemble = tmp_path / "ensemble"
    build_ensemble(members, ensemble, k=0.5, max_sentences=2, format_penalty=-1.0)

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = connect(uri, attempts=1, backoff_s=0)
    configure(uri, "reappraisal-registry", str(tmp_path / "mlartifacts"))
    import mlflow

    decl = load_declarations(REPO / "registry/models.yaml")
    with mlflow.start_run():

        def log(folder, artifact_path):
            mlflow.log_artifacts(str(folder), artifact_path)
            return mlflow.get_artifact_uri(artifact_path)

        def attest(attested):
            return {"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://slsa.dev/provenance/v1",
                    "subject": [{"name": k, "digest": {"sha256": v}} for k, v in attested.subjects.items()], "predicate": {}}

        content = VersionContent(artifact_dir=ensemble, manifest=manifest_of(ensemble), training_md5s={"x": "0" * 32},
                                 tags={}, card="---\nlicense: x\n---\n# card\n")
        from reappreg.registry.history import Chain, HeadMemory
        from reappreg.trust import load_trust

        key = signing_key(tmp_path / "keys", create=True)
        reg = register_version(client, name=RM, model=decl.models[RM], content=content, keys=[key],
                               hooks=RegistrationHooks(log_artifacts=log, attest=attest, squat=lambda mv, key: "new",
                                                       signed=lambda mv: False),
                               settings=RegistrySettings(candidate_alias="candidate", stale_registration_s=3600),
                               chain=Chain(load_trust(tmp_path / "no-team-keys", tmp_path / "work", local_key=key),
                                           HeadMemory(None, uri)))
    frame = pd.DataFrame({"scenario": ["Your friend did not reply to your message."] * 4,
                          "answer": ["Maybe she is busy; you could ask later.", "They might not have seen it yet.", "", "One. Two. Three."]})
    expected = load_ensemble(ensemble).score(frame["scenario"].tolist(), frame["answer"].tolist())
    frame_path = tmp_path / "frame.json"
    frame.to_json(frame_path, orient="records")
    script = ("import json, sys, mlflow, pandas as pd\n"
              "model = mlflow.pyfunc.load_model(sys.argv[1])\n"
              "print(json.dumps([float(x) for x in model.predict(pd.read_json(sys.argv[2], orient='records'))]))\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("REAPPREG_REPO", None)
    # Outside a clone there is no trust to verify a registry version with: a bare models:/ load gets nothing.
    outside = subprocess.run([sys.executable, "-c", script, f"models:/{RM}@candidate", str(frame_path)], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=600)
    assert outside.returncode != 0 and "runs outside a clone" in outside.stderr, outside.stderr[-3000:]
    # The logged MLflow Model itself (the bytes the version's source names) scores like the folder with only mlflow.
    source = client.get_model_version(RM, str(reg.version)).source
    done = subprocess.run([sys.executable, "-c", script, source, str(frame_path)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rewards = json.loads(done.stdout.strip().splitlines()[-1])
    assert reg.created and rewards == pytest.approx(list(expected), abs=1e-9)
    assert rewards[2] == rewards[3] == -1.0


@pytest.mark.slow
def test_policy_pyfunc_generates_in_a_fresh_process(tmp_path, tiny_lm):
    """The policy's MLflow Model loads with only mlflow and generates a completion per prompt."""
    import pandas as pd

    from reappreg.policy.pyfunc import save_pyfunc

    model = save_pyfunc(tiny_lm, tmp_path / "policy-model")
    mlmodel = yaml.safe_load((model / "MLmodel").read_text())
    assert "prompt" in mlmodel["signature"]["inputs"] and "max_new_tokens" in mlmodel["signature"]["params"]
    # Data and configuration only: the loader comes from the installed package, nothing is pickled or copied code.
    flavor = mlmodel["flavors"]["python_function"]
    assert flavor["loader_module"] == "reappreg.policy.pyfunc" and not flavor.get("code")
    assert not [p for p in model.rglob("*") if p.suffix == ".pkl" or p.name.endswith(".py")]
    frame = tmp_path / "prompts.json"
    pd.DataFrame({"prompt": ["Your friend forgot your birthday.", "A colleague took credit."]}).to_json(frame, orient="records")
    script = ("import json, sys, mlflow, pandas as pd\n"
              "m = mlflow.pyfunc.load_model(sys.argv[1])\n"
              "out = m.predict(pd.read_json(sys.argv[2], orient='records'), params={'max_new_tokens': 4})\n"
              "print(json.dumps([str(x) for x in out]))\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", script, str(model), str(frame)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    completions = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(completions) == 2 and all(isinstance(c, str) for c in completions)


def test_an_envelope_copied_from_another_version_is_refused(repo, tmp_path):
    import hashlib

    register_ok()
    retrain_policy(repo, "second-weights")
    metrics = json.loads((repo / "metrics/policy/train.json").read_text())
    metrics["healthy"] = False
    (repo / "metrics/policy/train.json").write_text(json.dumps(metrics))
    register_ok()
    client = client_for(repo)
    good = stored(client, POLICY, "1", "attestations/v1.provenance.dsse.json").read_bytes()
    stored(client, POLICY, "2", "attestations/v2.provenance.dsse.json").write_bytes(good)  # a genuine, trusted signature
    client.set_model_version_tag(POLICY, "2", ENVELOPE_TAG, hashlib.sha256(good).hexdigest())
    client.set_registered_model_alias(POLICY, "champion", "2")
    code, out, _ = run_cli("registry", "verify")
    assert code == 1 and "signed statement describes another version" in " ".join(out.split()), out
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "p"), "--allow-failing-gates")
    assert isinstance(exc, IntegrityError) and not (tmp_path / "p").exists()


# --------------------------------------------------------------------------- kept checkpoints


TRAINING_RUN = "0123456789abcdef0123456789abcdef"


def add_kept_checkpoint(root: Path) -> None:
    """policy.train.checkpoint_steps [3]: the step-3 folder, the metrics that describe it, its results row
    and its card, as `policy train`, `stats results` and `card build` write them."""
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["policy"]["train"]["checkpoint_steps"] = [3]
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=True))
    folder = root / "models/policy/checkpoints/step_3"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"grpo": true}')
    (folder / "model.safetensors").write_text("step-3-weights")
    json_file(root / "models/policy/checkpoints/manifest.json",
          {"checkpoints": [{"step": 3, "path": "step_3", "md5": dvc_md5(folder)}], "final_step": 6, "run_fingerprint": "fp"})
    metrics = json.loads((root / "metrics/policy/train.json").read_text())
    metrics.update(training_run_id=TRAINING_RUN, checkpoints={"step_3": {"step": 3, "model_md5": dvc_md5(folder)}})
    json_file(root / "metrics/policy/train.json", metrics)
    results = json.loads((root / "metrics/results.json").read_text())
    results["rows"] = [
        {"row_id": "policy/gpt-4-0314", "condition": "policy", "opponent": "gpt-4-0314", "pool": "policy",
         "status": "evaluated", "win_rate": 0.9, "n": 300, "cluster_low": 0.8, "iid_screening_low": 0.86, "n_eff": 250.0,
         "bar": 0.608, "bar_status": "confirmed", "bar_supported": True},
        {"row_id": "policy-step-3/gpt-4-0314", "condition": "policy-step-3", "opponent": "gpt-4-0314", "pool": "policy",
         "status": "evaluated", "win_rate": 0.55, "n": 288, "cluster_low": 0.41, "iid_screening_low": 0.49, "n_eff": 37.5,
         "bar": 0.608, "bar_status": "not_confirmed", "bar_supported": False},
    ]
    json_file(root / "metrics/results.json", results)
    (root / "reports/cards" / f"{POLICY}.step-3.md").write_text(
        f"---\nlicense: apache-2.0\n{CLEAN_REVISION}---\n# {POLICY}\n\nThe step-3 checkpoint.\n", encoding="utf-8")


def test_kept_checkpoints_are_versions_of_their_own_registered_in_step_order(repo, tmp_path):
    import mlflow

    from reappreg.registry.registration import CHECKPOINT_STEP_TAG, RESULTS_ROW_TAG, TRAINING_RUN_TAG

    add_kept_checkpoint(repo)
    out = register_ok()
    client = client_for(repo)
    checkpoint, final = versions(client, POLICY)
    assert (str(checkpoint.version), str(final.version)) == ("1", "2")   # step order: the final model last
    assert checkpoint.tags[CHECKPOINT_STEP_TAG] == "3" and final.tags[CHECKPOINT_STEP_TAG] == "6"
    assert checkpoint.tags[TRAINING_RUN_TAG] == final.tags[TRAINING_RUN_TAG] == TRAINING_RUN
    assert checkpoint.tags[RESULTS_ROW_TAG] == "policy-step-3/gpt-4-0314"
    assert final.tags[RESULTS_ROW_TAG] == "policy/gpt-4-0314"
    assert checkpoint.tags[CONTENT_TAG] == dvc_md5(repo / "models/policy/checkpoints/step_3")
    assert final.tags[CONTENT_TAG] == dvc_md5(repo / "models/policy/grpo")
    # `candidate` went on each new version in turn, so it ends on the final model.
    assert aliases(client, POLICY) == {"candidate": "2"}
    # A checkpoint's bar evidence is its own results row, never the final model's eval.json numbers.
    assert float(checkpoint.tags["eval.n"]) == 288 and float(checkpoint.tags["eval.cluster_ci_low"]) == 0.41
    assert float(final.tags["eval.n"]) == 300
    assert checkpoint.tags["gate.cluster_ci_low_above_bar"] == "fail" and final.tags["gate.cluster_ci_low_above_bar"] == "pass"
    # Promotion evidence belongs to the selected condition (`policy`), not to every version.
    assert checkpoint.tags["gate.fresh_pool_promotable"] == "fail" and final.tags["gate.fresh_pool_promotable"] == "pass"
    # Each version lives in a run of its own (one model folder and signature per run), with its card.
    assert checkpoint.run_id != final.run_id
    card = (repo / "reports/cards" / f"{POLICY}.step-3.md").read_text()
    assert mlflow.artifacts.load_text(f"runs:/{checkpoint.run_id}/{POLICY}/README.md") == card
    assert "The step-3 checkpoint." in checkpoint.description
    # Signed like the final model: a pull checks every byte against the signed statement.
    code, pulled, exc = run_cli("registry", "pull", f"{POLICY}/1", "--to", str(tmp_path / "pulled"), "--allow-failing-gates")
    assert code == 0, (pulled, exc)
    [folder] = [p for p in (tmp_path / "pulled/data").iterdir() if p.is_dir()]
    assert dvc_md5(folder) == dvc_md5(repo / "models/policy/checkpoints/step_3")
    # Unchanged artifacts: no new version, the alias stays on the final model.
    assert "unchanged" in register_ok() and ids(client, POLICY) == ["1", "2"] and aliases(client, POLICY) == {"candidate": "2"}
    assert "version 1" in out and "version 2" in out


def test_a_kept_checkpoint_whose_folder_the_metrics_do_not_describe_is_refused(repo):
    add_kept_checkpoint(repo)
    (repo / "models/policy/checkpoints/step_3/model.safetensors").write_text("swapped after training")
    code, _, exc = register_after_pipeline()
    assert isinstance(exc, GateFailed) and "step_3" in str(exc) and "step 3" in str(exc)
    assert client_for(repo).search_model_versions(f"name='{POLICY}'") == []


def test_a_kept_checkpoint_without_its_card_is_refused(repo):
    add_kept_checkpoint(repo)
    (repo / "reports/cards" / f"{POLICY}.step-3.md").unlink()
    code, _, exc = register_after_pipeline()
    assert code != 0 and "step-3 checkpoint not found" in str(exc)


# --------------------------------------------------------------------------- the signed alias state


@pytest.mark.parametrize("attack", ["rollback", "move_candidate", "delete_alias", "extra_alias"])
def test_an_alias_that_differs_from_the_signed_state_is_a_pending_request_never_ok(store_repo, attack):
    repo = store_repo
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    assert run_verify()[0] == 0
    if attack == "rollback":  # an older, validly signed, passing version: `champion` moves forward only
        client.set_registered_model_alias(POLICY, "champion", first)
        expect = (f"{POLICY}@champion -> v{first}: PENDING request", f"the watcher will RESTORE v{second}: v{first} is not "
                  f"newer than v{second}")
    elif attack == "move_candidate":  # set by registration only
        client.set_registered_model_alias(POLICY, "candidate", first)
        expect = (f"{POLICY}@candidate -> v{first}: PENDING request", "is set by the registry only")
    elif attack == "delete_alias":
        client.delete_registered_model_alias(POLICY, "champion")
        expect = (f"{POLICY}@champion -> no version: PENDING request", "removing an alias is not a request")
    else:  # a new alias on a passing version: accepted by the watcher (ui_requests default: gated)
        client.set_registered_model_alias(POLICY, "staging", second)
        expect = (f"{POLICY}@staging -> v{second}: PENDING request", "the watcher will ACCEPT it")
    code, out = run_verify()
    flat = " ".join(out.split())
    assert code == PENDING_EXIT and all(e in flat for e in expect), out
    assert "PENDING" in out and "VIOLATION" not in out and "pending request(s)" in flat, out
    # A watcher with a key decides it; then verify passes again.
    code, out, _ = run_cli("registry", "watch", "--enforce", "--mode", "poll", "--max-polls", "1", "--actor", "w")
    assert code == 0, out
    assert run_verify()[0] == 0
    want = {"rollback": second, "move_candidate": second, "delete_alias": second, "extra_alias": second}[attack]
    alias = {"rollback": "champion", "move_candidate": "candidate", "delete_alias": "champion", "extra_alias": "staging"}[attack]
    assert aliases(client, POLICY)[alias] == want


def test_pull_at_an_alias_refuses_a_pending_rollback_and_tags_never_steer_the_watcher(store_repo, tmp_path):
    repo = store_repo
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    client.set_registered_model_alias(POLICY, "champion", first)
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "p"))
    assert isinstance(exc, IntegrityError) and f"the signed alias state is v{second}: a PENDING request" in str(exc)
    assert not (tmp_path / "p").exists()
    # An attacker also edits the readable promotion tags to point at the old version: the
    # watcher restores the replayed chain's state, not one taken from tags.
    client.set_model_version_tag(POLICY, first, "promotion.champion.history", "reappreg.history.000002")
    code, out, _ = run_cli("registry", "watch", "--enforce", "--mode", "poll", "--max-polls", "1", "--actor", "w")
    assert code == 0 and f"restored {POLICY}@champion to v{second}" in " ".join(out.split()), out
    assert aliases(client, POLICY)["champion"] == second
    assert run_verify()[0] == 0  # the restore is itself a signed entry


def test_deleting_the_newest_history_entries_is_seen_as_truncation(store_repo):
    repo = store_repo
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    assert run_verify()[0] == 0  # this clone now remembers the head
    tags = sorted(k for k in client.get_registered_model(POLICY).tags if k.startswith("reappreg.history."))
    client.delete_registered_model_tag(POLICY, tags[-1])      # the promotion of v2 ...
    client.set_registered_model_alias(POLICY, "champion", first)  # ... and the alias made to agree with the rest
    code, out = run_verify()
    assert code == 1 and "fewer than the" in out and "truncation" in " ".join(out.split()), out


def test_decoys_past_one_page_do_not_hide_a_failing_alias(store_repo, monkeypatch):
    repo = store_repo
    import importlib

    audit_module = importlib.import_module("reappreg.registry.audit")  # the package re-exports audit()
    register_ok()
    client = client_for(repo)
    for i in range(5):
        client.create_registered_model(f"aaa-decoy-{i}")
    client.set_registered_model_alias(POLICY, "champion", registered_version(repo, POLICY))  # unsigned
    monkeypatch.setattr(audit_module, "PAGE_SIZE", 2)  # the real models are on page 4
    code, out = run_verify()
    flat = " ".join(out.split())
    assert code == PENDING_EXIT and f"PENDING {POLICY}@champion" in flat and "undeclared aaa-decoy-4" in flat, out


def test_an_undeclared_look_alike_is_listed_and_never_counted_as_verified(store_repo):
    repo = store_repo
    register_ok()
    client = client_for(repo)
    client.create_registered_model(f"{POLICY}-v2")
    mv = client.create_model_version(f"{POLICY}-v2", source="s3://attacker-bucket/look-alike", tags={"gate.healthy_training": "pass"})
    client.set_registered_model_alias(f"{POLICY}-v2", "champion", str(mv.version))
    code, out = run_verify()
    flat = " ".join(out.split())
    assert code == 0, out
    assert f"undeclared {POLICY}-v2" in flat
    verified = int(flat.split(" alias(es) of ")[0].split()[-1])
    assert verified == 2  # the two declared models' candidates; the look-alike is not counted


# --------------------------------------------------------------------------- bare MLflow loads and the verified loader


def test_an_honest_bare_mlflow_load_does_not_break_verify_but_a_forged_marker_does(repo, tmp_path):
    """With reappreg installed a bare ``models:/`` load gets a verified copy and never writes into the store.
    MLflow without it (a teammate's plain install) writes its `registered_model_meta` into the version's
    stored folder on a local store. That one file, with exactly MLflow's content for this version, is not
    tampering; the same name holding anything else is an unexpected file."""
    import mlflow
    import yaml
    from mlflow.store.artifact.models_artifact_repo import ModelsArtifactRepository

    register_ok()
    client = client_for(repo)
    loaded = Path(mlflow.artifacts.download_artifacts(f"models:/{POLICY}/1"))  # the plugin: a verified copy
    marker = stored(client, POLICY, "1", "registered_model_meta")
    assert loaded != marker.parent and not marker.exists() and (loaded / "registered_model_meta").is_file()
    # MLflow's own models: repository, as a process without reappreg's plugin resolves it
    plain = Path(ModelsArtifactRepository(f"models:/{POLICY}/1").download_artifacts(""))
    assert plain == marker.parent and marker.is_file(), "MLflow no longer writes its marker into a local store"
    code, out = run_verify()
    assert code == 0, out
    code, out, exc = run_cli("registry", "pull", f"{POLICY}@candidate", "--to", str(tmp_path / "pulled"))
    assert code == 0, (out, exc)
    assert not (tmp_path / "pulled" / "registered_model_meta").exists() and marker.is_file()
    for forged in ({"model_name": POLICY, "model_version": "2"}, {"model_name": RM, "model_version": "1"},
                   {"model_name": POLICY, "model_version": "1", "loader_module": "evil"}):
        marker.write_text(yaml.safe_dump(forged))
        code, out = run_verify()
        flat = " ".join(out.split())
        assert code == 1 and "unexpected file registered_model_meta (registered_model_meta holds" in flat, out


def test_registered_models_are_data_only_and_a_signed_pickle_is_still_not_loaded(repo, tmp_path, monkeypatch):
    """The stored folder names reappreg's loader module and holds no code; a version whose (signed)
    folder carries a pickle, stored code or a foreign loader is refused by the verified loader."""
    import mlflow.pyfunc
    import yaml

    import reappreg.policy.pyfunc
    from reappreg.registry.loader import check_data_only, load_model

    register_ok()
    client = client_for(repo)
    for name, loader in ((POLICY, "reappreg.policy.pyfunc"), (RM, "reappreg.rm.pyfunc")):
        folder = stored(client, name, "1", "MLmodel").parent
        flavor = yaml.safe_load((folder / "MLmodel").read_text())["flavors"]["python_function"]
        assert flavor["loader_module"] == loader and not flavor.get("code"), flavor
        assert not [p for p in folder.rglob("*") if p.suffix == ".pkl" or p.suffix == ".py"]

    class Echo(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input, params=None):
            return model_input

    def pickled(artifact_dir, dest):  # what this project registered before: python_model.pkl
        mlflow.pyfunc.save_model(path=str(dest), python_model=Echo(), artifacts={"policy": str(artifact_dir)})
        return dest

    make_unique_policy(repo)  # a new policy version to register
    monkeypatch.setattr(reappreg.policy.pyfunc, "save_pyfunc", pickled)
    register_ok()
    handed: list = []
    monkeypatch.setattr(mlflow.pyfunc, "load_model", lambda path: handed.append(path))
    with pytest.raises(InputError, match="python_function loader is 'mlflow.pyfunc.model'"):
        load_model(f"models:/{POLICY}/2", repo=repo, dst=tmp_path / "pickled")
    assert handed == []
    # The checks one by one, on an otherwise data-only folder.
    good = tmp_path / "good"
    shutil.copytree(stored(client, POLICY, "1", "MLmodel").parent, good)
    check_data_only(good, "good")
    for name, edit, said in (
            ("foreign", lambda f: f.update(loader_module="os"), "loader is 'os'"),
            ("code", lambda f: f.update(code="code"), "stored code on the import path"),
            ("pickle", None, "pickled objects")):
        folder = tmp_path / name
        shutil.copytree(good, folder)
        mlmodel = yaml.safe_load((folder / "MLmodel").read_text())
        if edit:
            edit(mlmodel["flavors"]["python_function"])
            (folder / "MLmodel").write_text(yaml.safe_dump(mlmodel))
        else:
            (folder / "data" / "weights.pkl").write_bytes(b"\x80\x04N.")
        with pytest.raises(InputError, match=said):
            check_data_only(folder, name)


def test_the_verified_loader_hands_mlflow_only_a_verified_copy(repo, tmp_path, monkeypatch):
    import mlflow.pyfunc

    from reappreg.registry.loader import load_model

    register_ok()
    handed: list[Path] = []
    monkeypatch.setattr(mlflow.pyfunc, "load_model", lambda path: handed.append(Path(path)) or "loaded")
    assert load_model(f"models:/{POLICY}@candidate", repo=repo, dst=tmp_path / "verified") == "loaded"
    assert handed == [tmp_path / "verified"]
    assert dvc_md5(tmp_path / "verified" / "data/grpo") == dvc_md5(repo / "models/policy/grpo")
    # One stored byte changed: nothing reaches MLflow, nothing is left behind.
    client = client_for(repo)
    weights = stored(client, POLICY, "1", "data/grpo/model.safetensors")
    weights.write_bytes(weights.read_bytes() + b"\0")
    with pytest.raises(IntegrityError, match="model.safetensors: sha256"):
        load_model(f"models:/{POLICY}/1", repo=repo, dst=tmp_path / "tampered")
    assert handed == [tmp_path / "verified"] and not (tmp_path / "tampered").exists()
