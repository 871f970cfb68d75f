"""The registry tests' planted pipeline and servers, shared by the registry and browser test modules
(fixtures imported into conftest.py): every input of the register stage written through the file
contracts it reads, claims bound to a dvc.lock as `dvc repro` leaves them, and an MLflow server."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from reappreg.cli import app
from reappreg.hashing import dvc_md5
from reappreg.registry import connect
from stage_commands import stage_argv

REPO = Path(__file__).resolve().parents[1]
POLICY = "reappraisal-policy-grpo"
RM = "reappraisal-rm-ensemble"


def run_cli(*args: str):
    """Invoke the CLI in-process; returns (exit code, output, exception)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output, result.exception


# --------------------------------------------------------------------------- a fake-but-real pipeline
# Every input of the register stage, written through the file contracts it reads (certificate,
# metrics/eval.json, claims, calibration, metrics folders, cards), so these tests do not depend
# on how the guard, stats or card stages produce them today.

VIGNETTES = ["v1", "v2", "v3", "v4", "v5", "v6"]


def jsonl_file(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def json_file(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, sort_keys=True, indent=1), encoding="utf-8")


def write_pipeline(root: Path, *, trusted: bool = True, healthy: bool = True, promotable: bool = True) -> Path:
    from reappreg.guard.certified import CERTIFICATE_SCHEMA

    root.mkdir(parents=True, exist_ok=True)
    from reappreg.settings import Params

    # The schema's defaults (the CPU profile): independent of params.yaml edits in flight. No kept
    # checkpoints here (add_kept_checkpoint adds one, with everything registering it reads).
    params = Params().model_dump(by_alias=True)
    params["policy"]["train"]["checkpoint_steps"] = []
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=True), encoding="utf-8")
    shutil.copytree(REPO / "registry", root / "registry", ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts", "mlruns"))
    (root / "pipelines/prompts").mkdir(parents=True)
    shutil.copy(REPO / "pipelines/prompts/grpo_prompt.yaml", root / "pipelines/prompts/grpo_prompt.yaml")
    (root / "data/prompts").mkdir(parents=True)  # the copy the policy_prompts stage makes (what dvc.yaml passes)
    shutil.copy(REPO / "pipelines/prompts/grpo_prompt.yaml", root / "data/prompts/grpo_prompt.yaml")
    jsonl_file(root / "data/guarded/vignettes.jsonl", [{"vignette_id": v, "scenario": f"Your friend {v} forgot your birthday."} for v in VIGNETTES])
    jsonl_file(root / "data/guarded/reappraisals.jsonl", [{"reappraisal_id": f"r{i}", "vignette_id": "v1", "text": f"Maybe they were busy {i}."} for i in range(3)])
    jsonl_file(root / "data/guarded/prompts.jsonl", [{"prompt_id": f"p{v}", "vignette_id": v, "prompt": f"Reappraise {v}."} for v in VIGNETTES])
    jsonl_file(root / "data/train/ratings.jsonl", [{"rating_id": "x1", "reappraisal_id": "r0", "effectiveness": 5}])
    jsonl_file(root / "data/heldout/answers.jsonl", [{"answer_id": "h0", "vignette_id": "v1", "text": "held out"}])
    guarded = ["data/guarded/vignettes.jsonl", "data/guarded/reappraisals.jsonl", "data/guarded/prompts.jsonl"]
    json_file(root / "data/guard/certificate.json", {
        "schema": CERTIFICATE_SCHEMA, "result": "pass",
        "heldout": {"path": "data/heldout/answers.jsonl", "md5": dvc_md5(root / "data/heldout/answers.jsonl")},
        "training": [{"path": p.replace("guarded", "train"), "md5": dvc_md5(root / p), "guarded_path": p,
                      "guarded_md5": dvc_md5(root / p)} for p in guarded],
    })
    for folder, files in {
        "models/rm/ensemble": {"ensemble.json": '{"seeds": [0, 1, 2]}', "head_seed0.safetensors": "w0", "head_seed1.safetensors": "w1"},
        "models/policy/base": {"config.json": '{"base": true}', "model.safetensors": "base-weights"},
        "models/policy/grpo": {"config.json": '{"grpo": true}', "model.safetensors": "policy-weights", "tokenizer/tokenizer.json": "{}"},
    }.items():
        for rel, text in files.items():
            (root / folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / rel).write_text(text, encoding="utf-8")
    json_file(root / "metrics/rm/ensemble.json", {"k": 0.5, "holdout": {"ranking": {"pairwise_accuracy": 0.67}},
                                              "beats_length_baseline": {"passed": True, "cluster_low": 0.05},
                                              "a_key_added_later": {"x": 1}})
    json_file(root / "metrics/policy/train.json", {"global_step": 6, "healthy": healthy, "model_md5": dvc_md5(root / "models/policy/grpo"),
                                               "final": {"format_gate_hit_rate": 0.1, "truncation_rate": 0.05}})
    agreement = 0.9 if trusted else 0.55
    json_file(root / "metrics/judge_calibration.json", {
        "judge_model": "judge-test", "judge_fingerprint": "fp-test", "n_pairs": 200, "agreement": agreement,
        "agreement_low": agreement - 0.05, "agreement_high": agreement + 0.05, "position_bias_A": 0.05, "position_bias_B": 0.05,
        "order_consistency": 0.9, "unparseable_rate": 0.0, "min_agreement": 0.65, "min_pairs": 20, "trusted": trusted,
        "new_field": [1, 2]})
    prefix = "policy/gpt-4-0314"
    json_file(root / "metrics/eval.json", {"judge/max_position_bias": 0.2, "judge/max_unparseable_rate": 0.1,
                                       "judge/min_agreement_applied": 0.65, "judge/min_pairs_applied": 20,
                                       "judge/trusted": 1 if trusted else 0,
f"{prefix}/n": 300, f"{prefix}/win_rate": 0.9, f"{prefix}/cluster_low": 0.8,
                                       f"{prefix}/iid_low": 0.86, f"{prefix}/n_eff": 250.0, f"{prefix}/n_clusters": 6})
    json_file(root / "reports/claims.json", [{
        "claim_id": "bar/policy/gpt-4-0314", "kind": "bar", "condition": "policy", "opponent": "gpt-4-0314", "threshold": 0.5,
        "statement": "beats the bar", "metric_refs": [f"{prefix}/cluster_low"], "supported": True, "status": "supported",
        "reason": "cluster CI lower bound above the bar", "flags": [], "judge_model": "judge-test", "extra": {"added": True},
    }])
    json_file(root / "metrics/results.json", {"rows": [], "selection": {"selected": "policy", "promotable": promotable,
                                                                     "reason": "planted"}})
    for name in (POLICY, RM):
        path = root / "reports/cards" / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nlicense: apache-2.0\n{CLEAN_REVISION}---\n# {name}\n\nA card.\n\n## Evaluation\n\nNumbers.\n",
                        encoding="utf-8")
    bind_claims_to_lock(root)
    return root


STATS_READS = ("judgments", "calibration", "generations", "answers", "vignettes", "models")


def stats_paths() -> dict[str, str]:
    """Role -> path of what the stats stage reads, from this repo's dvc.yaml."""
    tokens = shlex.split(yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["stats"]["cmd"])
    return {tok[2:]: tokens[i + 1] for i, tok in enumerate(tokens[:-1]) if tok[2:] in STATS_READS}


def bind_claims_to_lock(root: Path, *, judge_wrote: str | None = None, sign: bool = True) -> None:
    """What `dvc repro` leaves behind: each claim stamped with the md5 of every file the stats stage read,
    and a dvc.lock recording the stats stage (its command, those deps, the claims it wrote) and the judge
    stage that wrote the judgments (``judge_wrote``: another md5, as if the judgments were swapped).
    ``sign=False``: the lock rewritten by someone without a pipeline key (the custody links stay as signed)."""
    paths = stats_paths()
    for role, rel in paths.items():
        if not (root / rel).exists():
            jsonl_file(root / rel, [{"planted": role}])
    md5s = {role: dvc_md5(root / rel) for role, rel in paths.items()}
    claims = json.loads((root / "reports/claims.json").read_text())
    for claim in claims:
        claim["inputs"] = dict(md5s)
    json_file(root / "reports/claims.json", claims)
    stats_cmd = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["stats"]["cmd"]
    lock = {"schema": "2.0", "stages": {
        "judge": {"cmd": "reappreg judge run", "outs": [{"path": paths["judgments"], "md5": judge_wrote or md5s["judgments"]}]},
        "stats": {"cmd": stats_cmd, "deps": [{"path": rel, "md5": md5s[role]} for role, rel in paths.items()],
                  "outs": [{"path": "reports/claims.json", "md5": dvc_md5(root / "reports/claims.json")}]}}}
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    record_outputs(root, sign=sign)


# The stages that write the files registration reads as evidence, as `dvc repro` records them in dvc.lock
# (besides `stats` and `judge`, which bind_claims_to_lock records with their commands and deps).
EVIDENCE_OUTS = {
    "guard": ["data/guard/certificate.json"],
    "judge_calibrate": ["metrics/judge_calibration.json"],
    "results": ["metrics/results.json"],
    "policy_prompts": ["pipelines/prompts/grpo_prompt.yaml", "data/prompts/grpo_prompt.yaml"],
    "card": ["reports/cards"],
}


# The planted pipeline's custody: the stages that wrote its files, as one "upstream" step and the card step,
# then register consuming them, each with a link signed by this clone's local key (reappreg.custody).
PLANTED_UPSTREAM = ["data/guarded", "data/train/ratings.jsonl", "data/heldout/answers.jsonl", "data/guard/certificate.json",
                    "models/rm/ensemble", "models/policy/base", "models/policy/grpo", "models/policy/checkpoints",
                    "metrics/rm", "metrics/policy", "metrics/eval.json", "metrics/judge_calibration.json",
                    "metrics/results.json", "reports/claims.json", "pipelines/prompts/grpo_prompt.yaml",
                    "data/prompts/grpo_prompt.yaml", "data/eval"]


def plant_custody(root: Path) -> None:
    """Signed links for the planted pipeline as `dvc repro` would leave them (steps: the declarations, the
    upstream stages as one step, the card stage; register consuming their products), and this clone's
    signed layout. Called again whenever the planted pipeline "re-ran"."""
    from reappreg.custody.layout import sign_layout
    from reappreg.custody.links import _in, pipeline_signing, record, sign_link
    from reappreg.custody.plan import DECLARATIONS_FILE, StepPlan, declarations_step, link_path, render

    def pattern(path: str) -> str:
        return f"{path}/*" if (root / path).is_dir() else path

    upstream = [p for p in PLANTED_UPSTREAM if (root / p).exists()]
    register_reads = [*upstream, "reports/cards", DECLARATIONS_FILE]
    steps = [declarations_step(),
             StepPlan("upstream", ["planted"], [], upstream, [], [["DISALLOW", "*"]],
                      [*(["ALLOW", pattern(p)] for p in upstream), ["DISALLOW", "*"]]),
             StepPlan("card", ["reappreg", "card", "build"], [], ["reports/cards"], [], [["DISALLOW", "*"]],
                      [["ALLOW", "reports/cards/*"], ["DISALLOW", "*"]]),
             StepPlan("register", ["reappreg", "registry", "register"], register_reads, [], [],
                      [*(["MATCH", pattern(p), "WITH", "PRODUCTS", "FROM", "upstream"] for p in upstream),
                       ["MATCH", "reports/cards/*", "WITH", "PRODUCTS", "FROM", "card"],
                       ["MATCH", DECLARATIONS_FILE, "WITH", "PRODUCTS", "FROM", "declarations"], ["DISALLOW", "*"]],
                      [["DISALLOW", "*"]])]
    (root / "registry/custody").mkdir(parents=True, exist_ok=True)
    (root / "registry/custody/layout.json").write_text(render(steps))
    signing = pipeline_signing(root)
    with _in(root):
        for name, products in (("upstream", record(upstream)), ("card", record(["reports/cards"]))):
            path = root / link_path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(sign_link(signing, name, materials={}, products=products, command=["planted"],
                                       environment={"trust": signing.version.as_dict()}))
    sign_layout(root, signing, reason="the planted pipeline's owner")


def record_outputs(root: Path, *, sign: bool = True) -> None:
    """What `dvc repro` leaves in dvc.lock after every stage ran: the md5 of each evidence file (and of
    the cards folder) as the stage that wrote it recorded it. One stage per metrics file, as the
    rm_train@…/rm_ensemble/policy_train stages each write one."""
    lock = yaml.safe_load((root / "dvc.lock").read_text()) if (root / "dvc.lock").exists() else {"schema": "2.0", "stages": {}}
    stages = lock.setdefault("stages", {})
    planned = {name: [p for p in paths if (root / p).exists()] for name, paths in EVIDENCE_OUTS.items()}
    for folder in ("metrics/rm", "metrics/policy"):
        for file in sorted((root / folder).glob("*.json")) if (root / folder).is_dir() else []:
            planned[f"write_{folder.split('/')[1]}@{file.stem}"] = [f"{folder}/{file.name}"]
    for name, paths in planned.items():
        if paths:
            stages.setdefault(name, {"cmd": f"reappreg {name}"})["outs"] = [{"path": p, "md5": dvc_md5(root / p)}
                                                                           for p in paths]
    if "stats" in stages:
        eval_json = {"path": "metrics/eval.json", "md5": dvc_md5(root / "metrics/eval.json")}
        stages["stats"]["outs"] = [o for o in stages["stats"].get("outs", []) if o["path"] != "metrics/eval.json"] + [eval_json]
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    if sign:  # the pipeline key signs each step's link, as a `dvc repro` run does
        plant_custody(root)


def plant_stage_runs(root: Path) -> None:
    """The finished generate, judge and stats runs `dvc repro` leaves in the tracking store (the
    current ``MLFLOW_TRACKING_URI``, else the repo's own), each tagged with the md5 of what it
    wrote, as ``registry.lineage.check_tracked_lineage`` looks for them. Run with cwd = ``root``."""
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    tracking = load_params(root / "params.yaml").tracking
    paths = {role: root / rel for role, rel in stats_paths().items()}
    with stage_run("generate", tracking=tracking, outputs={"generations": paths["generations"]}):
        pass
    with stage_run("judge", tracking=tracking, inputs={"generations": paths["generations"]},
                   outputs={"judgments": paths["judgments"]}):
        pass
    with stage_run("stats", tracking=tracking, inputs=paths, outputs={"claims": root / "reports/claims.json"}):
        pass


# What `reappreg card build` records in a card's front matter on a committed tree.
CLEAN_REVISION = ("reappreg:\n  revision: {git_commit: 0123abc, git_dirty: 'false', dirty_paths: [], "
                  "dirty_allowed: false}\n")


def retrain_policy(root: Path, weights: str) -> None:
    """New policy weights, and training metrics that describe them (as the training stage writes)."""
    (root / "models/policy/grpo/model.safetensors").write_text(weights)
    metrics = json.loads((root / "metrics/policy/train.json").read_text())
    metrics["model_md5"] = dvc_md5(root / "models/policy/grpo")
    json_file(root / "metrics/policy/train.json", metrics)


def fail_guard(root: Path) -> None:
    cert = json.loads((root / "data/guard/certificate.json").read_text())
    cert["result"] = "fail"
    json_file(root / "data/guard/certificate.json", cert)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow_server(tmp: Path, *, webhooks: bool = False, backend: str | None = None) -> tuple[subprocess.Popen, str]:
    """``mlflow server`` on loopback with a sqlite (or ``backend``) store and proxied artifacts under ``tmp``."""
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
         "--backend-store-uri", backend or f"sqlite:///{tmp / 'server.db'}", "--artifacts-destination", str(tmp / "server-artifacts")],
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


@pytest.fixture(scope="session")
def webhook_mlflow_server(tmp_path_factory):
    """One ``mlflow server`` (webhooks allowed to loopback) per test process, shared by the remote and browser
    tests (imported into conftest.py, so one definition and one server)."""
    from reappreg.registry import connect

    tmp = tmp_path_factory.mktemp("mlflow-server")
    connect(f"sqlite:///{tmp / 'server.db'}", attempts=1, backoff_s=0)  # migrate in-process: the server starts faster
    proc, url = start_mlflow_server(tmp, webhooks=True)
    try:
        yield url
    finally:
        stop_server(proc)


def make_unique_policy(root: Path) -> None:
    """Distinct policy weights, so tests sharing one server register their own version."""
    retrain_policy(root, f"policy-weights-{os.urandom(8).hex()}")


def registered_version(root: Path, name: str, receipt: str = "reports/registry/registration.json") -> str:
    return next(r["version"] for r in json.loads((root / receipt).read_text())["registered"] if r["name"] == name)


# --------------------------------------------------------------------------- a private registry per test
# Shared by the registry test modules (imported there, so each module's fixtures are its own).

_TEMPLATES: dict[tuple, Path] = {}


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Builds each pipeline variant (and a migrated empty sqlite store) once per module."""
    base = tmp_path_factory.mktemp("templates")

    def get(**kwargs) -> Path:
        key = tuple(sorted(kwargs.items()))
        if key not in _TEMPLATES:
            # A fresh folder per attempt: a variant that failed half-built must fail again with its own error.
            root = write_pipeline(Path(tempfile.mkdtemp(prefix="variant", dir=base)), **kwargs)
            empty_db = base / "empty.db"
            if not empty_db.exists():
                connect(f"sqlite:///{empty_db}", attempts=1, backoff_s=0)  # runs MLflow's migrations once
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
    monkeypatch.delenv("REAPPREG_SIGNING_KEY", raising=False)  # this clone's local key signs
    plant_stage_runs(root)
    return root


@pytest.fixture
def repo(tmp_path, monkeypatch, templates):
    """A strong, healthy, trusted pipeline (cards built) on a private sqlite store."""
    return make_repo(tmp_path, monkeypatch, templates)


@pytest.fixture(scope="module")
def postgres_registry(tmp_path_factory, postgres_server):
    """One ``mlflow server`` on a PostgreSQL database for this module's attack tests (each starts it empty)."""
    from conftest import _new_postgres_db

    tmp = tmp_path_factory.mktemp("pg-registry")
    proc, url = start_mlflow_server(tmp, backend=_new_postgres_db(postgres_server))
    try:
        yield url
    finally:
        stop_server(proc)


def _empty_registry(url: str) -> None:
    """Every registered model deleted (their versions, aliases, history tags and lock models with them)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=url, registry_uri=url)
    while models := client.search_registered_models(max_results=1000):
        for model in models:
            client.delete_registered_model(model.name)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request) -> str | None:
    """Where an attack test's registry lives: this clone's sqlite file (None), or the URL of an
    ``mlflow server`` backed by PostgreSQL, as a team runs it."""
    if request.param == "sqlite":
        return None
    url = request.getfixturevalue("postgres_registry")
    _empty_registry(url)
    return url


def on_store(root: Path, store: str | None, monkeypatch) -> Path:
    if store is not None:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
        plant_stage_runs(root)   # the stage runs live in the store the stages tracked to
    return root


@pytest.fixture
def store_repo(repo, store, monkeypatch) -> Path:
    """``repo`` with its registry on each store in turn."""
    return on_store(repo, store, monkeypatch)


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


def register_after_pipeline():
    """`registry register` as the register stage runs it: after the stages that wrote the evidence
    recorded it in dvc.lock (as `dvc repro` leaves it)."""
    record_outputs(Path.cwd())
    return run_cli(*stage_argv("register"))


def register_ok() -> str:
    code, out, exc = register_after_pipeline()
    assert code == 0, (out, exc)
    return out


def trust_of(root: Path):
    """The trust a command run in ``root`` uses (the team root if any, this clone's local one-key root)."""
    from reappreg.registry.stage import RegistryFiles, load_trust_for
    from reappreg.settings import load_params

    files = RegistryFiles(models=root / "registry/models.yaml", keys=root / "registry/keys",
                          local_keys=root / "work/registry/keys")
    return load_trust_for(load_params(root / "params.yaml"), files)


def session_of(root: Path, *, signing: bool = False, uri: str | None = None):
    """The RegistrySession a command run in ``root`` opens (its trust, its memory of the heads)."""
    from reappreg.registry.stage import RegistryFiles, open_session
    from reappreg.settings import load_params

    uri = uri or os.environ["MLFLOW_TRACKING_URI"]
    files = RegistryFiles(models=root / "registry/models.yaml", keys=root / "registry/keys",
                          local_keys=root / "work/registry/keys")
    return open_session(load_params(root / "params.yaml"), files, connect(uri, attempts=3, backoff_s=0.5), uri,
                        signing=signing)


def two_good_policy_versions(root: Path) -> tuple[str, str]:
    """v1 and v2 of a healthy policy, v2 promoted to champion over v1 (both signed and passing)."""
    register_ok()
    first = registered_version(root, POLICY)
    assert run_cli("registry", "promote", POLICY, first, "--alias", "champion", "--reason", "first")[0] == 0
    retrain_policy(root, "better-weights")
    register_ok()
    second = registered_version(root, POLICY)
    assert second != first
    assert run_cli("registry", "promote", POLICY, second, "--alias", "champion", "--reason", "better")[0] == 0
    return first, second


def run_verify() -> tuple[int, str]:
    code, out, _ = run_cli("registry", "verify")
    return code, out

