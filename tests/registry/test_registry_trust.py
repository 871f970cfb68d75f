"""Keys as TUF metadata, tried as a key holder or insider would: retired keys, dates, re-rooting,
thresholds, expiry, paths that escape the verified copy, and a bare ``models:/`` load.

Each attack ends refused or detected with a message naming it; beside each, the user action that
must still work (an honest promotion, an old signature that still verifies, a bare load of a
verified version).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reappreg.errors import InputError
from reappreg.registry.history import ChainBroken, read_history
from reappreg.trust.keys import _load_private, generate_key, sign_statement
from reappreg.trust import TrustError, load_trust
from reappreg.trust.admin import RoleSpec, init, set_role
from reappreg.trust.repository import iso, utcnow
from stage_commands import stage_argv
from registry_fixtures import (  # noqa: F401 (fixtures: templates, repo, store, store_repo, postgres_registry)
    POLICY,
    aliases,
    client_for,
    postgres_registry,
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

REPO = Path(__file__).resolve().parents[2]


def flat(text: str) -> str:
    return " ".join(text.split())


def make_key(folder: Path, name: str):
    generate_key(folder / f"{name}.pem")
    return _load_private(folder / f"{name}.pem", named=True, create=False)


@pytest.fixture
def team(repo, tmp_path, monkeypatch):
    """``repo`` with a team root: alice holds root and the online roles; alice and bob promote (1 of 2);
    the local key is not trusted (team keys only). Signs as alice by default."""
    keys = tmp_path / "team-keys"
    keys.mkdir()
    alice, bob, carol = (make_key(keys, n) for n in ("alice", "bob", "carol"))
    init(repo / "registry/keys", root=RoleSpec([keys / "alice.pub.pem"]), online=RoleSpec([keys / "alice.pub.pem"]),
         roles={"promotion": RoleSpec([keys / "alice.pub.pem", keys / "bob.pub.pem"], 1)}, signers=[alice],
         expiry_days=30)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["registry"]["trust_local_key"] = False
    params["registry"]["clock_skew_s"] = 0  # one machine, one clock: a rotation a second ago is in force
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("REAPPREG_SIGNING_KEY", str(keys / "alice.pem"))
    return {"root": repo, "keys": keys, "alice": alice, "bob": bob, "carol": carol}


def forge_entry(client, name: str, body: dict, keys: list) -> None:
    """A key holder appending an entry by hand (no registry code between them and the store)."""
    tags = client.get_registered_model(name).tags
    seq = 1 + sum(1 for k in tags if k.startswith("reappreg.history."))
    prev = __import__("hashlib").sha256(tags[f"reappreg.history.{seq - 1:06d}"].encode()).hexdigest()
    signed = {"_type": "https://github.com/reappreg/reappreg/promotion/v1", "seq": seq, "name": name, "prev": prev,
              "forced": False, "gates": [], "tampering": [], "signed_by_registration": None, **body}
    client.set_registered_model_tag(name, f"reappreg.history.{seq:06d}", sign_statement(signed, keys).decode())


# --------------------------------------------------------------------------- rotation and retired keys


def test_a_retired_key_cannot_sign_an_entry_whatever_date_it_writes_and_an_old_signature_still_verifies(team, monkeypatch):
    root, alice, bob = team["root"], team["alice"], team["bob"]
    register_ok()
    client = client_for(root)
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "alice, before")
    assert code == 0, (out, exc)
    # alice leaves: promotion is bob's alone from targets v2 on (alice still holds root: she signs the change).
    set_role(root / "registry/keys", "promotion", RoleSpec([team["keys"] / "bob.pub.pem"], 1), signers=[alice],
             expiry_days=30)
    assert run_verify()[0] == 0  # what alice signed under v1 still verifies
    __import__("time").sleep(1.1)  # times are kept to the second: "now" is after the rotation
    # Through the registry: refused before anything is written.
    code, _, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "staging", "--reason", "alice, after")
    assert isinstance(exc, InputError) and "a key absent from the root in force cannot sign" in str(exc), exc
    # By hand, naming the version that still listed her, dated now: refused.
    v1 = {"origin": "team", "root": 1, "targets": 1}
    forge_entry(client, POLICY, {"kind": "promote", "alias": "staging", "from": None, "to": "1", "by": "alice",
                                 "at": iso(utcnow()), "reason": "after", "trust": v1}, [alice])
    code, out = run_verify()
    assert code == 1 and "after targets v2 replaced it" in flat(out), out
    client.delete_registered_model_tag(POLICY, sorted(k for k in client.get_registered_model(POLICY).tags
                                                      if k.startswith("reappreg.history."))[-1])
    # Backdated to before the rotation: the seal a key holder (enforcement: alice, the lead) signs after
    # every key change closes the gap.
    code, out, exc = run_cli("registry", "keys", "seal", "--actor", "alice")
    assert code == 0 and f"sealed {POLICY}" in flat(out), (out, exc)
    forge_entry(client, POLICY, {"kind": "promote", "alias": "staging", "from": None, "to": "1", "by": "alice",
                                 "at": iso(utcnow() - dt.timedelta(hours=1)), "reason": "backdated", "trust": v1}, [alice])
    code, out = run_verify()
    text = flat(out)
    assert code == 1 and "trust versions never go back along a chain" in text and "times never go back" in text, out
    # bob, who holds the role now, promotes as usual once the forged entry is gone.
    monkeypatch.setenv("REAPPREG_SIGNING_KEY", str(team["keys"] / "bob.pem"))
    client.delete_registered_model_tag(POLICY, sorted(k for k in client.get_registered_model(POLICY).tags
                                                      if k.startswith("reappreg.history."))[-1])
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "staging", "--reason", "bob")
    assert code == 0, (out, exc)


def test_a_registration_signed_by_a_retired_key_after_the_rotation_is_tampering(team, tmp_path):
    root, alice = team["root"], team["alice"]
    stale = tmp_path / "stale-keys"
    shutil.copytree(root / "registry/keys", stale)  # alice's own copy, from before her key was retired
    set_role(root / "registry/keys", "registration", RoleSpec([team["keys"] / "bob.pub.pem"], 1), signers=[alice],
             expiry_days=30)
    from registry_fixtures import record_outputs

    record_outputs(root)
    # alice registers with her stale copy (and a fresh pin of her own): the statement names targets v1.
    code, out, exc = run_cli(*stage_argv("register", keys=str(stale), local_keys=str(tmp_path / "alice/keys")))
    assert code == 0, (out, exc)
    client = client_for(root)
    client.set_registered_model_alias(POLICY, "staging", "1")
    code, out = run_verify()
    assert code == 1 and "after targets v2 replaced that version" in flat(out), out


def test_times_never_go_back_and_never_lie_in_the_future(repo):
    register_ok()
    client = client_for(repo)
    key = _load_private(repo / "work/registry/keys/local-signing-key.pem", named=False, create=False)
    version = session_of(repo).trust.current_for([key.keyid], "promotion").as_dict()
    forge_entry(client, POLICY, {"kind": "promote", "alias": "champion", "from": None, "to": "1", "by": "insider",
                                 "at": "2100-01-01T00:00:00+00:00", "reason": "future", "trust": version}, [key])
    code, out = run_verify()
    assert code == 1 and "dated 2100-01-01T00:00:00+00:00, beyond this clock" in flat(out), out
    forge_entry(client, POLICY, {"kind": "promote", "alias": "champion", "from": "1", "to": "1", "by": "insider",
                                 "at": "2001-01-01T00:00:00+00:00", "reason": "past", "trust": version}, [key])
    code, out = run_verify()
    text = flat(out)
    assert code == 1 and "dated 2001-01-01T00:00:00+00:00 (position #3), before entry #2" in text, out
    # Nothing is signed on top of it.
    code, _, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "honest")
    assert isinstance(exc, ChainBroken)


# --------------------------------------------------------------------------- roots: pinning, re-rooting, expiry


def test_a_re_rooted_team_root_is_refused_on_a_clone_that_pinned_one_and_a_fresh_clone_says_what_it_trusts(team, tmp_path):
    root = team["root"]
    code, out, _ = run_cli("registry", "keys", "status")
    assert code == 0 and "first use of the team root" in flat(out) and team["alice"].keyid[:16] in out, out
    # An insider with git push replaces the whole folder with a root of their own.
    mallory = make_key(tmp_path, "mallory")
    shutil.rmtree(root / "registry/keys")
    init(root / "registry/keys", root=RoleSpec([tmp_path / "mallory.pub.pem"]), online=RoleSpec([tmp_path / "mallory.pub.pem"]),
         roles={}, signers=[mallory], expiry_days=30)
    code, _, exc = run_cli("registry", "keys", "status")
    assert isinstance(exc, TrustError) and "not reachable from the pinned root by valid rotations" in str(exc), exc
    code, _, exc = run_cli("registry", "verify")
    assert isinstance(exc, TrustError), exc
    # A clone that never pinned one trusts it, and says so in one line with its key ids.
    code, out, _ = run_cli("registry", "keys", "status", "--local-keys", str(tmp_path / "fresh-clone/keys"))
    first = [line for line in out.splitlines() if "first use" in line]
    assert code == 0 and len(first) == 1 and mallory.keyid[:16] in first[0], out


def test_a_root_rotation_needs_the_old_and_the_new_threshold_and_then_every_clone_follows_it(team, monkeypatch):
    root, alice, bob, carol = team["root"], team["alice"], team["bob"], team["carol"]
    keys = team["keys"]
    run_cli("registry", "keys", "status")  # pin v1
    # Root becomes bob+carol, 2 of 2: alice (the old root) and both new keys must sign.
    repo = set_role(root / "registry/keys", "root", RoleSpec([keys / "bob.pub.pem", keys / "carol.pub.pem"], 2),
                    signers=[alice, bob], expiry_days=30)
    assert repo.staged and "1 of the 2 signature(s) its own root asks for" in repo.staged[0]
    assert not (root / "registry/keys/2.root.json").exists()
    monkeypatch.setenv("REAPPREG_SIGNING_KEY", str(keys / "carol.pem"))
    code, out, _ = run_cli("registry", "keys", "sign")
    assert code == 0 and "published 2.root.json" in out, out
    code, out, _ = run_cli("registry", "keys", "status")
    assert code == 0 and "team root v2" in out, out


def test_expired_metadata_is_refused_with_its_date(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    alice = make_key(keys, "alice")
    from reappreg.trust.repository import RoleKeys, init_repository, ROLES, TOP_ROLES

    spec = RoleKeys((alice.keyid,), 1)
    init_repository(tmp_path / "team", public_keys={alice.keyid: alice.public_key},
                    signers={alice.keyid: __import__("reappreg.trust.keys", fromlist=["crypto_signer"]).crypto_signer(alice)},
                    top={r: spec for r in TOP_ROLES}, roles={r: spec for r in ROLES}, expiry=dt.timedelta(days=30),
                    now=utcnow() - dt.timedelta(days=45))
    with pytest.raises(TrustError, match=r"expired on \d{4}-\d\d-\d\d.*reappreg registry keys renew"):
        load_trust(tmp_path / "team", tmp_path / "work")


# --------------------------------------------------------------------------- thresholds


def test_a_two_of_two_role_refuses_one_signature_and_accepts_two(team, monkeypatch):
    root, alice, bob = team["root"], team["alice"], team["bob"]
    keys = team["keys"]
    set_role(root / "registry/keys", "promotion", RoleSpec([keys / "alice.pub.pem", keys / "bob.pub.pem"], 2),
             signers=[alice], expiry_days=30)
    register_ok()
    code, _, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "alice alone")
    assert isinstance(exc, InputError) and "needs 2 signatures; this session holds 1" in str(exc), exc
    client = client_for(root)
    version = {"origin": "team", "root": 1, "targets": 2}
    forge_entry(client, POLICY, {"kind": "promote", "alias": "champion", "from": None, "to": "1", "by": "alice",
                                 "at": iso(utcnow()), "reason": "alone", "trust": version}, [alice])
    code, out = run_verify()
    assert code == 1 and "'promotion' needs 2 valid signature(s)" in flat(out), out
    client.delete_registered_model_tag(POLICY, "reappreg.history.000002")
    monkeypatch.setenv("REAPPREG_SIGNING_KEY", os.pathsep.join([str(keys / "alice.pem"), str(keys / "bob.pem")]))
    code, out, exc = run_cli("registry", "promote", POLICY, "1", "--alias", "champion", "--reason", "both")
    assert code == 0, (out, exc)
    assert run_verify()[0] == 0
    history = read_history(client, POLICY, session_of(root).chain)
    assert len(history.entries[-1].signer.split(";")) == 2


# --------------------------------------------------------------------------- loading


def test_the_verified_loader_refuses_paths_that_escape_the_verified_copy(tmp_path):
    from reappreg.registry.loader import check_data_only

    def model(data: str) -> Path:
        folder = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        (folder / "data").mkdir(parents=True)
        (folder / "MLmodel").write_text(yaml.safe_dump({"flavors": {"python_function": {
            "loader_module": "reappreg.rm.pyfunc", "data": data, "env": {"virtualenv": "python_env.yaml"}}}}))
        return folder

    for escaping in ("/etc", "../outside", "data/../../outside", "file:///etc"):
        with pytest.raises(InputError, match="outside the verified copy"):
            check_data_only(model(escaping), "v")
    linked = model("data")
    (linked / "data" / "weights").symlink_to("/etc/hostname")
    with pytest.raises(InputError, match="holds symlinks"):
        check_data_only(linked, "v")
    check_data_only(model("data"), "v")  # the shape every registered model has


@pytest.mark.slow
def test_a_bare_models_uri_load_refuses_an_uploaded_code_folder_and_loads_the_verified_version(repo, tmp_path):
    """The load every MLflow user types, in a fresh process in the clone: reappreg's plugin verifies it."""
    register_ok()
    client = client_for(repo)
    assert run_cli("registry", "promote", "reappraisal-rm-ensemble", "1", "--alias", "champion", "--reason", "ok")[0] == 0
    script = ("import sys, mlflow\n"
              "path = mlflow.artifacts.download_artifacts(sys.argv[1])\n"
              "print('DOWNLOADED', path)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}

    def bare(uri: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", script, uri], cwd=repo, env=env, capture_output=True, text=True,
                              timeout=600)

    done = bare("models:/reappraisal-rm-ensemble@champion")
    assert done.returncode == 0 and "DOWNLOADED" in done.stdout, done.stderr[-2000:]
    # A store writer uploads a code/ folder into the version's model folder and points MLmodel at it.
    mv = client.get_model_version("reappraisal-rm-ensemble", "1")
    local = Path(mv.source.removeprefix("file://"))
    (local / "code").mkdir()
    (local / "code" / "evil.py").write_text("import os; os.system('echo pwned')\n")
    spec = yaml.safe_load((local / "MLmodel").read_text())
    spec["flavors"]["python_function"]["code"] = "code"
    (local / "MLmodel").write_text(yaml.safe_dump(spec))
    done = bare("models:/reappraisal-rm-ensemble@champion")
    assert done.returncode != 0 and "refused by the reappreg registry" in done.stderr, done.stderr[-2000:]
    assert "unexpected file code/evil.py" in done.stderr and "MLmodel: sha256" in done.stderr, done.stderr[-2000:]
    # Outside a clone there is nothing to verify with: refused too, never loaded unverified.
    outside = subprocess.run([sys.executable, "-c", script, "models:/reappraisal-rm-ensemble/1"], cwd=tmp_path,
                             env={**env, "MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]}, capture_output=True,
                             text=True, timeout=600)
    assert outside.returncode != 0 and "outside a clone" in outside.stderr, outside.stderr[-2000:]
