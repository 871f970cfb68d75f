"""The read side of the registry's keys: which keys may sign what, verified the TUF way.

Loading (:func:`load_origin`). TUF's own client (``tuf.ngclient.Updater``) reads a trust
repository folder through a local fetcher: starting from the root this clone *pinned* (kept
under ``work/registry/trust/pin/<origin>/``, which ``git pull`` never touches), it walks
every newer root, each signed by a threshold of the previous root's keys and of its own,
then timestamp, snapshot and targets, refusing a version that goes back and metadata that
has expired. A clone that never pinned one trusts ``1.root.json`` on first use and says so
in one line with its key ids; from then on a root not reachable from the pinned one by
valid rotations is refused. Every root the walk verified is kept (``root_history/``), so
older entries can be checked against the root that was in force for them.

Verifying (:meth:`Trust.open`). A signed statement or history entry names the trust version
it was signed under (origin, root version, targets version). That targets version must be
signed by the named root's targets keys and be no newer than what the walk trusts; the
registry role the signature needs (registration, promotion, acceptance, enforcement,
pipeline, layout) and its threshold come from it, and TUF checks the signatures against
them (``Targets.get_verification_result`` over the DSSE pre-authentication encoding). A key
absent from that version cannot sign under it, whatever date the statement writes;
:func:`reappreg.registry.history.read_history` checks that versions and times never go
back along a chain.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reappreg.errors import InputError, ReappregError
from reappreg.trust.keys import SignatureInvalid
from reappreg.trust.repository import PUBLISHED_FIELD, iso, latest_version, parse_time


class TrustError(ReappregError):
    """The trust metadata does not verify: expired, rolled back, or not reachable from the pinned root."""

    exit_code = 1


@dataclass(frozen=True)
class TrustVersion:
    """What a signature was made under: the trust ``origin`` (``team``: ``registry/keys/``;
    ``local``: this clone's one-key root), its ``root`` version and its ``targets`` version."""

    origin: str
    root: int
    targets: int

    def as_dict(self) -> dict[str, Any]:
        return {"origin": self.origin, "root": self.root, "targets": self.targets}

    @classmethod
    def from_dict(cls, raw: Any) -> TrustVersion | None:
        if not isinstance(raw, dict):
            return None
        try:
            return cls(str(raw["origin"]), int(raw["root"]), int(raw["targets"]))
        except (KeyError, TypeError, ValueError):
            return None

    def __str__(self) -> str:
        return f"{self.origin} root v{self.root} / targets v{self.targets}"


@dataclass(frozen=True)
class Signer:
    """A key that signed, and the role and trust version it signed under (for messages)."""

    keyid: str
    role: str
    version: TrustVersion

    def describe(self) -> str:
        where = "this clone's local one-key root" if self.version.origin == "local" else f"the {self.version.origin} root"
        return f"{self.role} key {self.keyid[:16]} of {where} ({self.version})"


def _fetcher(folder: Path) -> Any:
    from tuf.api import exceptions
    from tuf.ngclient.fetcher import FetcherInterface

    class LocalFetcher(FetcherInterface):
        """TUF's client fetching metadata from a folder (the repository is files in git)."""

        def _fetch(self, url: str) -> Iterator[bytes]:
            path = folder / url.rsplit("/", 1)[-1]
            if not path.is_file():
                raise exceptions.DownloadHTTPError(f"{path} not found", 404)
            yield path.read_bytes()

    return LocalFetcher()


@dataclass
class TrustOrigin:
    """One trust repository as this clone verified it (see the module docstring)."""

    name: str
    folder: Path
    pin: Path
    roots: dict[int, Any]                  # version -> verified Root (signed part)
    current: TrustVersion
    first_use: str | None = None           # the one line said when this clone pinned the root now
    _targets: dict[int, Any] = field(default_factory=dict)

    def targets(self, root: int, targets: int) -> Any:
        """Targets v``targets``, verified against the targets keys of root v``root``."""
        from tuf.api.metadata import Metadata

        if root not in self.roots:
            raise SignatureInvalid(f"names {self.name} root v{root}, which this clone's verified chain does not hold "
                                   f"(it holds v1..v{max(self.roots)})")
        if targets > self.current.targets:
            raise SignatureInvalid(f"names {self.name} targets v{targets}, newer than v{self.current.targets}, the newest "
                                   "this clone verified")
        key = (root, targets)
        if key not in self._targets:
            path = self.folder / f"{targets}.targets.json"
            if not path.is_file():
                raise SignatureInvalid(f"names {self.name} targets v{targets}, but {path} is not there")
            md = Metadata.from_file(str(path))
            result = self.roots[root].get_verification_result("targets", md.signed_bytes, md.signatures)
            if not result.verified or md.signed.version != targets:
                raise SignatureInvalid(f"{path} is not signed by {result.threshold} targets key(s) of {self.name} root v{root}")
            self._targets[key] = md.signed
        return self._targets[key]

    def published(self, targets: int) -> dt.datetime | None:
        """When targets v``targets`` was published (signed in it), if it is there and readable."""
        path = self.folder / f"{targets}.targets.json"
        if not path.is_file():
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))["signed"].get(PUBLISHED_FIELD)
        return parse_time(raw) if raw else None

    def expires(self, root: int, targets: int) -> dt.datetime:
        return self.targets(root, targets).expires

    def role_keyids(self, version: TrustVersion, role: str) -> tuple[list[str], int]:
        delegations = self.targets(version.root, version.targets).delegations
        if delegations is None or role not in (delegations.roles or {}):
            return [], 1
        delegated = delegations.roles[role]
        return list(delegated.keyids), delegated.threshold


def _expired_message(exc: Exception, folder: Path) -> str:
    dates = []
    for name in ("timestamp.json", f"{latest_version(folder, 'snapshot')}.snapshot.json",
                 f"{latest_version(folder, 'targets')}.targets.json", f"{latest_version(folder, 'root')}.root.json"):
        path = folder / name
        if path.is_file():
            expires = json.loads(path.read_text(encoding="utf-8"))["signed"].get("expires")
            if expires and parse_time(expires) <= dt.datetime.now(dt.timezone.utc):
                dates.append(f"{name} expired on {expires}")
    return f"{exc}: " + ("; ".join(dates) or "expired") + (" -- a key holder renews it (`reappreg registry keys renew`)")


def load_origin(name: str, folder: Path, pin: Path) -> TrustOrigin:
    """Verify ``folder`` from the root pinned in ``pin`` (or, on first use, from ``1.root.json``)."""
    from tuf.api import exceptions
    from tuf.api.metadata import Metadata
    from tuf.ngclient import Updater, UpdaterConfig

    first = not (pin / "root.json").exists()
    first_root = folder / "1.root.json"
    if first and not first_root.is_file():
        raise InputError(f"{folder}: no TUF root metadata (1.root.json)")
    pin.mkdir(parents=True, exist_ok=True)
    try:
        updater = Updater(metadata_dir=str(pin), metadata_base_url="file:///trust-repository/",
                          fetcher=_fetcher(folder), config=UpdaterConfig(max_root_rotations=10_000),
                          bootstrap=first_root.read_bytes() if first else None)
        updater.refresh()
    except exceptions.ExpiredMetadataError as exc:
        raise TrustError(f"{name} trust metadata in {folder} refused: {_expired_message(exc, folder)}") from None
    except exceptions.UnsignedMetadataError as exc:
        raise TrustError(f"{name} trust metadata in {folder} refused: {exc}. A root must be signed by a threshold of the "
                         f"root this clone pinned ({pin}) and of its own: this one is not reachable from the pinned root by "
                         "valid rotations (re-rooted, or a rotation without the old keys)") from None
    except (exceptions.BadVersionNumberError, exceptions.EqualVersionNumberError) as exc:
        raise TrustError(f"{name} trust metadata in {folder} refused: {exc}: versions never go back from what this clone "
                         f"trusted before ({pin})") from None
    except exceptions.RepositoryError as exc:
        raise TrustError(f"{name} trust metadata in {folder} refused: {type(exc).__name__}: {exc}") from None
    roots = {int(p.name.split(".")[0]): Metadata.from_file(str(p)).signed
             for p in (pin / "root_history").glob("*.root.json")}
    targets = Metadata.from_file(str(pin / "targets.json")).signed
    current = TrustVersion(name, max(roots), targets.version)
    origin = TrustOrigin(name, folder, pin, roots, current)
    if first:
        root1 = roots[min(roots)]
        keys = ", ".join(k[:16] for k in root1.roles["root"].keyids)
        origin.first_use = (f"trust: first use of the {name} root {first_root} on this clone (root keys {keys}, threshold "
                            f"{root1.roles['root'].threshold}); pinned in {pin}: from now on a root not reachable from it "
                            "by valid rotations is refused")
    return origin


@dataclass
class Trust:
    """The trust origins this clone uses (the team's, this clone's local one-key root, or both) and the
    clock skew allowed to a signed time."""

    origins: dict[str, TrustOrigin]
    skew: dt.timedelta = dt.timedelta(minutes=5)

    def describe(self) -> list[str]:
        lines = []
        for origin in self.origins.values():
            if origin.first_use:
                lines.append(origin.first_use)
            root = origin.roots[origin.current.root]
            keys = ", ".join(k[:16] for k in root.roles["root"].keyids)
            if origin.name == "local":
                lines.append(f"trust: this clone's local one-key root ({origin.current}, key {keys}), made on first use: "
                             "what it signs is trusted by this clone only")
            else:
                lines.append(f"trust: the team root in {origin.folder} ({origin.current}, root keys {keys}, threshold "
                             f"{root.roles['root'].threshold}; pinned in {origin.pin})")
        return lines or ["trust: no trust root (no team keys under registry/keys and the local key not trusted): "
                         "nothing verifies"]

    def origin(self, version: TrustVersion) -> TrustOrigin:
        if version.origin not in self.origins:
            raise SignatureInvalid(f"signed under the {version.origin} root, which this clone does not trust "
                                   f"(trusted: {', '.join(self.origins) or 'none'})")
        return self.origins[version.origin]

    def current_for(self, keyids: list[str], role: str) -> TrustVersion:
        """The current trust version under which ``keyids`` may sign for ``role`` (team first)."""
        for name in sorted(self.origins, key=lambda n: n != "team"):
            origin = self.origins[name]
            allowed, threshold = origin.role_keyids(origin.current, role)
            held = [k for k in keyids if k in allowed]
            if held:
                if len(held) < threshold:
                    raise InputError(f"the {role} role of {origin.current} needs {threshold} signatures; this session holds "
                                     f"{len(held)} of its keys ({', '.join(k[:16] for k in held)}): add the others' keys to "
                                     "$REAPPREG_SIGNING_KEY (a list, separated by ':')")
                return origin.current
        raise InputError(f"signing key(s) {', '.join(k[:16] for k in keyids)} are not {role} keys of any trusted root "
                         f"({'; '.join(str(o.current) for o in self.origins.values()) or 'none'}): a key absent from the "
                         "root in force cannot sign")

    def role_key(self, version: TrustVersion, role: str, keyid: str) -> Any:
        """The public key (pyca) of ``keyid`` when it may sign for ``role`` under ``version``."""
        from cryptography.hazmat.primitives import serialization

        origin = self.origin(version)
        allowed, _ = origin.role_keyids(version, role)
        if keyid not in allowed:
            raise SignatureInvalid(f"signed by key {keyid[:16] or '(none)'}, which is not a '{role}' key under {version} "
                                   "(a key absent from the root in force cannot sign)")
        key = origin.targets(version.root, version.targets).delegations.keys[keyid]
        return serialization.load_pem_public_key(key.keyval["public"].encode("utf-8"))

    def verify_envelope(self, envelope: Any, role: str, version: TrustVersion) -> list[Signer]:
        """The signers of ``envelope`` (a securesystemslib DSSE Envelope) once they meet ``role``'s threshold
        under ``version``; raises SignatureInvalid naming what is missing."""
        origin = self.origin(version)
        targets = origin.targets(version.root, version.targets)
        if targets.delegations is None or role not in (targets.delegations.roles or {}):
            raise SignatureInvalid(f"{version} delegates no '{role}' role")
        result = targets.get_verification_result(role, envelope.pae(), envelope.signatures)
        if not result.verified:
            strangers = [k[:16] for k in envelope.signatures if k not in result.signed]
            raise SignatureInvalid(
                f"'{role}' needs {result.threshold} valid signature(s) by its keys under {version}; "
                f"{len(result.signed)} verified" + (f"; signed also by {', '.join(strangers)}, not a valid '{role}' key "
                                                    "there (a key absent from the root in force cannot sign)"
                                                    if strangers else ""))
        return [Signer(keyid, role, version) for keyid in sorted(result.signed)]

    def open(self, data: bytes, *, role: str, named: TrustVersion | None = None) -> tuple[dict[str, Any], list[Signer]]:
        """The JSON payload of a DSSE envelope and its signers, verified under the trust version it names
        (``named`` overrides what the payload says, e.g. for a link whose version lies elsewhere)."""
        from securesystemslib.dsse import Envelope

        try:
            envelope = Envelope.from_dict(json.loads(data))
            payload = json.loads(envelope.payload)
        except (ValueError, KeyError, TypeError) as exc:
            raise SignatureInvalid(f"not a DSSE envelope with a JSON payload ({type(exc).__name__}: {exc})") from exc
        if not envelope.signatures:
            raise SignatureInvalid("envelope carries no signature")
        version = named or trust_version_of(payload)
        if version is None:
            raise SignatureInvalid("the statement names no trust version (origin, root, targets) it was signed under; "
                                   "nothing is trusted without one")
        return payload, self.verify_envelope(envelope, role, version)


def trust_version_of(payload: Any) -> TrustVersion | None:
    """The trust version a signed payload names: a history entry's ``trust``, a registration statement's
    ``externalParameters.trust``, an in-toto link's ``environment.trust``."""
    if not isinstance(payload, dict):
        return None
    for candidate in (payload.get("trust"),
                      payload.get("predicate", {}).get("buildDefinition", {}).get("externalParameters", {}).get("trust")
                      if isinstance(payload.get("predicate"), dict) else None,
                      (payload.get("environment") or {}).get("trust") if isinstance(payload.get("environment"), dict) else None):
        version = TrustVersion.from_dict(candidate)
        if version is not None:
            return version
    return None


__all__ = ["Signer", "SignatureInvalid", "Trust", "TrustError", "TrustOrigin", "TrustVersion", "iso", "load_origin",
           "trust_version_of"]
