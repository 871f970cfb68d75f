"""Signing keys, DSSE envelopes (securesystemslib) and model-folder signatures (model-signing).

Key ids. A key's id is the sha256 of its public key in PEM (SubjectPublicKeyInfo) form,
the same hint OpenSSF's model-signing writes into its bundles, so one id names a key in
both kinds of signature, and in the TUF metadata that says which key may sign what
(:mod:`reappreg.trust`).

The private key(s) a command signs with are ``$REAPPREG_SIGNING_KEY`` -- one PEM file, or
several separated by ``:`` when a role needs more than one signature -- (each with
``$REAPPREG_SIGNING_KEY_PASSWORD`` if encrypted) when set, else this clone's local key,
generated on first use into a gitignored folder (default ``work/registry/keys/``). No private
key ever enters git, MLflow or DVC. Which of them may sign what is never decided here: the
trust metadata decides (:meth:`reappreg.trust.Trust.verify_envelope`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError, ReappregError

SIGNING_KEY_ENV = "REAPPREG_SIGNING_KEY"
SIGNING_KEY_PASSWORD_ENV = "REAPPREG_SIGNING_KEY_PASSWORD"
LOCAL_KEY_FILE = "local-signing-key.pem"
LOCAL_PUBLIC_FILE = "local-signing-key.pub.pem"
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


def signing_keys(local_dir: str | os.PathLike, *, create: bool) -> list[SigningKey]:
    """Every key of ``$REAPPREG_SIGNING_KEY`` (``:``-separated) if set, else this clone's local key."""
    named = os.environ.get(SIGNING_KEY_ENV)
    if not named:
        return [signing_key(local_dir, create=create)]
    return [_load_private(Path(part), named=True, create=False) for part in named.split(os.pathsep) if part]


def local_key(local_dir: str | os.PathLike) -> SigningKey | None:
    """This clone's local key, when it exists (never created here)."""
    path = Path(local_dir) / LOCAL_KEY_FILE
    return _load_private(path, named=False, create=False) if path.is_file() else None


def signing_key(local_dir: str | os.PathLike, *, create: bool) -> SigningKey:
    """The first key of ``$REAPPREG_SIGNING_KEY`` if set, else this clone's local key (generated when ``create``)."""
    named = os.environ.get(SIGNING_KEY_ENV)
    path = Path(named.split(os.pathsep)[0]) if named else Path(local_dir) / LOCAL_KEY_FILE
    return _load_private(path, named=bool(named), create=create)


def _load_private(path: Path, *, named: bool, create: bool) -> SigningKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if not path.exists():
        if named:
            raise InputError(f"${SIGNING_KEY_ENV}: private key file {path} not found")
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


def crypto_signer(key: SigningKey) -> Any:
    from securesystemslib.signer import CryptoSigner, SSlibKey

    return CryptoSigner(key.private_key, SSlibKey.from_crypto(key.public_key, keyid=key.keyid))


def sign_statement(statement: dict[str, Any], keys: SigningKey | list[SigningKey]) -> bytes:
    """A DSSE envelope (securesystemslib) over the canonical JSON of an in-toto statement, one
    signature per key (a role whose threshold is 2 needs two)."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = Envelope(payload=payload, payload_type=INTOTO_PAYLOAD_TYPE, signatures={})
    for key in keys if isinstance(keys, list) else [keys]:
        envelope.sign(crypto_signer(key))
    return json.dumps(envelope.to_dict(), sort_keys=True, indent=1).encode("utf-8")


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


def verify_folder(folder: Path, signature: Path, trust: Any, version: Any) -> str:
    """model-signing's verification of ``folder`` against ``signature``, with the key the bundle names,
    which must be a ``registration`` key under ``version`` (the trust version of the version's signed
    statement). Returns the key id."""
    import tempfile

    from model_signing import hashing, verifying

    keyid = bundle_keyid(signature)
    public_key = trust.role_key(version, "registration", keyid)
    with tempfile.TemporaryDirectory() as tmp:
        public = Path(tmp) / "key.pub.pem"
        public.write_bytes(public_pem(public_key))
        config = verifying.Config().use_elliptic_key_verifier(public_key=public)
        config.set_hashing_config(hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False))
        try:
            config.verify(folder, signature)
        except Exception as exc:  # model-signing raises ValueError/InvalidSignature/protobuf errors alike
            raise SignatureInvalid(f"model-signing: {type(exc).__name__}: {exc}") from exc
    return keyid


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
