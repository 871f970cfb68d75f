"""Signing keys and the trusted keyring; DSSE envelopes (securesystemslib) and model-folder signatures (model-signing).

Key ids. A key's id is the sha256 of its public key in PEM (SubjectPublicKeyInfo) form,
the same hint OpenSSF's model-signing writes into its bundles, so one id names a key in
both kinds of signature.

Trust. Two sources of public keys:

* team keys, committed under ``registry/keys/`` and listed in ``registry/keys/keyring.yaml``
  with their holder and status (``active``, ``retired``: still verifies what it signed, or
  ``revoked``: verifies nothing). The list is trusted only as the last entry of the signed
  keyring chain (:mod:`.keyring_chain`): every change is signed by a key the keyring already
  trusted. Rotation = add the new key as active, mark the old one retired (or revoked if it
  leaked), ``reappreg registry sign-keyring`` with a current key, commit.
* this clone's local key, generated on first use into a gitignored folder (default
  ``work/registry/keys/``) and trusted by this clone only (``registry.trust_local_key``).
  It proves that a version was registered by someone holding this clone's key file; it
  proves nothing to anyone else, who does not have its public key.

The private key is ``$REAPPREG_SIGNING_KEY`` (a PEM file; ``$REAPPREG_SIGNING_KEY_PASSWORD``
if it is encrypted) when set, else the local key. It never enters git, MLflow or DVC.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from reappreg.errors import InputError, ReappregError

SIGNING_KEY_ENV = "REAPPREG_SIGNING_KEY"
SIGNING_KEY_PASSWORD_ENV = "REAPPREG_SIGNING_KEY_PASSWORD"
LOCAL_KEY_FILE = "local-signing-key.pem"
LOCAL_PUBLIC_FILE = "local-signing-key.pub.pem"
KEYRING_FILE = "keyring.yaml"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


class SignatureInvalid(ReappregError):
    """An envelope or a folder signature does not verify against a trusted key."""


def public_pem(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_id(public_key: Any) -> str:
    return hashlib.sha256(public_pem(public_key)).hexdigest()


def load_public(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (ValueError, OSError) as exc:
        raise InputError(f"{path}: not a PEM public key ({exc})") from exc
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in ("secp256r1", "secp384r1"):
        raise InputError(f"{path}: only EC P-256/P-384 keys are supported (model-signing's curves)")
    return key


@dataclass(frozen=True)
class TrustedKey:
    keyid: str
    public_key: Any
    origin: Literal["team", "local"]
    holder: str
    status: str
    path: Path

    def describe(self) -> str:
        if self.origin == "local":
            return f"local key {self.keyid[:16]} (trusted on this clone only)"
        return f"team key {self.keyid[:16]} of {self.holder} ({self.status}, {self.path.name})"


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    holder: str
    status: Literal["active", "retired", "revoked"]
    keyid: str | None = None


class _Keyring(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[_KeyEntry] = []


@dataclass
class Keyring:
    keys: dict[str, TrustedKey]
    revoked: dict[str, TrustedKey]
    chain: tuple[str, ...] = ()   # sha256 of each signed keyring chain entry, oldest first (empty: no team keys)

    @property
    def head(self) -> str | None:
        return self.chain[-1] if self.chain else None

    def lookup(self, keyid: str) -> TrustedKey:
        if keyid in self.revoked:
            raise SignatureInvalid(f"signed by {self.revoked[keyid].describe()}, which is revoked")
        if keyid not in self.keys:
            raise SignatureInvalid(f"signed by key {keyid[:16] or '(none)'}, which is not trusted here "
                                   f"(trusted: {', '.join(k[:16] for k in self.keys) or 'none'})")
        return self.keys[keyid]


def listed_keys(team_dir: str | os.PathLike) -> dict[str, TrustedKey]:
    """Every key ``team_dir/keyring.yaml`` lists (revoked ones too), its file read and its id checked."""
    team_dir = Path(team_dir)
    ring_path = team_dir / KEYRING_FILE
    if not ring_path.exists():
        return {}
    try:
        ring = _Keyring.model_validate(yaml.safe_load(ring_path.read_text(encoding="utf-8")) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise InputError(f"{ring_path}: invalid keyring: {exc}") from exc
    listed: dict[str, TrustedKey] = {}
    for entry in ring.keys:
        path = team_dir / entry.file
        if not path.exists():
            raise InputError(f"{ring_path}: key file {entry.file} not found in {team_dir}")
        public = load_public(path)
        kid = key_id(public)
        if entry.keyid is not None and entry.keyid != kid:
            raise InputError(f"{ring_path}: {entry.file} has key id {kid}, the keyring says {entry.keyid}")
        listed[kid] = TrustedKey(kid, public, "team", entry.holder, entry.status, path)
    return listed


@dataclass(frozen=True)
class SigningKey:
    path: Path
    private_key: Any
    keyid: str
    password: str | None

    @property
    def public_key(self) -> Any:
        return self.private_key.public_key()


def generate_key(path: str | os.PathLike, *, exist_ok: bool = False, timeout_s: float = 60.0) -> Path:
    """A new EC P-256 private key at ``path`` (mode 600) and its public key beside it (``.pub.pem``).

    One process at a time makes a key at ``path`` (a file lock beside it), so of several that
    need this clone's key at once (two `register` runs on a fresh clone) exactly one creates
    it and the others, with ``exist_ok``, use it. Both files appear whole (written aside,
    then renamed or linked into place), the public one first: whoever sees the private key
    also finds its public half, never a partial file."""
    import tempfile

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from filelock import FileLock, Timeout

    path = Path(path)
    public = path.with_name(path.name.removesuffix(".pem") + ".pub.pem")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(f"{path}.lock", timeout=timeout_s):
            if path.exists():
                if exist_ok:
                    return public
                raise InputError(f"{path}: already exists; refusing to overwrite a private key")
            key = ec.generate_private_key(ec.SECP256R1())
            pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            fd, aside = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 600
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(pem)
                public_aside = Path(aside + ".pub")
                public_aside.write_bytes(public_pem(key.public_key()))
                os.replace(public_aside, public)
                os.link(aside, path)  # never overwrites: the name is free under the lock
            finally:
                Path(aside).unlink(missing_ok=True)
    except Timeout as exc:
        raise InputError(f"{path}: another process held the key-creation lock {path}.lock for {timeout_s:.0f} s") from exc
    return public


def signing_key(local_dir: str | os.PathLike, *, create: bool) -> SigningKey:
    """``$REAPPREG_SIGNING_KEY`` if set, else this clone's local key (generated when ``create``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    named = os.environ.get(SIGNING_KEY_ENV)
    path = Path(named) if named else Path(local_dir) / LOCAL_KEY_FILE
    if not path.exists():
        if named:
            raise InputError(f"${SIGNING_KEY_ENV}={named}: private key file not found")
        if not create:
            raise InputError(f"no signing key: set ${SIGNING_KEY_ENV} to a PEM private key, or register once on this clone "
                             f"to create the local key {path}")
        generate_key(path, exist_ok=True)
    password = os.environ.get(SIGNING_KEY_PASSWORD_ENV)
    try:
        private = serialization.load_pem_private_key(path.read_bytes(), password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}: cannot load the private key ({exc}); an encrypted key needs ${SIGNING_KEY_PASSWORD_ENV}") from exc
    if not isinstance(private, ec.EllipticCurvePrivateKey) or private.curve.name not in ("secp256r1", "secp384r1"):
        raise InputError(f"{path}: the signing key must be EC P-256 or P-384")
    return SigningKey(path, private, key_id(private.public_key()), password)


# --------------------------------------------------------------------------- DSSE envelopes (statements)


def sign_statement(statement: dict[str, Any], key: SigningKey) -> bytes:
    """A DSSE envelope (securesystemslib) over the canonical JSON of an in-toto statement."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
    signer = CryptoSigner(key.private_key, SSlibKey.from_crypto(key.public_key, keyid=key.keyid))
    envelope = Envelope(payload=payload, payload_type=INTOTO_PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    return json.dumps(envelope.to_dict(), sort_keys=True, indent=1).encode("utf-8")


def open_statement(data: bytes, keyring: Keyring) -> tuple[dict[str, Any], TrustedKey]:
    """The statement inside a DSSE envelope, once its signature verifies against a trusted key."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    try:
        envelope = Envelope.from_dict(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise SignatureInvalid(f"not a DSSE envelope ({type(exc).__name__}: {exc})") from exc
    if envelope.payload_type != INTOTO_PAYLOAD_TYPE:
        raise SignatureInvalid(f"envelope payload type {envelope.payload_type!r}, expected {INTOTO_PAYLOAD_TYPE}")
    if not envelope.signatures:
        raise SignatureInvalid("envelope carries no signature")
    problems = []
    for kid in envelope.signatures:
        try:
            trusted = keyring.lookup(kid)
        except SignatureInvalid as exc:
            problems.append(str(exc))
            continue
        try:
            envelope.verify([SSlibKey.from_crypto(trusted.public_key, keyid=kid)], 1)
        except VerificationError as exc:
            problems.append(f"signature by {trusted.describe()} does not verify ({exc})")
            continue
        try:
            return json.loads(envelope.payload), trusted
        except ValueError as exc:
            raise SignatureInvalid(f"signed payload is not JSON ({exc})") from exc
    raise SignatureInvalid("; ".join(problems))


# --------------------------------------------------------------------------- model folders (model-signing)


def sign_folder(folder: Path, signature: Path, key: SigningKey) -> None:
    """OpenSSF model-signing over every file of ``folder``: per-file sha256 in a DSSE envelope (Sigstore bundle)."""
    from model_signing import hashing, signing

    config = signing.Config().use_elliptic_key_signer(private_key=key.path, password=key.password)
    # Nothing is ignored: a .gitignore inside a model folder is signed like any other file.
    config.set_hashing_config(hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False))
    config.sign(folder, signature)


def bundle_keyid(signature: Path) -> str:
    """The key hint model-signing wrote into a bundle (empty when absent or unreadable)."""
    try:
        bundle = json.loads(signature.read_text(encoding="utf-8"))
        return str(bundle["verificationMaterial"]["publicKey"]["hint"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def verify_folder(folder: Path, signature: Path, keyring: Keyring) -> TrustedKey:
    """model-signing's verification of ``folder`` against ``signature`` with the key the bundle names."""
    import tempfile

    from model_signing import hashing, verifying

    trusted = keyring.lookup(bundle_keyid(signature))
    with tempfile.TemporaryDirectory() as tmp:
        public = Path(tmp) / "key.pub.pem"
        public.write_bytes(public_pem(trusted.public_key))
        config = verifying.Config().use_elliptic_key_verifier(public_key=public)
        config.set_hashing_config(hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False))
        try:
            config.verify(folder, signature)
        except Exception as exc:  # model-signing raises ValueError/InvalidSignature/protobuf errors alike
            raise SignatureInvalid(f"model-signing: {type(exc).__name__}: {exc}") from exc
    return trusted


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
