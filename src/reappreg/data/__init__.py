"""Rating data: the canonical tables, the seeded sample, importers' readers, validation and the held-out split."""
