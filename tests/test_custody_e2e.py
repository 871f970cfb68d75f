"""Custody on the real pipeline run (marked slow; shares the one `dvc repro` of the CPU profile).

Every stage signed an in-toto link under `dvc repro`, and `register` verified the chain. Then, as an
attacker with write access to the repository files and the tracking store but no key: upstream
files rewritten consistently (dvc.lock made to agree, finished tracked runs forged to "write"
them, the check pointed at the attacker's own store), evidence edited after its stage, the bar
lowered in registry/models.yaml -- each refused with the step and the file named; the same files
restored pass the custody check after each attack, and register once after all of them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline_copy import run_checked
from reappreg.hashing import dvc_md5

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repo_copy(pipeline_repo) -> tuple[Path, dict]:
    return pipeline_repo


def _register(root: Path, env: dict) -> subprocess.CompletedProcess:
    cmd = shlex.split(yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["register"]["cmd"])
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)


def _agree_lock(root: Path, edited: list[str]) -> None:
    """dvc.lock made to agree with the ``edited`` files as they are now (what an attacker without a key can
    do; the other entries already agree, and rehashing the model folders would only cost time)."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    for stage in lock["stages"].values():
        for entry in [*(stage.get("outs") or []), *(stage.get("deps") or [])]:
            if "md5" in entry and entry["path"] in edited and (root / entry["path"]).exists():
                entry["md5"] = dvc_md5(root / entry["path"])
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


def test_every_stage_signed_a_link_and_register_verified_the_chain(repo_copy):
    root, ctx = repo_copy
    from reappreg.custody.links import load_link, verify_link
    from reappreg.custody.plan import link_path, load_template

    trust = _trust(root)
    stages = run_checked(["dvc", "stage", "list", "--name-only"], root, ctx["env"]).split()
    for stage in stages:
        assert (root / link_path(stage)).is_file(), f"stage {stage} signed no link"
        envelope, payload = load_link(root, stage)
        verify_link(trust, envelope, payload, stage)
        assert payload["environment"]["trust"]["origin"] == "local" and payload["products"], stage
    assert set(load_template(root).steps) == {"declarations", *stages}
    receipt = json.loads((root / "reports/registry/registration.json").read_text())
    assert receipt["custody"].startswith("in-toto verified") and "register's own inputs" in receipt["custody"]


def _restore(root: Path, saved: dict[str, bytes]) -> None:
    for rel, data in saved.items():
        (root / rel).write_bytes(data)


@pytest.mark.parametrize("attack", ["generations_and_judgments", "verdicts_and_probabilities", "eval_after_stats",
                                    "results_after_their_stage", "lowered_bar", "foreign_store"])
def test_rewrites_without_a_key_are_refused_at_register_and_the_control_registers(repo_copy, attack, tmp_path):
    root, ctx = repo_copy
    env = dict(ctx["env"])
    stats_outs = [o["path"] for o in yaml.safe_load((root / "dvc.lock").read_text())["stages"]["stats"]["outs"]
                  if (root / o["path"]).is_file()]  # its link, eval.json, claims.json, the forest plot
    files = ["data/eval/generations.jsonl", "data/eval/judgments.jsonl", "metrics/results.json", "registry/models.yaml",
             "dvc.lock", *stats_outs]
    saved = {rel: (root / rel).read_bytes() for rel in files}
    # What the pipeline's own register run left (its receipt and link, as dvc.lock records them): put
    # back whatever a register run did to them, for the tests after this one.
    register_outs = {rel: (root / rel).read_bytes() for rel in ("reports/registry/registration.json",
                                                                "custody/links/register.link")}
    try:
        if attack in ("generations_and_judgments", "verdicts_and_probabilities", "foreign_store"):
            path = root / "data/eval/judgments.jsonl"
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for row in rows:  # every verdict flipped with its probabilities
                row["p_a"], row["p_b"] = row.get("p_b"), row.get("p_a")
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            if attack == "generations_and_judgments":
                gen = root / "data/eval/generations.jsonl"
                gen.write_text(gen.read_text().replace(" you ", " You "))
            # Refused by whichever check meets the rewrite first, each naming the file: the claims record
            # the judgments' md5 the stats step read (the lock made to agree no longer matches it), and
            # the signed links record what the judge step produced.
            expect = ("data/eval/judgments.jsonl", ("is not what step 'judge' produced", "but the 'stats' stage read"))
            if attack == "foreign_store":
                env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'attacker.db'}"
        elif attack == "eval_after_stats":
            data = json.loads((root / "metrics/eval.json").read_text())
            data = {k: (0.99 if k.endswith("/cluster_low") else v) for k, v in data.items()}
            (root / "metrics/eval.json").write_text(json.dumps(data))
            expect = ("metrics/eval.json", "is not what step 'stats' produced")
        elif attack == "results_after_their_stage":
            data = json.loads((root / "metrics/results.json").read_text())
            data["selection"]["promotable"] = True
            (root / "metrics/results.json").write_text(json.dumps(data))
            expect = ("metrics/results.json", "is not what step 'results' produced")
        else:
            decl = yaml.safe_load((root / "registry/models.yaml").read_text())
            decl["reference_bar"]["bar"] = 0.1
            (root / "registry/models.yaml").write_text(yaml.safe_dump(decl, sort_keys=False))
            expect = ("registry/models.yaml", ("is not what step 'declarations' produced", "but the 'stats' stage read"))
            # The stats stage itself refuses it before drawing any claim.
            stats = subprocess.run(["dvc", "repro", "stats", "--single-item", "--force"], cwd=root, env=env,
                                   capture_output=True, text=True)
            assert stats.returncode != 0 and expect[1][0] in stats.stdout + stats.stderr, stats.stdout[-3000:]
            # DVC removed the stage's outputs before the refused run; the attacker puts the pipeline's back,
            # so register meets the lowered bar itself.
            _restore(root, {rel: saved[rel] for rel in stats_outs})
        _agree_lock(root, files)
        done = _register(root, env)
        message = " ".join((done.stdout + done.stderr).split())
        reasons = (expect[1],) if isinstance(expect[1], str) else expect[1]
        assert done.returncode != 0 and expect[0] in message and any(r in message for r in reasons), message[-3000:]
    finally:
        _restore(root, {**saved, **register_outs})
    # The control: the files as the pipeline signed them pass the same custody check `register` runs
    # first (in this process: seconds); the last test below registers them for real, once.
    assert _custody_check(root).startswith("in-toto verified")


def _trust(root: Path):
    """The trust this clone's commands use (its local one-key root: the pipeline ran under it)."""
    from reappreg.settings import load_params
    from reappreg.trust.local import clone_trust

    return clone_trust(load_params(root / "params.yaml").registry, root / "registry/keys", root / "work/registry/keys")


def _custody_check(root: Path) -> str:
    from reappreg.custody.layout import verify_registration

    return verify_registration(root, _trust(root), "local")


def test_after_every_attack_the_pipelines_own_files_register(repo_copy):
    """The user's path after the attacks above: the restored files register (nothing new to sign)."""
    root, ctx = repo_copy
    register_outs = {rel: (root / rel).read_bytes() for rel in ("reports/registry/registration.json",
                                                                "custody/links/register.link")}
    try:
        done = _register(root, ctx["env"])
    finally:
        _restore(root, register_outs)  # the tests after this one read the pipeline's own receipt and link
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "unchanged: same registration key" in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
