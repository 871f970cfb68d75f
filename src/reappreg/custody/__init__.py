"""Custody by signed links (in-toto): every stage signs what it consumed and produced, and registration
verifies the chain from the raw inputs to every file it signs as evidence.

:mod:`.plan` generates the layout's steps from dvc.yaml (committed as ``registry/custody/layout.json``);
:mod:`.links` signs each stage's link under ``dvc repro`` and refuses inputs no signed step produced
(with what the stage noted about its run, :mod:`.notes`, as the link's byproducts);
:mod:`.layout` signs the layout (with ``registry/models.yaml`` as the ``declarations`` step) and runs
in-toto's verification over the chain at registration. Keys come from the trust metadata
(:mod:`reappreg.trust`): TUF says who holds the ``pipeline`` and ``layout`` roles, in-toto
what each step may consume and produce.
"""
