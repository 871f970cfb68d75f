"""The registry's keys as TUF metadata: who may sign what, with thresholds, rotation, expiry and no rollback.

:mod:`.repository` writes it (key holders: ``reappreg registry keys``), :mod:`.client` verifies it
with TUF's own client from the root this clone pinned, :mod:`.local` makes this clone's local
key a one-key root on first use (the zero-setup default). Everything the registry signs names
the trust version it was signed under (:class:`TrustVersion`), and is checked against the keys
and threshold of its role in that version.
"""

from reappreg.trust.client import Signer, SignatureInvalid, Trust, TrustError, TrustOrigin, TrustVersion, trust_version_of
from reappreg.trust.local import LOCAL, TEAM, load_trust
from reappreg.trust.repository import ROLES, TOP_ROLES, RoleKeys

__all__ = ["LOCAL", "ROLES", "RoleKeys", "Signer", "SignatureInvalid", "TEAM", "TOP_ROLES", "Trust", "TrustError",
           "TrustOrigin", "TrustVersion", "load_trust", "trust_version_of"]
