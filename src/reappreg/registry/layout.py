"""Where a registered version's signed parts live: the tag holding its envelope's digest, its
attestation artifact paths, its subjects (every file's sha256) and its description (the card
as the UI shows it). Read by registration, which writes them, and by verification, which
checks them, so neither imports the other."""

from __future__ import annotations

from pathlib import Path

from reappreg.errors import InputError
from reappreg.hashing import sha256_file

ENVELOPE_TAG = "reappreg.provenance_sha256"
# MLflow's SQL schema stores a version description in VARCHAR(5000) (enforced by
# PostgreSQL/MySQL, not by sqlite), so the card is cut at a section boundary to fit.
MAX_DESCRIPTION = 5000


def attestation_paths(name: str, version: str) -> tuple[str, str]:
    """(provenance envelope, model-signing bundle) run-relative artifact paths of a version."""
    return f"{name}/attestations/v{version}.provenance.dsse.json", f"{name}/attestations/model.sig.json"


def subject_digests(folder: Path) -> dict[str, str]:
    """relpath -> sha256 of every file under ``folder`` (the statement's subjects)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise InputError(f"{path}: symlinks are not registered (the bytes behind them are not signed)")
        if path.is_file():
            out[path.relative_to(folder).as_posix()] = sha256_file(path)
    return out


def for_ui(card: str) -> str:
    """The card as the MLflow UI's description: its body without the YAML front matter.

    (The front matter's facts are the version's tags already; shown as text it sat above
    the card's title.) The whole card, front matter included, is the run artifact README.md.
    """
    from reappreg.card.meta import card_body

    return card_body(card)


def fit_description(card: str, full_card_at: str, limit: int = MAX_DESCRIPTION) -> str:
    """The card, cut at the last section heading that fits when it exceeds ``limit``."""
    if len(card) <= limit:
        return card
    note = f"\n\n_(Cut to the registry's {limit}-character description limit; the full card is the artifact `{full_card_at}`.)_\n"
    head = card[: limit - len(note)]
    cut = head.rfind("\n## ")
    return (head[:cut] if cut > 0 else head) + note


__all__ = ["ENVELOPE_TAG", "MAX_DESCRIPTION", "attestation_paths", "fit_description", "for_ui", "subject_digests"]
