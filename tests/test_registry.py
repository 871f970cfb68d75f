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
import urllib.request
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from reappreg.card import parse_card
from reappreg.cli import app
from reappreg.errors import GateFailed
from reappreg.hashing import dvc_md5
from reappreg.registry import (
    CONTENT_TAG,
    KEY_TAG,
    STATUS_TAG,
    IntegrityError,
    RegistryUnavailable,
    connect,
    folder_md5,
    load_declarations,
    manifest_of,
    register_version,
    registration_key,
    verify_aliases,
    verify_signature,
    watch_poll,
    watch_webhook,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_card import leak_and_reguard, retrain_policy, write_pipeline  # noqa: E402  (shared fixture builders)

REPO = Path(__file__).resolve().parents[1]
POLICY = "reappraisal-policy-grpo"
RM = "reappraisal-rm-ensemble"


def run_cli(*args: str):
    """Invoke the CLI in-process; returns (exit code, output, exception)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output, result.exception


_TEMPLATES: dict[tuple, Path] = {}


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Builds each pipeline variant (and a migrated empty sqlite store) once per module."""
    base = tmp_path_factory.mktemp("templates")

    def get(**kwargs) -> Path:
        key = tuple(sorted(kwargs.items()))
        if key not in _TEMPLATES:
            root = write_pipeline(base / f"variant{len(_TEMPLATES)}", **kwargs)
            empty_db = base / "empty.db"
            if not empty_db.exists():
                connect(f"sqlite:///{empty_db}", attempts=1, backoff_s=0)  # runs MLflow's migrations once
            cwd = os.getcwd()
            os.chdir(root)  # the stage runs from the repository root with its default paths
            try:
                result = CliRunner(env={"MLFLOW_TRACKING_URI": f"sqlite:///{base / 'cards.db'}"}).invoke(app, ["card", "build"])
            finally:
                os.chdir(cwd)
            assert result.exit_code == 0, (result.output, result.exception)
            (root / "registry").mkdir(exist_ok=True)
            shutil.copy(empty_db, root / "registry/mlflow.db")
            _TEMPLATES[key] = root
        return _TEMPLATES[key]

    return get


def make_repo(tmp_path, monkeypatch, templates, **kwargs) -> Path:
    """A private copy of a pipeline variant, cards built, with its own sqlite store; cwd is its root."""
    root = tmp_path / "repo"
    shutil.copytree(templates(**kwargs), root)
    monkeypatch.chdir(root)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'registry/mlflow.db'}")
    return root


@pytest.fixture
def repo(tmp_path, monkeypatch, templates):
    """A strong, healthy, trusted pipeline (cards built) on a private sqlite store."""
    return make_repo(tmp_path, monkeypatch, templates)


def client_for(root: Path):
    from mlflow import MlflowClient

    uri = os.environ["MLFLOW_TRACKING_URI"]
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def versions(client, name: str) -> list:
    return sorted(client.search_model_versions(f"name='{name}'"), key=lambda v: int(v.version))


def aliases(client, name: str) -> dict[str, str]:
    return {alias: str(v) for alias, v in client.get_registered_model(name).aliases.items()}


def ids(client, name: str) -> list[str]:
    return [str(v.version) for v in versions(client, name)]


def register_ok() -> str:
    code, out, exc = run_cli("registry", "register")
    assert code == 0, (out, exc)
    return out


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
    meta, body = parse_card(card)
    # The description is the card, its front matter fenced so the UI renders it as YAML ...
    assert mv.description.startswith("```yaml\n" + yaml.safe_dump(meta, sort_keys=False))
    shown = mv.description.split("\n```\n", 1)[1]
    if "_(Cut to the registry's" not in shown:
        assert shown == body
    else:  # ... cut at a section heading to fit MLflow's VARCHAR(5000) description column
        kept, note = shown.rsplit("\n\n_(Cut to the registry's 5000-character description limit", 1)
        assert body.startswith(kept) and body[len(kept):].startswith("\n## ") and len(mv.description) <= 5000
        assert f"{POLICY}/README.md of run {mv.run_id}" in note
    import mlflow

    logged = mlflow.artifacts.load_text(f"runs:/{mv.run_id}/{POLICY}/README.md")
    assert logged == card
    assert aliases(client, POLICY) == {"candidate": str(mv.version)}
    receipt = json.loads((repo / "reports/registry/registration.json").read_text())
    assert {r["name"]: r["created"] for r in receipt["registered"]} == {RM: True, POLICY: True}


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
    code, _, exc = run_cli("registry", "register")
    assert code == 1 and isinstance(exc, GateFailed)
    assert "data/guarded/prompts.jsonl has md5" in str(exc) and "refusing to register" in str(exc)
    assert client_for(repo).search_registered_models() == []


def test_registration_refuses_an_artifact_its_training_metrics_do_not_describe(repo):
    (repo / "models/policy/grpo/model.safetensors").write_text("weights copied in by hand")
    code, _, exc = run_cli("registry", "register")
    assert isinstance(exc, GateFailed) and "its training metrics describe" in str(exc)
    assert client_for(repo).search_registered_models() == []


def test_registration_refuses_a_failed_certificate(repo):
    leak_and_reguard(repo)  # a held-out answer copied into the training text: the guard fails
    assert json.loads((repo / "data/guard/certificate.json").read_text())["result"] == "fail"
    code, _, exc = run_cli("registry", "register")
    assert isinstance(exc, GateFailed) and "did not pass" in str(exc)
    assert client_for(repo).search_registered_models() == []


def test_two_concurrent_register_processes_create_exactly_one_version(repo):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [
        subprocess.Popen([sys.executable, "-m", "reappreg", "registry", "register", "--receipt", f"receipt_{i}.json"],
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
    started = time.monotonic()
    code, _, exc = run_cli("registry", "register")
    elapsed = time.monotonic() - started
    assert isinstance(exc, RegistryUnavailable)
    assert "did not answer after 3 attempt(s)" in str(exc) and "Nothing was registered" in str(exc)
    assert elapsed < 60
    assert not (repo / "reports/registry/registration.json").exists()


def _library_registration(client, root: Path, name: str = POLICY, **overrides):
    import mlflow

    from reappreg.tracking import configure

    configure(os.environ["MLFLOW_TRACKING_URI"], "reappraisal-registry", str(root / "registry/mlartifacts"))
    artifact = root / "models/policy/grpo"
    training = {"data/guarded/prompts.jsonl": dvc_md5(root / "data/guarded/prompts.jsonl")}
    with mlflow.start_run():

        def log(folder, artifact_path):
            mlflow.log_artifacts(str(folder), artifact_path)
            return mlflow.get_artifact_uri(artifact_path)

        kwargs = dict(name=name, model_description="test model", artifact_dir=artifact, manifest=manifest_of(artifact),
                      training_md5s=training,
                      tags={"guard.result": "pass"}, card="---\nlicense: x\n---\n# card\n", log_artifacts=log,
                      candidate_alias="candidate", stale_after_s=3600)
        kwargs.update(overrides)
        return register_version(client, **kwargs)


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


# --------------------------------------------------------------------------- promotion and verify


def test_a_version_failing_a_gate_cannot_be_promoted_without_force(tmp_path, monkeypatch, templates):
    root = make_repo(tmp_path, monkeypatch, templates, trusted=False)
    register_ok()
    client = client_for(root)
    code, _, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "looks good")
    assert isinstance(exc, GateFailed) and "judge_trusted (judge.trusted=false)" in str(exc)
    assert "champion" not in aliases(client, POLICY)
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "demo for the lab meeting",
                             "--force", "--actor", "alice")
    assert code == 0, (out, exc)
    assert "FORCED PROMOTION" in out
    mv = client.get_model_version(POLICY, "1")
    assert mv.tags["promotion.champion.forced"] == "true"
    assert mv.tags["promotion.champion.by"] == "alice" and mv.tags["promotion.champion.reason"] == "demo for the lab meeting"
    assert "judge_trusted" in mv.tags["promotion.champion.failed_gates"]
    assert "forced by alice" in client.get_registered_model(POLICY).tags["FORCED.champion"]
    assert aliases(client, POLICY)["champion"] == "1"
    # A forced alias still fails its gates, and verify keeps saying so.
    code, out, _ = run_cli("registry", "verify")
    assert code == 1 and "forced promotion (recorded)" in out


def test_promotion_records_who_when_why_and_verify_passes(repo):
    register_ok()
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "beats the bar", "--actor", "bob")
    assert code == 0, (out, exc)
    tags = client_for(repo).get_model_version(POLICY, "1").tags
    assert tags["promotion.champion.by"] == "bob" and tags["promotion.champion.reason"] == "beats the bar"
    assert tags["promotion.champion.forced"] == "false" and tags["promotion.champion.at"].endswith("+00:00")
    code, out, _ = run_cli("registry", "verify")
    assert code == 0 and "reappraisal-policy-grpo@champion -> v1: passes its gates (promoted with reappreg)" in out


def test_verify_catches_an_alias_set_through_the_client_like_the_ui(tmp_path, monkeypatch, templates):
    root = make_repo(tmp_path, monkeypatch, templates, healthy=False)
    register_ok()
    assert run_cli("registry", "verify")[0] == 0  # only `candidate`, which is ungated
    client_for(root).set_registered_model_alias(POLICY, "production", "1")  # what the UI does
    code, out, _ = run_cli("registry", "verify")
    assert code == 1
    assert "reappraisal-policy-grpo@production -> v1: FAILS healthy_training (training.healthy=false)" in out
    assert "set outside `reappreg registry promote`" in out
    # The watcher on a sqlite store polls (no server to send webhooks) and fails the same way.
    code, out, _ = run_cli("registry", "watch", "--max-polls", "1")
    assert code == 1 and "watching by polling" in out and "VIOLATION reappraisal-policy-grpo@production" in out


def test_poll_watcher_reports_a_ui_alias_once(tmp_path, monkeypatch, templates):
    root = make_repo(tmp_path, monkeypatch, templates, healthy=False)
    register_ok()
    client = client_for(root)
    decl = load_declarations(root / "registry/models.yaml")
    naps = []

    def sleep(seconds):
        naps.append(seconds)
        if len(naps) == 1:
            client.set_registered_model_alias(POLICY, "production", "1")

    reported = []
    found = watch_poll(lambda: verify_aliases(client, decl), interval_s=5, max_polls=3, report=reported.append, sleep=sleep)
    assert naps == [5, 5]  # bounded: three polls, two waits
    assert [(f.alias, f.version) for f in reported] == [("production", "1")]
    assert found == reported


# --------------------------------------------------------------------------- pull


def test_pull_verifies_every_file_and_prints_the_card(repo, tmp_path):
    register_ok()
    code, out, exc = run_cli("registry", "pull", f"{POLICY}@candidate", "--to", str(tmp_path / "pulled"))
    assert code == 0, (out, exc)
    assert dvc_md5(tmp_path / "pulled") == dvc_md5(repo / "models/policy/grpo")
    assert "# reappraisal-policy-grpo" in out and "every hash verified" in out
    code, _, _ = run_cli("registry", "pull", f"{RM}/1", "--to", str(tmp_path / "rm"))
    assert code == 0 and dvc_md5(tmp_path / "rm") == dvc_md5(repo / "models/rm/ensemble")


def test_a_tampered_artifact_makes_pull_fail_and_leave_nothing_behind(repo, tmp_path):
    register_ok()
    source = client_for(repo).get_model_version(POLICY, "1").source
    stored = Path(source.removeprefix("file://")) / "model.safetensors"
    stored.write_text("weights swapped in the artifact store")
    target = tmp_path / "pulls" / "policy"
    target.parent.mkdir()
    code, _, exc = run_cli("registry", "pull", f"{POLICY}/1", "--to", str(target))
    assert isinstance(exc, IntegrityError)
    assert "model.safetensors: md5" in str(exc) and "partial download was deleted" in str(exc)
    assert list(target.parent.iterdir()) == []  # neither the target nor a partial download


def test_pull_refuses_a_bad_spec_and_a_non_empty_target(repo, tmp_path):
    register_ok()
    assert "expected NAME@ALIAS or NAME/VERSION" in str(run_cli("registry", "pull", POLICY)[2])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    exc = run_cli("registry", "pull", f"{POLICY}/1", "--to", str(tmp_path / "full"))[2]
    assert "not empty" in str(exc) and (tmp_path / "full" / "keep.txt").read_text() == "mine"


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow_server(tmp: Path, *, webhooks: bool = False) -> tuple[subprocess.Popen, str]:
    """``mlflow server`` on loopback with a sqlite backend and proxied artifacts under ``tmp``."""
    port = free_port()
    env = {**os.environ}
    env.pop("MLFLOW_TRACKING_URI", None)
    if webhooks:
        # The server's SSRF policy: allow plain http and loopback for a local listener.
        # The server caches each event's webhook list (60 s by default); keep it short so a
        # webhook created after an earlier alias event is used at once.
        env.update(MLFLOW_WEBHOOK_ALLOWED_SCHEMES="http,https", MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS="true",
                   MLFLOW_WEBHOOK_CACHE_TTL="1")
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(
        [str(mlflow_bin), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}", "--artifacts-destination", str(tmp / "server-artifacts")],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited: {(tmp / 'server.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"mlflow server did not come up: {(tmp / 'server.log').read_text()[-2000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=3)  # the server holds no state a test needs; do not wait on its shutdown
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


_SERVER: dict = {}


@pytest.fixture
def mlflow_server(request, tmp_path_factory) -> str:
    """One ``mlflow server`` (webhooks allowed to loopback) per session, shared by the remote and
    browser tests; a module-level cache rather than a session fixture because tests/conftest.py
    is not this module's to edit, and a fixture imported into two modules would start two servers."""
    if "url" not in _SERVER:
        tmp = tmp_path_factory.mktemp("mlflow-server")
        connect(f"sqlite:///{tmp / 'server.db'}", attempts=1, backoff_s=0)  # migrate in-process: the server starts faster
        proc, url = start_mlflow_server(tmp, webhooks=True)
        _SERVER.update(url=url, proc=proc)
        request.session.addfinalizer(lambda: stop_server(_SERVER.pop("proc")) if "proc" in _SERVER else None)
    return _SERVER["url"]


def make_unique_policy(root: Path) -> None:
    """Distinct policy weights, so tests sharing one server register their own version."""
    retrain_policy(root, f"policy-weights-{os.urandom(8).hex()}")


def registered_version(root: Path, name: str, receipt: str = "reports/registry/registration.json") -> str:
    return next(r["version"] for r in json.loads((root / receipt).read_text())["registered"] if r["name"] == name)


@pytest.mark.slow
def test_remote_server_register_pull_and_webhook_watch(tmp_path, monkeypatch, templates, mlflow_server):
    url = mlflow_server
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
    code, out, exc = run_cli("registry", "pull", f"{POLICY}/{version}", "--to", str(tmp_path / "pulled"))
    assert code == 0, (out, exc)
    assert dvc_md5(tmp_path / "pulled") == dvc_md5(root / "models/policy/grpo")

    # Webhook watcher: the server posts alias events to a loopback listener.
    decl = load_declarations(root / "registry/models.yaml")
    ready = threading.Event()
    reported, result = [], {}

    def watch():
        result["findings"] = watch_webhook(connect(url, attempts=3, backoff_s=0.5), decl, listen_host="127.0.0.1",
                                           listen_port=0, public_url=None, duration_s=60, max_events=2,
                                           report=reported.append, on_ready=lambda _: ready.set())

    thread = threading.Thread(target=watch)
    thread.start()
    assert ready.wait(30)
    client.set_registered_model_alias(RM, "reviewed", registered_version(root, RM))  # passes the RM's gates
    client.set_registered_model_alias(POLICY, "production", version)               # unhealthy policy: fails
    thread.join(90)
    assert not thread.is_alive()
    assert [(f.name, f.alias, f.version) for f in result["findings"]] == [(POLICY, "production", version)]
    assert reported == result["findings"]
    assert list(client.list_webhooks()) == []  # the watcher removed its webhook
