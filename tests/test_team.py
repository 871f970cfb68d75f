"""Working as a team: two DVC remotes behind two access boundaries, on a real S3 API.

The static test checks dvc.yaml's routing; the slow walk-through uses the one shared
pipeline run (`pipeline_repo`): repo A pushes to both remotes and tags the registered
versions for GTO; a fresh clone B with only the `train` credentials pulls, finds every
training-side stage up to date, fetches the registered RM with `dvc artifacts get`, and cannot
read a single held-out object; A's maintainer registers the RM on the team MLflow server
(basic auth, PostgreSQL, S3 artifacts) with a team key, and B's READ account pulls it through
the server, verified against the signed statement, and is refused once a stored byte changes;
an auditor clone with `heldout` read access re-runs the guard audit.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline_copy import REPO, run_checked

HELDOUT = "heldout"
# Outputs that hold held-out answers or the secrets that protect them (the sketch key lets
# whoever holds it test guesses against the published sketch).
MUST_BE_HELDOUT = {
    "data/canonical", "data/heldout/answers.jsonl", "data/guard/quarantine.jsonl",
    "data/heldout/sketch.key", "data/guard_secret", "data/eval/judgments.jsonl",
}


def _outs(dvc_yaml: Path) -> dict[str, dict]:
    """Every cached output of every stage: path -> {stage, remote, cache}."""
    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    found = {}
    for name, stage in stages.items():
        for kind in ("outs", "metrics", "plots"):
            for out in stage.get(kind) or []:
                path, opts = (out, {}) if isinstance(out, str) else next(iter(out.items()))
                found[path] = {"stage": name, "remote": (opts or {}).get("remote"), "cache": (opts or {}).get("cache", True)}
    return found


def _default_remote(repo: Path) -> str:
    out = subprocess.run(["dvc", "config", "core.remote"], cwd=repo, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_heldout_outputs_and_secrets_route_to_the_heldout_remote():
    outs = _outs(REPO / "dvc.yaml")
    assert _default_remote(REPO) == "train", "the default remote must be the training-side one"
    for path in MUST_BE_HELDOUT:
        assert path in outs, f"{path} is no longer a dvc.yaml output: update this list"
        assert outs[path]["remote"] == HELDOUT, f"{path} would be pushed to the training remote"
    remotes = {o["remote"] for o in outs.values()} - {None}
    assert remotes <= {"train", HELDOUT}, f"unknown remotes in dvc.yaml: {remotes}"


def _heldout_texts(root: Path) -> list[str]:
    from reappreg.io import read_jsonl

    return [r["text"] for r in read_jsonl(root / "data/heldout/answers.jsonl")]


def _holds_heldout_text(text: str, answers: list[str]) -> bool:
    """A held-out answer, or any 60-character passage of one, verbatim after whitespace and
    case folding. The pipeline's own outputs copy, they do not disguise, so verbatim is the
    right test here; the guard's detectors cover disguised copies in training text."""
    flat = " ".join(text.split()).casefold()
    for answer in answers:
        a = " ".join(answer.split()).casefold()
        windows = [a] if len(a) <= 60 else [a[i : i + 60] for i in range(0, len(a) - 59, 30)]
        if any(w in flat for w in windows):
            return True
    return False


def _text_of(data: bytes) -> str | None:
    if b"\0" in data[:4096]:
        return None  # binary (weights, arrays)
    return data.decode("utf-8", errors="replace")


@pytest.mark.slow
def test_every_output_with_heldout_text_routes_to_heldout(pipeline_repo):
    """Scan what the pipeline actually wrote: any output holding held-out text must route to
    the heldout remote (the list above can then never fall behind the pipeline)."""
    root, _ = pipeline_repo
    answers = _heldout_texts(root)
    offenders = []
    for path, info in _outs(root / "dvc.yaml").items():
        target = root / path
        files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
        for f in files:
            if f.stat().st_size > 20_000_000:
                continue  # weights
            text = _text_of(f.read_bytes())
            if text is not None and _holds_heldout_text(text, answers) and info["remote"] != HELDOUT and info["cache"]:
                offenders.append(f"{f.relative_to(root)} (stage {info['stage']}, remote {info['remote'] or 'default'})")
    assert not offenders, "held-out text would be pushed to the training remote:\n" + "\n".join(offenders)


# ----------------------------------------------------------------------------- the walk-through


@pytest.fixture(scope="module")
def s3_team(tmp_path_factory):
    pytest.importorskip("moto")
    from team_services import S3Team

    team = S3Team.start(tmp_path_factory.mktemp("s3") / "moto.log")
    try:
        yield team
    finally:
        team.stop()


def _training_side_stages(root: Path) -> list[str]:
    """Stages that neither read nor write anything routed to the heldout remote."""
    outs = _outs(root / "dvc.yaml")
    heldout_paths = {p for p, o in outs.items() if o["remote"] == HELDOUT}
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    keep = []
    for name, entry in lock.items():
        paths = [d["path"] for d in entry.get("deps", [])] + [o["path"] for o in entry.get("outs", [])]
        if not any(p == h or p.startswith(h + "/") for p in paths for h in heldout_paths):
            keep.append(name)
    return keep


def _all_objects(client, bucket: str) -> list[str]:
    keys, token = [], None
    while True:
        kwargs = {"Bucket": bucket, **({"ContinuationToken": token} if token else {})}
        page = client.list_objects_v2(**kwargs)
        keys += [o["Key"] for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return keys
        token = page["NextContinuationToken"]


def _lock_md5(root: Path, path: str) -> str:
    for entry in yaml.safe_load((root / "dvc.lock").read_text())["stages"].values():
        for out in entry.get("outs", []):
            if out["path"] == path:
                return out["md5"]
    raise AssertionError(f"{path} is not an output in {root / 'dvc.lock'}")


def _paths_the_certificate_names(certificate: Path) -> list[str]:
    """Every file a guard certificate names: the training sources and their guarded copies,
    the held-out set, quarantine and sketch, and each repo-local tokenizer's files."""
    cert = yaml.safe_load(certificate.read_text())  # JSON is YAML
    paths = [cert["heldout"]["path"], cert["quarantine"]["path"], cert["sketch"]["path"]]
    for entry in cert["training"]:
        paths += [entry["path"], *([entry["guarded_path"]] if entry.get("guarded_path") else [])]
    for view in cert["tokenizers"]:
        if not view["spec"].startswith("pkg:"):  # an installed package's files are not in the repo
            paths += [f"{view['spec']}/{name}" for name in view["files"]]
    return list(dict.fromkeys(paths))


RM = "reappraisal-rm-ensemble"


def _register_rm_on_team_server(root: Path, env: dict, tmp_path: Path) -> str:
    """The maintainer's side of step 4: a team key (its public half committed, so every clone
    trusts it), then the pipeline's own `register` command against the team server. Only the RM
    is registered: the policy would add minutes of upload and download and prove nothing more."""
    key = tmp_path / "maintainer-key" / "signing-key.pem"
    from reappreg.trust.keys import key_id, load_public

    run_checked(["reappreg", "registry", "keygen", str(key)], root, env)
    public = key.with_name("signing-key.pub.pem")
    # The team's first root: the maintainer's key holds every role but one (a real team names more keys
    # and thresholds); committed, every clone pins it on first use. The pipeline already ran, its
    # links signed by the key of the machine that ran it: the root names that key for the `pipeline`
    # role, and the maintainer signs the layout under the new root (docs/trust.md, "From local to team").
    runner = root / "work/registry/keys/local-signing-key.pub.pem"
    signed_env = {**env, "REAPPREG_SIGNING_KEY": str(key)}
    made = run_checked(["reappreg", "registry", "keys", "init", "--root", str(public), "--online", str(public),
                        "--role", f"pipeline={runner}"], root, signed_env)
    assert "team root v1 written" in made, made
    run_checked(["reappreg", "registry", "keys", "sign-layout", "--reason", "first team root"], root, signed_env)
    run_checked(["git", "add", "registry/keys", "registry/custody"], root, env)
    run_checked(["git", "commit", "-qm", "team signing key; layout signed under it"], root, env)
    models = yaml.safe_load((root / "registry/models.yaml").read_text())
    models["models"] = {RM: models["models"][RM]}
    rm_only = tmp_path / "rm-only.yaml"
    rm_only.write_text(yaml.safe_dump(models, sort_keys=False))
    cmd = shlex.split(yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["register"]["cmd"])
    for option, value in (("--models", str(rm_only)), ("--receipt", str(tmp_path / "team-registration.json"))):
        cmd[cmd.index(option) + 1] = value
    run_checked(cmd, root, signed_env)
    return key_id(load_public(public))


@pytest.mark.slow
def test_team_walkthrough_train_clone_pulls_and_cannot_read_heldout(pipeline_repo, s3_team, team_mlflow, tmp_path):
    from botocore.exceptions import ClientError

    from team_services import BUCKETS

    root, ctx = pipeline_repo
    env = {**ctx["env"], "AWS_DEFAULT_REGION": "us-east-1"}
    # 1. Repo A publishes: lock and small outputs in git, data to both remotes, and GTO tags
    #    for the versions the pipeline registered (`dvc artifacts get` resolves names by them).
    run_checked(["git", "add", "-A"], root, env)
    subprocess.run(["git", "commit", "-qm", "pipeline outputs"], cwd=root, env=env, capture_output=True)
    s3_team.configure_dvc(root, "maintainer", ("train", "heldout"), env)
    run_checked(["dvc", "push"], root, env)
    tagged = run_checked(["reappreg", "registry", "tag"], root, env)
    assert "tagged rm-ensemble@v" in tagged and "tagged policy-grpo@v" in tagged, tagged
    maintainer = s3_team.client("maintainer")
    assert _all_objects(maintainer, BUCKETS["heldout"]), "nothing reached the heldout remote"
    answers = _heldout_texts(root)
    for key in _all_objects(maintainer, BUCKETS["train"]):
        # Binary objects (weights) are told by their first 4 KiB; only text is read whole.
        head = maintainer.get_object(Bucket=BUCKETS["train"], Key=key, Range="bytes=0-4095")["Body"].read()
        if _text_of(head) is None:
            continue
        text = _text_of(maintainer.get_object(Bucket=BUCKETS["train"], Key=key)["Body"].read())
        assert not (text and _holds_heldout_text(text, answers)), f"train remote object {key} holds held-out text"

    # 2. Fresh clone B with the train credentials only.
    clone = tmp_path / "clone-b"
    run_checked(["git", "clone", "-q", str(root), str(clone)], tmp_path, env)
    s3_team.configure_dvc(clone, "trainer", ("train", "heldout"), env)
    # --allow-missing: the heldout outputs are, by design, not there to check out
    run_checked(["dvc", "pull", "-r", "train", "--allow-missing"], clone, env)
    stages = _training_side_stages(clone)
    assert {"rm_train@0", "policy_train", "rm_ensemble"} <= set(stages), stages
    status = run_checked(["dvc", "status", *stages], clone, env)
    assert "up to date" in status and "changed" not in status, status
    repro = run_checked(["dvc", "repro", "--single-item", *stages], clone, env)
    assert "Running stage" not in repro, repro
    # DVC's own artifact download, as from another machine (a git URL, the remote settings from
    # B's .dvc/config.local): the registered RM's bytes are exactly dvc.lock's.
    fetched = tmp_path / "fetched-rm"
    run_checked(["dvc", "artifacts", "get", root.as_uri(), "rm-ensemble", "--config", str(clone / ".dvc/config.local"),
                 "-o", str(fetched)], tmp_path, env)
    from reappreg.hashing import dvc_md5

    assert dvc_md5(fetched) == _lock_md5(root, "models/rm/ensemble")

    # 3. B cannot read a held-out object, through DVC or through the S3 API.
    assert not (clone / "data/heldout/answers.jsonl").exists()
    denied = subprocess.run(["dvc", "pull", "-r", "heldout"], cwd=clone, env=env, capture_output=True, text=True)
    assert denied.returncode != 0 and not (clone / "data/heldout/answers.jsonl").exists()
    trainer = s3_team.client("trainer")
    some_key = _all_objects(maintainer, BUCKETS["heldout"])[0]
    for call in (lambda: trainer.list_objects_v2(Bucket=BUCKETS["heldout"]),
                 lambda: trainer.get_object(Bucket=BUCKETS["heldout"], Key=some_key)):
        with pytest.raises(ClientError) as err:
            call()
        assert err.value.response["Error"]["Code"] in {"AccessDenied", "403"}

    # 4. The maintainer registers the RM on the team MLflow server, signed with a team key; B
    #    (a READ account) pulls it through the server, verified byte by byte against the statement.
    maintainer = _register_rm_on_team_server(root, {**env, **team_mlflow.env("maintainer")}, tmp_path)
    run_checked(["git", "pull", "-q", "--no-rebase"], clone, env)  # the team key's public half
    as_trainer = {**env, **team_mlflow.env("trainer")}
    pulled = run_checked(["reappreg", "registry", "pull", f"models:/{RM}@candidate", "--to", str(tmp_path / "pulled")],
                         clone, as_trainer)
    assert f"pulled {RM} version" in pulled and f"registration key {maintainer[:16]} of the team root" in pulled, pulled
    assert (tmp_path / "pulled" / "MLmodel").is_file()
    wrong = subprocess.run(["reappreg", "registry", "pull", f"{RM}@candidate", "--to", str(tmp_path / "nope")], cwd=clone,
                           env={**as_trainer, "MLFLOW_TRACKING_PASSWORD": "wrong"}, capture_output=True, text=True)
    assert wrong.returncode != 0 and "rejected the credentials of account 'trainer'" in wrong.stdout + wrong.stderr
    # Whoever can write the artifact store (here its service account) changes one stored byte:
    # the pull is refused and leaves nothing behind.
    store = s3_team.client("mlflow-server")
    mlmodel = [k for k in _all_objects(store, BUCKETS["mlflow"]) if f"/{RM}/model/" in k and k.endswith("/MLmodel")]
    assert mlmodel, "the registered RM's files are not in the S3 artifact store"
    body = store.get_object(Bucket=BUCKETS["mlflow"], Key=mlmodel[0])["Body"].read()
    store.put_object(Bucket=BUCKETS["mlflow"], Key=mlmodel[0], Body=body + b"\n# edited\n")
    refused = subprocess.run(["reappreg", "registry", "pull", f"models:/{RM}@candidate", "--to", str(tmp_path / "tampered")],
                             cwd=clone, env=as_trainer, capture_output=True, text=True)
    assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert "MLmodel: sha256" in refused.stdout + refused.stderr and not (tmp_path / "tampered").exists()

    # 5. An auditor clone with read access to both remotes re-checks the separation. It pulls
    #    only what the certificate names (data, sketch, tokenizer files) and the sketch's
    #    secret: an audit needs none of the models.
    auditor = tmp_path / "clone-auditor"
    run_checked(["git", "clone", "-q", str(root), str(auditor)], tmp_path, env)
    s3_team.configure_dvc(auditor, "auditor", ("train", "heldout"), env)
    run_checked(["dvc", "pull", "data/guard/certificate.json"], auditor, env)
    named = _paths_the_certificate_names(auditor / "data/guard/certificate.json")
    assert "models/policy/base/tokenizer.json" in named, named
    run_checked(["dvc", "pull", *named, "data/guard_secret"], auditor, env)
    assert not (auditor / "models/policy/base/model.safetensors").exists()
    audit = subprocess.run(["reappreg", "guard", "audit", "data/guard/certificate.json"], cwd=auditor, env=env,
                           capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
    # and the auditor cannot write to either remote
    with pytest.raises(ClientError):
        s3_team.client("auditor").put_object(Bucket=BUCKETS["heldout"], Key="tamper", Body=b"x")


# ----------------------------------------------------------------------------- MLflow as a team runs it


@pytest.mark.parametrize(("status", "said"), [(401, "rejected the credentials of account 'trainer'"),
                                              (403, "refused read access to account 'trainer'")])
def test_a_refused_account_is_named_at_once_not_retried_as_unreachable(monkeypatch, status, said):
    import mlflow
    from mlflow.exceptions import MlflowException, get_error_code

    from reappreg.registry import RegistryUnavailable, connect

    calls = []

    class Refusing:
        def __init__(self, **_):
            pass

        def search_registered_models(self, **_):
            calls.append(1)
            raise MlflowException(f"failed with error code {status}", error_code=get_error_code(status))

    monkeypatch.setattr(mlflow, "MlflowClient", Refusing)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "trainer")
    slept = []
    with pytest.raises(RegistryUnavailable) as err:
        connect("http://127.0.0.1:9", attempts=3, backoff_s=1.0, sleep=slept.append)
    assert said in str(err.value) and "MLFLOW_TRACKING_PASSWORD" in str(err.value)
    assert len(calls) == 1 and not slept


def test_a_read_account_cannot_take_a_failing_version_it_cannot_record():
    """`pull --allow-failing-gates` is allowed only because it is recorded on the version; a
    READ account's write is refused by the server, so the pull is refused with the reason."""
    from types import SimpleNamespace

    from mlflow.exceptions import MlflowException, get_error_code

    from reappreg.errors import GateFailed
    from reappreg.registry.pull import _record_failing_pull
    from reappreg.registry.verification import VersionCheck

    class ReadOnly:
        def set_model_version_tag(self, *_):
            raise MlflowException("Permission denied", error_code=get_error_code(403))

    version = SimpleNamespace(name="team-probe", version="3")
    with pytest.raises(GateFailed, match=r"may not write to it \(HTTP 403\).*EDIT on 'team-probe'"):
        _record_failing_pull(ReadOnly(), version, "trainer", VersionCheck("team-probe", "3", None, None))


class _LengthModel:
    """A tiny but real pyfunc model: the reward is the answer length."""

    def predict(self, context, model_input, params=None):
        return [float(len(a)) for a in model_input["answer"]]


@pytest.fixture
def team_mlflow(s3_team, postgres_db, tmp_path):
    pytest.importorskip("flask_wtf", reason="mlflow[auth] is needed for the basic-auth server")
    from team_services import MlflowTeamServer

    server = MlflowTeamServer.start(postgres_db, s3_team, tmp_path / "mlflow", users=("maintainer", "trainer"))
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_read_account_loads_models_but_cannot_move_aliases(team_mlflow, s3_team):
    import mlflow
    import pandas as pd
    from mlflow.exceptions import MlflowException
    from mlflow.pyfunc import PythonModel

    from team_services import BUCKETS

    class LengthModel(_LengthModel, PythonModel):
        pass

    name = "team-probe"
    frame = pd.DataFrame({"scenario": ["s", "s"], "answer": ["short", "a longer answer"]})
    with team_mlflow.as_user("maintainer"):
        mlflow.set_tracking_uri(team_mlflow.url)
        client = mlflow.MlflowClient(team_mlflow.url)
        mlflow.set_experiment("team-test")
        with mlflow.start_run():
            info = mlflow.pyfunc.log_model(name="model", python_model=LengthModel(), input_example=frame)
        version = mlflow.register_model(info.model_uri, name)
        client.set_registered_model_alias(name, "candidate", version.version)
    # The artifacts went to the S3 artifact store, not to a local folder.
    stored = s3_team.client("mlflow-server").list_objects_v2(Bucket=BUCKETS["mlflow"]).get("KeyCount", 0)
    assert stored > 0

    with team_mlflow.as_user("trainer"):
        client = mlflow.MlflowClient(team_mlflow.url)
        assert client.get_model_version_by_alias(name, "candidate").version == version.version
        model = mlflow.pyfunc.load_model(f"models:/{name}@candidate")
        assert list(model.predict(frame)) == [5.0, 15.0]
        for attempt in (lambda: client.set_registered_model_alias(name, "champion", version.version),
                        lambda: client.delete_registered_model_alias(name, "candidate")):
            with pytest.raises(MlflowException) as err:
                attempt()
            assert "PERMISSION_DENIED" in str(err.value) or "403" in str(err.value)
    with team_mlflow.as_user("maintainer"):
        client = mlflow.MlflowClient(team_mlflow.url)
        assert client.get_model_version_by_alias(name, "candidate").version == version.version
        client.set_registered_model_alias(name, "champion", version.version)  # MANAGE may promote
