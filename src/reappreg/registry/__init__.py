"""The model registry on MLflow: signed registration, gates from signed evidence, atomic promotion, audit, enforcement, verified pulls.

Declarations (:mod:`reappreg.evidence.declarations`, below the card and the registry).
``registry/models.yaml`` names every registered model,
the folder that is its artifact, the training inputs that must match a passing guard
certificate, the card front matter, and the gates (one line each). Aliases under
``ungated_aliases`` (``candidate``) need only valid signed evidence; every other alias --
``champion`` or one typed into the MLflow UI -- must point at a version passing its gates.

Registration (:mod:`.registration`, :mod:`.provenance`, :mod:`.keys`): each version is a real
MLflow Model, its files signed with OpenSSF model-signing, and an in-toto Statement v1 /
SLSA provenance v1 (subjects, materials with DVC md5s, guard certificate, evidence, gate
results, git commit, params hash, builder) signed in a DSSE envelope by securesystemslib.

Trust (:mod:`.verification`, :mod:`.gates`): ``verify``, ``promote``, ``pull`` and ``watch``
check the envelope against a trusted key, re-hash the bytes, compare the tags with their
signed copy (a difference is tampering) and read every gate from the signed evidence.

Promotion (:mod:`.promotion`, :mod:`.history`): compare-and-set on the alias under a lock the
store makes atomic, with a signed, hash-chained history that IS the alias state, and a memory of
every chain's head shared by every command. UI promotion (:mod:`.requests`): an alias set in the
MLflow UI is a request the watcher accepts (signed) when its gates and the alias's UI policy
allow, or restores with the reason. Audit and watch (:mod:`.audit`, :mod:`.watch`), pulls
(:mod:`.pull`), the verified Python loader (:mod:`.loader`), connections (:mod:`.connection`).
What the ``reappreg registry`` commands run, given the settings (:mod:`.stage`; not imported here).
"""

from reappreg.registry.audit import AliasFinding, Audit, audit, check_alias
from reappreg.registry.connection import RegistryUnavailable, bounded_http, connect, registration_lock
from reappreg.registry.gates import SIGNED_GATE, GateCheck, evaluate_gates, failed
from reappreg.trust.keys import SignatureInvalid, SigningKey, signing_key, signing_keys
from reappreg.trust import Trust, TrustVersion, load_trust
from reappreg.registry.history import AliasMoved, ChainBroken, HeadMemory, read_history
from reappreg.registry.promotion import Promotion, PromotionRequest, RegistrySession, promote
from reappreg.registry.provenance import AttestedVersion, Provenance, evidence_of, readable_tags, statement
from reappreg.registry.pull import IntegrityError, Pulled, pull, resolve_version
from reappreg.registry.registration import (
    CONTENT_TAG,
    ENVELOPE_TAG,
    KEY_TAG,
    KEYID_TAG,
    MANIFEST_TAG,
    STATUS_TAG,
    Registration,
    RegistrationHooks,
    VersionContent,
    check_certificate,
    check_metrics_describe,
    folder_md5,
    for_ui,
    manifest_of,
    register_version,
    registration_key,
    require_passed,
)
from reappreg.registry.verification import VersionCheck, gates_for, get_version, verify_version
from reappreg.registry.watch import WebhookListener, verify_signature, watch_poll, watch_webhook

__all__ = [
    "AliasFinding", "AliasMoved", "ChainBroken", "HeadMemory", "AttestedVersion", "Audit", "CONTENT_TAG", "ENVELOPE_TAG",
    "GateCheck", "IntegrityError", "KEYID_TAG", "KEY_TAG", "MANIFEST_TAG", "Promotion",
    "PromotionRequest", "Provenance", "Pulled", "Registration", "RegistrationHooks", "RegistrySession",
    "RegistryUnavailable", "SIGNED_GATE", "STATUS_TAG", "SignatureInvalid", "SigningKey", "Trust", "TrustVersion", "VersionCheck", "VersionContent",
    "WebhookListener", "audit", "bounded_http", "check_alias", "check_certificate", "check_metrics_describe", "connect",
    "evaluate_gates", "evidence_of", "failed", "folder_md5", "for_ui", "gates_for", "get_version",
    "load_trust", "manifest_of", "promote", "pull", "read_history", "readable_tags",
    "register_version", "registration_key", "registration_lock", "require_passed", "resolve_version", "signing_key", "signing_keys",
    "statement", "verify_signature", "verify_version", "watch_poll", "watch_webhook",
]
