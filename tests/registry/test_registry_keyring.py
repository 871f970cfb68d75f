"""The team keyring is trusted only as a chain of changes, each signed by a key the keyring already trusted
(reappreg.registry.keyring_chain). Every test here plays an insider who can commit but holds no team key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from reappreg.errors import InputError
from reappreg.registry.keyring_chain import CHAIN_FILE, replay, sign_keyring
from reappreg.registry.keyring_chain import load_keyring
from reappreg.registry.keys import generate_key, open_statement, sign_statement, signing_key


@pytest.fixture
def people(tmp_path, monkeypatch):
    """Three key holders (alice and bob on the team, mallory an insider with commit rights only)."""
    keys = {}
    for name in ("alice", "bob", "mallory"):
        generate_key(tmp_path / "private" / f"{name}.pem")
        monkeypatch.setenv("REAPPREG_SIGNING_KEY", str(tmp_path / "private" / f"{name}.pem"))
        keys[name] = signing_key(tmp_path / "unused", create=False)
    monkeypatch.delenv("REAPPREG_SIGNING_KEY")
    team = tmp_path / "team"
    team.mkdir()
    return team, keys


def _write_ring(team: Path, keys: dict, entries: dict[str, str]) -> None:
    """keyring.yaml listing ``entries`` (name -> status), each public key copied into the folder."""
    rows = []
    for name, status in entries.items():
        shutil.copy(keys[name].path.with_name(f"{name}.pub.pem"), team / f"{name}.pub.pem")
        rows.append({"file": f"{name}.pub.pem", "holder": name, "status": status, "keyid": keys[name].keyid})
    (team / "keyring.yaml").write_text(yaml.safe_dump({"keys": rows}))


def _trusted(team: Path, memo: Path | None = None) -> dict[str, str]:
    ring = load_keyring(team, None, remember=memo)
    return {k.holder: k.status for k in [*ring.keys.values(), *ring.revoked.values()]}


def test_changes_signed_by_a_trusted_key_are_trusted(people):
    team, keys = people
    _write_ring(team, keys, {"alice": "active"})
    sign_keyring(team, keys["alice"], "alice starts the team keyring")
    _write_ring(team, keys, {"alice": "active", "bob": "active"})
    sign_keyring(team, keys["alice"], "alice adds bob")
    _write_ring(team, keys, {"alice": "retired", "bob": "active"})
    sign_keyring(team, keys["bob"], "bob retires alice")
    assert _trusted(team) == {"alice": "retired", "bob": "active"}
    chain = replay(team / CHAIN_FILE)
    assert [(e.sequence, e.reason) for e in chain] == [(0, "alice starts the team keyring"), (1, "alice adds bob"),
                                                       (2, "bob retires alice")]
    # What bob signs verifies; alice's old signature still does (retired, not revoked).
    assert open_statement(sign_statement({"_type": "x"}, keys["bob"]), load_keyring(team, None))[1].holder == "bob"


def test_a_key_added_by_a_commit_alone_is_not_trusted(people):
    team, keys = people
    _write_ring(team, keys, {"alice": "active"})
    sign_keyring(team, keys["alice"], "start")
    _write_ring(team, keys, {"alice": "active", "mallory": "active"})  # the insider's commit
    with pytest.raises(InputError, match=rf"{keys['mallory'].keyid[:16]} \('mallory', 'active'\) is not in the signed keyring"):
        load_keyring(team, None)


def test_a_keyring_listing_keys_without_any_signed_chain_trusts_nothing(people):
    team, keys = people
    _write_ring(team, keys, {"mallory": "active"})
    with pytest.raises(InputError, match="lists 1 key\\(s\\) but .* holds no signed keyring"):
        load_keyring(team, None)


def test_a_change_signed_by_a_key_the_keyring_did_not_trust_is_refused(people):
    team, keys = people
    _write_ring(team, keys, {"alice": "active"})
    sign_keyring(team, keys["alice"], "start")
    _write_ring(team, keys, {"alice": "active", "mallory": "active"})
    # The command refuses to sign with a key the keyring does not trust ...
    with pytest.raises(InputError, match="is not an active key of the last signed keyring"):
        sign_keyring(team, keys["mallory"], "mallory adds herself")
    # ... and an entry appended by hand, signed by mallory's own key, breaks the chain for everyone.
    chain_path = team / CHAIN_FILE
    (team / "alt").mkdir()
    for name in ("keyring.yaml", "mallory.pub.pem", "alice.pub.pem"):
        shutil.copy(team / name, team / "alt" / name)
    _write_ring(team / "alt", keys, {"mallory": "active", "alice": "active"})
    sign_keyring(team / "alt", keys["mallory"], "a root of mallory's own")
    forged = json.loads((team / "alt" / CHAIN_FILE).read_bytes().splitlines()[0])
    with open(chain_path, "ab") as fh:
        fh.write(json.dumps(forged, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    with pytest.raises(InputError, match="entry 2: type .* sequence 0|entry 2: names previous entry None"):
        load_keyring(team, None)


def test_a_revocation_cannot_be_undone_by_a_commit_or_by_deleting_it(people, tmp_path):
    team, keys = people
    memo = tmp_path / "clone-state"
    _write_ring(team, keys, {"alice": "active", "bob": "active"})
    sign_keyring(team, keys["alice"], "start")
    _write_ring(team, keys, {"alice": "active", "bob": "revoked"})
    sign_keyring(team, keys["alice"], "bob's key leaked")
    assert _trusted(team, memo) == {"alice": "active", "bob": "revoked"}  # this clone sees the revocation
    _write_ring(team, keys, {"alice": "active", "bob": "active"})  # un-revoked by a commit
    with pytest.raises(InputError, match="keyring.yaml says \\('bob', 'active'\\), the signed keyring \\('bob', 'revoked'\\)"):
        load_keyring(team, None, remember=memo)
    # The revocation entry deleted as well: the chain is valid on its own, but this clone saw more of it.
    lines = (team / CHAIN_FILE).read_bytes().splitlines()
    (team / CHAIN_FILE).write_bytes(lines[0] + b"\n")
    with pytest.raises(InputError, match="this clone saw entry 2 .* signed keyring changes were removed"):
        load_keyring(team, None, remember=memo)


def test_a_chain_rewritten_from_a_new_root_is_refused_by_a_clone_that_saw_the_old_one(people, tmp_path):
    team, keys = people
    memo = tmp_path / "clone-state"
    _write_ring(team, keys, {"alice": "active"})
    sign_keyring(team, keys["alice"], "start")
    assert _trusted(team, memo) == {"alice": "active"}
    (team / CHAIN_FILE).unlink()
    _write_ring(team, keys, {"mallory": "active"})
    sign_keyring(team, keys["mallory"], "a new root")
    assert _trusted(team) == {"mallory": "active"}  # a fresh clone cannot tell (README: what it cannot)
    with pytest.raises(InputError, match="the keyring was rewritten from a new root"):
        load_keyring(team, None, remember=memo)


@pytest.mark.parametrize("edit", [lambda k: k.pop("public_pem"), lambda k: k.update(public_pem="not a key"),
                                  lambda k: k.update(status=None)], ids=["no-key", "junk-key", "no-status"])
def test_a_malformed_first_entry_is_refused_with_a_reason_not_a_traceback(people, edit):
    """An insider hand-writes the chain's first entry with a malformed key list and signs it with a key of their
    own: the replay names the problem (an InputError), whatever the entry holds."""
    import base64

    team, keys = people
    _write_ring(team, keys, {"mallory": "active"})
    sign_keyring(team, keys["mallory"], "root")
    envelope = json.loads((team / CHAIN_FILE).read_bytes().splitlines()[0])
    payload = json.loads(base64.b64decode(envelope["payload"]))
    edit(payload["keys"][0])
    (team / CHAIN_FILE).write_bytes(json.dumps(json.loads(sign_statement(payload, keys["mallory"]))).encode() + b"\n")
    with pytest.raises(InputError, match="must each name keyid, holder, status, public_pem as text|unreadable public key"):
        load_keyring(team, None)


def test_processes_needing_the_local_key_at_once_share_one_created_whole(tmp_path, monkeypatch):
    """Two `register` runs on a fresh clone both need the local key: exactly one creates it, every
    process signs with that same key, and no process ever reads a half-written file."""
    import os
    import subprocess
    import sys
    import time

    monkeypatch.delenv("REAPPREG_SIGNING_KEY", raising=False)
    # Imports first, then every process starts at the same instant (a start time given to all).
    script = ("import sys, time\nfrom reappreg.registry.keys import signing_key\n"
              "import cryptography.hazmat.primitives.asymmetric.ec, filelock\n"
              "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
              "print(signing_key(sys.argv[1], create=True).keyid)\n")
    env = {k: v for k, v in os.environ.items() if k != "REAPPREG_SIGNING_KEY"}
    for attempt in range(3):
        folder = tmp_path / f"keys{attempt}"
        start = str(time.time() + 8)
        procs = [subprocess.Popen([sys.executable, "-c", script, str(folder), start], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(6)]
        done = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, [err[-2000:] for _, err in done]
        assert len({out.strip() for out, _ in done}) == 1
        assert signing_key(folder, create=False).keyid == done[0][0].strip()
        assert load_keyring(tmp_path / "no-team", folder).keys  # the public half is there too
        assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock")) == [
            "local-signing-key.pem", "local-signing-key.pub.pem"]  # nothing left aside
