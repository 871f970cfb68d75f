"""Promotion where people promote, and no unsigned store state steering the registry.

An alias set in the MLflow UI (``MlflowClient.set_registered_model_alias`` is what the UI calls)
is a request: pending until a watcher with a key accepts it (signed) or restores the signed
state with the reason. Each attack below is made as a store writer without a key would make
it, on this clone's sqlite store and on an ``mlflow server`` backed by PostgreSQL, and each
ends refused or detected with a message that names it; each has the user action beside it
that must still work.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from reappreg.commands.registry import PENDING_EXIT
from reappreg.errors import GateFailed
from reappreg.registry import IntegrityError, read_history
from reappreg.registry.history import ChainBroken
from stage_commands import stage_argv
from registry_fixtures import (  # noqa: F401 (fixtures: templates, repo, store, store_repo, postgres_registry)
    POLICY,
    aliases,
    client_for,
    ids,
    postgres_registry,
    register_after_pipeline,
    register_ok,
    repo,
    run_cli,
    run_verify,
    session_of,
    store,
    store_repo,
    templates,
    two_good_policy_versions,
)


def flat(text: str) -> str:
    return " ".join(text.split())


def watch_enforce(*extra: str) -> tuple[int, str]:
    code, out, exc = run_cli("registry", "watch", "--enforce", "--mode", "poll", "--max-polls", "1", "--actor", "watcher",
                             *extra)
    return code, flat(out) + (f" {exc}" if exc and not isinstance(exc, SystemExit) else "")


def history_kinds(root: Path) -> list[tuple[str, str, str | None]]:
    history = read_history(client_for(root), POLICY, session_of(root).chain)
    return [(e.body["kind"], e.body["alias"], e.body["to"]) for e in history.entries]


# --------------------------------------------------------------------------- the user's path


def test_a_passing_newer_version_set_in_the_ui_is_accepted_and_pull_serves_it(store_repo, tmp_path):
    repo = store_repo
    register_ok()
    assert run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "first")[0] == 0
    (repo / "models/policy/grpo/model.safetensors").write_text("better-weights")
    metrics = json.loads((repo / "metrics/policy/train.json").read_text())
    metrics["model_md5"] = __import__("reappreg.hashing", fromlist=["dvc_md5"]).dvc_md5(repo / "models/policy/grpo")
    (repo / "metrics/policy/train.json").write_text(json.dumps(metrics))
    register_ok()
    client = client_for(repo)
    client.set_registered_model_alias(POLICY, "champion", "2")  # what the UI's alias editor calls
    code, out = run_verify()
    assert code == PENDING_EXIT and "PENDING reappraisal-policy-grpo@champion -> v2" in flat(out), out
    assert "the watcher will ACCEPT it: v2 passes its signed gates" in flat(out), out
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "early"))
    assert isinstance(exc, IntegrityError) and "a PENDING request" in str(exc) and not (tmp_path / "early").exists()

    code, out = watch_enforce()
    assert code == 0 and f"accepted the UI request {POLICY}@champion -> v2 (was v1)" in out, out
    assert run_verify()[0] == 0
    code, out, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "champion"))
    assert code == 0, (out, exc)
    assert (tmp_path / "champion" / "MLmodel").is_file()
    assert history_kinds(repo)[-1] == ("accept", "champion", "2")
    assert "accepted the UI request" in client.get_model_version(POLICY, "2").tags["reappreg.request.champion"]


def test_a_ui_rollback_is_restored_with_the_reason_and_the_cli_rollback_still_works(store_repo):
    repo = store_repo
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    client.set_registered_model_alias(POLICY, "champion", first)
    code, out = watch_enforce()
    assert code == 0 and f"restored {POLICY}@champion to v{second} (the UI request named v{first})" in out, out
    reason = client.get_model_version(POLICY, first).tags["reappreg.request.champion"]
    assert "a rollback needs `reappreg registry promote" in reason, reason
    # The rollback a person means is one signed command with a reason.
    code, out, exc = run_cli("registry", "promote", POLICY, first, "--alias", "champion", "--reason", "v2 regressed in prod")
    assert code == 0, (out, exc)
    assert aliases(client, POLICY)["champion"] == first and run_verify()[0] == 0


# --------------------------------------------------------------------------- nothing unsigned decides an action


def test_a_tampered_tag_on_the_champion_is_restored_and_never_moves_the_alias(store_repo):
    """The confused deputy: make the champion look failing by a tag, hoping the enforcer rolls back."""
    repo = store_repo
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    before = history_kinds(repo)
    client.set_model_version_tag(POLICY, second, "training.healthy", "false")
    code, out = run_verify()
    assert code == 1 and f"VIOLATION {POLICY}@champion -> v{second}: FAILS" in flat(out), out
    assert "TAMPERING: tag training.healthy=false but the signed statement says true" in flat(out), out
    code, out = watch_enforce()
    assert f"TAMPERING {POLICY} v{second}: training.healthy restored from its signed statement" in out, out
    assert f"{POLICY}@champion stays on v{second}" in out, out
    assert aliases(client, POLICY)["champion"] == second
    assert client.get_model_version(POLICY, second).tags["training.healthy"] == "true"
    assert history_kinds(repo) == before  # no alias-moving entry was signed
    assert run_verify()[0] == 0


def test_no_entry_is_signed_on_a_chain_that_does_not_verify(store_repo):
    repo = store_repo
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    tags = client.get_registered_model(POLICY).tags
    keys = sorted(k for k in tags if k.startswith("reappreg.history."))
    # Reorder two signed entries (each still carries a valid signature).
    client.set_registered_model_tag(POLICY, keys[1], tags[keys[2]])
    client.set_registered_model_tag(POLICY, keys[2], tags[keys[1]])
    code, out = run_verify()
    assert code == 1 and "HISTORY" in out and "chain broken" in flat(out), out
    client.set_registered_model_alias(POLICY, "staging", second)  # a request a watcher would accept
    count = len([k for k in client.get_registered_model(POLICY).tags if k.startswith("reappreg.history.")])
    code, out = watch_enforce()
    assert code == 1 and "refused: the signed history does not verify" in out, out
    code, _, exc = run_cli("registry", "promote", POLICY, first, "--alias", "champion", "--reason", "on a broken chain")
    assert isinstance(exc, ChainBroken) and "nothing was written" in str(exc)
    assert len([k for k in client.get_registered_model(POLICY).tags if k.startswith("reappreg.history.")]) == count


def test_pull_watch_and_promote_refuse_a_chain_shorter_than_this_clone_saw(store_repo, tmp_path):
    repo = store_repo
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "seen"))
    assert code == 0, exc  # this clone now remembers the head (any command that read the chain does)
    newest = sorted(k for k in client.get_registered_model(POLICY).tags if k.startswith("reappreg.history."))[-1]
    client.delete_registered_model_tag(POLICY, newest)          # the promotion of v2 ...
    client.set_registered_model_alias(POLICY, "champion", first)  # ... and the alias made to agree with the rest
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "short"))
    assert isinstance(exc, IntegrityError) and "truncation" in str(exc) and not (tmp_path / "short").exists()
    code, out, _ = run_cli("registry", "watch", "--mode", "poll", "--max-polls", "1")
    assert code == 1 and "truncation" in flat(out), out
    code, _, exc = run_cli("registry", "promote", POLICY, second, "--alias", "champion", "--reason", "re-promote")
    assert isinstance(exc, ChainBroken) and "truncation" in str(exc)


def test_a_status_tag_never_makes_register_delete_a_signed_version(store_repo):
    repo = store_repo
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["registry"]["stale_registration_s"] = 1  # every unfinished registration is stale at once
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    first, second = two_good_policy_versions(repo)
    client = client_for(repo)
    for version in (first, second):
        client.set_model_version_tag(POLICY, version, "reappreg.status", "registering")
    time.sleep(1.5)
    code, out, exc = register_after_pipeline()  # unchanged artifacts: the honest re-run
    assert code == 0 and "unchanged" in out, (out, exc)
    assert ids(client, POLICY) == [first, second] and aliases(client, POLICY)["champion"] == second


def test_every_registered_model_is_accounted_for_and_a_lock_holding_versions_is_a_finding(store_repo):
    repo = store_repo
    register_ok()
    client = client_for(repo)
    # A model named like a lock, with a version and an alias: it used to be skipped by verify.
    name = f"{POLICY}.reappreg-lock"
    client.create_registered_model(name, tags={"reappreg.kind": "promotion-lock"})
    mv = client.create_model_version(name, source="s3://attacker/policy")
    client.set_registered_model_alias(name, "champion", str(mv.version))
    other = "something.reappreg-lock"
    client.create_registered_model(other)
    code, out = run_verify()
    text = flat(out)
    assert code == 1 and f"MODEL {name}: named like a registry lock or claim but holds versions and aliases champion" in text
    assert "4 registered model(s) accounted for" in text and "undeclared" in text and other in text, out
    # The registry's own promotions still take and release their lock.
    code, out, exc = run_cli("registry", "promote", "reappraisal-rm-ensemble", "1", "--alias", "champion", "--reason", "ok")
    assert code == 0, (out, exc)


@pytest.mark.parametrize("edit", ["eval", "results", "card", "planted_metrics"])
def test_register_refuses_evidence_edited_after_its_stage(repo, edit):
    record_lock = register_ok  # the honest run first: the control registers
    record_lock()
    if edit == "eval":
        data = json.loads((repo / "metrics/eval.json").read_text())
        data["policy/gpt-4-0314/cluster_low"] = 0.99
        (repo / "metrics/eval.json").write_text(json.dumps(data))
        expect = "metrics/eval.json (eval) has md5"
    elif edit == "results":
        data = json.loads((repo / "metrics/results.json").read_text())
        data["selection"]["promotable"] = True
        data["selection"]["reason"] = "edited"
        (repo / "metrics/results.json").write_text(json.dumps(data))
        expect = "metrics/results.json (results) has md5"
    elif edit == "card":
        card = repo / "reports/cards" / f"{POLICY}.md"
        card.write_text(card.read_text() + "\nCleared for clinical deployment.\n")
        expect = "reports/cards (cards) has md5"
    else:
        (repo / "metrics/rm/bonus.json").write_text(json.dumps({"beats_length_baseline": {"cluster_low": 0.5}}))
        expect = "metrics/rm/bonus.json (rm/bonus.json) is not the output of any stage"
    (repo / "models/policy/grpo/model.safetensors").write_text("new-weights-so-a-version-would-be-made")
    code, _, exc = run_cli(*stage_argv("register"))
    assert code == 1 and isinstance(exc, GateFailed) and expect in str(exc), exc
    assert "edited after the stage ran" in str(exc) or "written beside the pipeline" in str(exc)


def test_pull_prints_only_the_signed_card_and_a_rewritten_description_is_restored(store_repo, tmp_path):
    repo = store_repo
    register_ok()
    assert run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "ok")[0] == 0
    client = client_for(repo)
    client.update_model_version(POLICY, "1", description="Cleared for clinical deployment.")
    code, out = run_verify()
    assert code == 1 and "the version's description (the card the MLflow UI shows) is not the signed card" in flat(out), out
    code, _, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "p"))
    assert isinstance(exc, IntegrityError) and "description" in str(exc)
    code, out = watch_enforce()
    assert "description restored from its signed statement" in out, out
    code, out, exc = run_cli("registry", "pull", f"{POLICY}@champion", "--to", str(tmp_path / "p2"))
    assert code == 0, (out, exc)
    assert "Cleared for clinical deployment" not in out and f"# {POLICY}" in out
