"""Ingest: the canonical dataset from the ``data`` params, from the seeded sample or an import.

Its own module so that the canonical schema (``data.canonical``) and the sample generator
(``data.sample``, which builds on the schema) import each other in one direction only.
"""

from __future__ import annotations

from pathlib import Path

from reappreg.data.canonical import (
    CanonicalData,
    declared_facts,
    check_text,
    import_canonical_folder,
    import_flat,
    import_sharma2023,
)
from reappreg.data.sample import generate_sample
from reappreg.errors import InputError
from reappreg.settings.data import DataSettings


def ingest(settings: DataSettings) -> CanonicalData:
    """Build the canonical dataset from the ``data`` params; the data facts go to meta.json."""
    if settings.source == "sample":
        data = generate_sample(**settings.sample.model_dump())
    elif settings.path is None:
        raise InputError(f"data.source is {settings.source!r} but data.path is not set; point it at the file to import")
    elif settings.source == "sharma2023":
        data = import_sharma2023(settings.path)
    else:
        path = Path(settings.path)
        data = import_canonical_folder(path, settings) if path.is_dir() else import_flat(path, settings)
    data.meta = {"duplicate_rating_rows_dropped": 0, "duplicate_rating_rows_averaged": 0,
                 "ratings_averaged_over_repeats": 0, **data.meta, **declared_facts(data, settings)}
    check_text(data, f"data.source {settings.source!r}")
    return data


__all__ = ["ingest"]
