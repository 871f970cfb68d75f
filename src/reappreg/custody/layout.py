"""The signed in-toto layout, and the chain verified with in-toto's own verification at registration.

Signing (:func:`sign_layout`). The layout is the committed steps (:mod:`.plan`) with the
functionary keys of the ``pipeline`` role and an expiry, signed by the ``layout`` role
(both from the trust metadata). With it the signer signs the ``declarations`` link: its
product is ``registry/models.yaml`` (the bar, the decision settings, the gates), so a bar
lowered without a key is refused by every step that reads the file. The team's signed
layout is committed (``registry/custody/``, by a ``layout`` key holder: ``reappreg registry
keys sign-layout``); this clone's local one-key root signs its own on first use
(``work/registry/custody/``), and again only when asked, with a reason.

Verifying (:func:`verify_chain`). in-toto's verification (``in_toto.verifylib``) over the
steps that lead to ``register``: the layout's signature by a ``layout`` key and its expiry;
one link per step, signed by a key the layout names (``LinkNotFoundError`` for a missing
step, a threshold error for a stranger's key); then every step's material and product rules,
so each step consumed exactly the products of the step before it. The signed layout must be
the one dvc.yaml generates today.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.custody.links import CustodyError, Signing, _in, check_consumed, load_link, record, sign_link, verify_link
from reappreg.custody.plan import (
    DECLARATIONS,
    DECLARATIONS_FILE,
    DECLARATIONS_LINK,
    LAYOUT_FILE,
    Template,
    custody_dir,
    link_path,
    load_template,
)

LAYOUT_EXPIRY = dt.timedelta(days=365)


def _key_dicts(trust: Any, version: Any, role: str) -> tuple[dict[str, dict[str, Any]], int]:
    """The role's keys under ``version`` in the key-dict form in-toto's layout holds, and its threshold."""
    origin = trust.origin(version)
    keyids, threshold = origin.role_keyids(version, role)
    delegations = origin.targets(version.root, version.targets).delegations
    out = {}
    for keyid in keyids:
        key = delegations.keys[keyid].to_dict()
        out[keyid] = {"keyid": keyid, **key}
    return out, threshold


def build_layout(template: Template, trust: Any, version: Any, now: dt.datetime | None = None) -> Any:
    from in_toto.models.layout import Layout, Step

    keys, threshold = _key_dicts(trust, version, "pipeline")
    layout_keys, _ = _key_dicts(trust, version, "layout")
    steps = []
    for plan in template.steps.values():
        signers = list(layout_keys) if plan.name == DECLARATIONS else list(keys)
        steps.append(Step(name=plan.name, expected_materials=plan.expected_materials,
                          expected_products=plan.expected_products, pubkeys=signers,
                          expected_command=plan.command, threshold=1 if plan.name == DECLARATIONS else threshold))
    expires = ((now or dt.datetime.now(dt.timezone.utc)) + LAYOUT_EXPIRY).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Layout(steps=steps, keys={**keys, **layout_keys}, expires=expires,
                  readme=f"reappreg pipeline, generated from dvc.yaml; keys of {version}")


@dataclass(frozen=True)
class SignedLayout:
    folder: Path
    layout: Path
    declarations: Path


def sign_layout(root: Path, signing: Signing, *, reason: str) -> SignedLayout:
    """Sign the layout (``layout`` role) and the ``declarations`` link over ``registry/models.yaml`` as they
    are now, into the signer's origin's custody folder. ``signing`` must hold the ``layout`` role."""
    from in_toto.models.metadata import Envelope

    from reappreg.io import write_bytes
    from reappreg.trust.keys import crypto_signer

    version = signing.trust.current_for([k.keyid for k in signing.keys], "layout")
    template = load_template(root)
    envelope = Envelope.from_signable(build_layout(template, signing.trust, version))
    for key in signing.keys:
        envelope.create_signature(crypto_signer(key))
    folder = custody_dir(root, version.origin)
    write_bytes(folder / LAYOUT_FILE, json.dumps(envelope.to_dict(), sort_keys=True, indent=1).encode("utf-8"))
    with _in(root):
        products = record([DECLARATIONS_FILE])
    data = sign_link(Signing(signing.trust, signing.keys, version), DECLARATIONS, materials={}, products=products,
                     command=[], environment={"trust": version.as_dict(), "reason": reason})
    write_bytes(folder / DECLARATIONS_LINK, data)
    return SignedLayout(folder, folder / LAYOUT_FILE, folder / DECLARATIONS_LINK)


def ensure_local_layout(root: Path, signing: Signing) -> None:
    """This clone's local one-key root signs its layout on first use (said in the reason); never again
    unless asked: a later edit of ``registry/models.yaml`` or dvc.yaml needs ``sign-layout``."""
    folder = custody_dir(root, "local")
    if signing.version.origin == "local" and not (folder / LAYOUT_FILE).is_file():
        sign_layout(root, signing, reason="made on first use by this clone's local one-key root")


def verify_chain(root: Path, trust: Any, origin: str, *, up_to: str = "register") -> str:
    """in-toto's verification of every step that leads to ``up_to`` (see the module docstring); returns
    a one-line account, raises CustodyError naming the step and file that failed."""
    from in_toto import exceptions as intoto_errors
    from in_toto import verifylib
    from in_toto.models.layout import Layout
    from in_toto.models.metadata import Metadata

    folder = custody_dir(root, origin)
    layout_path = folder / LAYOUT_FILE
    if not layout_path.is_file():
        raise CustodyError(f"{layout_path}: no signed layout for the {origin} root")
    metadata = Metadata.load(str(layout_path))
    origin_trust = trust.origins[origin]
    layout_keys, _ = _key_dicts(trust, origin_trust.current, "layout")
    template = load_template(root)
    steps_now = set(template.ancestors(up_to))
    with tempfile.TemporaryDirectory(prefix="reappreg-custody-") as tmp:
        links = Path(tmp)
        try:
            verifylib.verify_metadata_signatures(metadata, layout_keys)
            layout = metadata.get_payload()
            verifylib.verify_layout_expiration(layout)
            signed = {s.name: (s.expected_materials, s.expected_products) for s in layout.steps}
            wanted = {name: (plan.expected_materials, plan.expected_products) for name, plan in template.steps.items()}
            if signed != wanted:
                differ = sorted(n for n in set(signed) | set(wanted) if signed.get(n) != wanted.get(n))
                raise CustodyError(f"the signed layout {layout_path} is not the one dvc.yaml generates today (steps "
                                   f"{', '.join(differ[:8])} differ): a `layout` key holder re-signs it "
                                   "(`reappreg registry keys sign-layout --reason ...`)")
            # The functionaries must be the 'pipeline' keys in force: a layout signed before a key was
            # retired would still let that key sign links (re-signing after a key change closes that).
            pipeline_now, threshold_now = _key_dicts(trust, origin_trust.current, "pipeline")
            stale = [s.name for s in layout.steps if s.name != DECLARATIONS
                     and (set(s.pubkeys) != set(pipeline_now) or s.threshold != threshold_now)]
            if stale:
                raise CustodyError(f"the signed layout {layout_path} names other 'pipeline' keys or threshold than "
                                   f"{origin_trust.current} ({len(stale)} steps, e.g. {sorted(stale)[0]}): after a key change a "
                                   "`layout` key holder re-signs it (`reappreg registry keys sign-layout --reason ...`)")
            sub = Layout(steps=[s for s in layout.steps if s.name in steps_now], keys=layout.keys, expires=layout.expires)
            for step in sub.steps:
                source = folder / DECLARATIONS_LINK if step.name == DECLARATIONS else root / link_path(step.name)
                if source.is_file():
                    envelope = Metadata.load(str(source))
                    strangers = [k for k in envelope.signatures if k not in step.pubkeys]
                    if strangers and not set(envelope.signatures) & set(step.pubkeys):
                        raise CustodyError(f"the link of step '{step.name}' ({source.relative_to(root)}) is signed by "
                                           f"{', '.join(k[:16] for k in strangers)}, a key the layout does not name for that "
                                           f"step (its functionaries: {', '.join(k[:16] for k in step.pubkeys)})")
                    for keyid in envelope.signatures:
                        shutil.copy(source, links / f"{step.name}.{keyid[:8]}.link")
            steps_metadata = verifylib.load_links_for_layout(sub, str(links))
            steps_metadata = verifylib.verify_link_signature_thresholds(sub, steps_metadata)
            chain = verifylib.verify_sublayouts(sub, steps_metadata, str(links), 10)
            verifylib.verify_threshold_constraints(sub, chain)
            reduced = verifylib.reduce_chain_links(chain)
            verifylib.verify_all_item_rules(sub.steps, reduced)
        except CustodyError:
            raise
        except intoto_errors.LinkNotFoundError as exc:
            raise CustodyError(f"custody chain to '{up_to}': {exc} (a step without its signed link: run it under "
                               "`dvc repro`)") from None
        except intoto_errors.ThresholdVerificationError as exc:
            raise CustodyError(f"custody chain to '{up_to}': {exc} (a link signed by a key the layout does not name, "
                               "or altered after signing)") from None
        except intoto_errors.RuleVerificationError as exc:
            raise CustodyError(f"custody chain to '{up_to}': {exc} (a step consumed something no step before it "
                               "produced, or produced something it should not)") from None
        except (intoto_errors.SignatureVerificationError, intoto_errors.LayoutExpiredError) as exc:
            raise CustodyError(f"the layout {layout_path}: {type(exc).__name__}: {exc}") from None

    adopted = []
    for name in steps_now:  # and each link under the trust version it names (a retired key's link fails here)
        envelope, payload = load_link(root, name, origin)
        if verify_link(trust, envelope, payload, name, origin):
            adopted.append(name)
    said = (f"; {len(adopted)} link(s) signed under another root by a key the {origin} root names for 'pipeline' now"
            if adopted else "")
    return (f"in-toto verified {len(steps_now)} step(s) leading to '{up_to}' against the layout signed by the {origin} "
            f"'layout' role: every link signed by a 'pipeline' key, every step's materials the products of the step "
            f"before it, {DECLARATIONS_FILE} as the declarations signed with the layout{said}")


__all__ = ["SignedLayout", "build_layout", "ensure_local_layout", "sign_layout", "verify_chain"]


def verify_registration(root: Path, trust: Any, origin: str) -> str:
    """What ``register`` checks before it signs anything: the chain to it (:func:`verify_chain`), and that
    every file it reads now is, by sha256, a product of the step that must have produced it (its own
    consumption, checked here too, so a register run by hand is held to it as well)."""

    account = verify_chain(root, trust, origin, up_to="register")
    template = load_template(root)
    step = template.step("register")
    with _in(root):
        materials = record(step.materials)
    consumed = check_consumed(root, template, step, materials, trust, origin)
    return f"{account}; register's own inputs: {', '.join(consumed)}"


__all__ += ["verify_registration"]


def custody_links(root: Path, origin: str) -> dict[str, str]:
    """Repository path -> sha256 of every signed link the registration's chain holds (the declarations and
    the links of the steps leading to ``register``)."""
    import hashlib

    template = load_template(root)
    out = {}
    for name in template.ancestors("register"):
        path = custody_dir(root, origin) / DECLARATIONS_LINK if name == DECLARATIONS else root / link_path(name)
        out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


__all__ += ["custody_links"]
