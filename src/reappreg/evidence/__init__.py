"""The evidence / declarations layer: what card, registry, report and stats share, importing none of them.

* :mod:`.declarations`: ``registry/models.yaml`` validated (the registered models, their
  artifacts and inputs, card front matter and gates);
* :mod:`.reference`: its ``reference_bar:`` (the bar claims are tested against, and the decision
  settings pinned beside it);
* :mod:`.flat`: the one flattener (nested evidence as dotted keys: what cards, gates, tags and
  MLflow params are named by; every stage's run uses it);
* :mod:`.formatting`: the one number formatter (what cards and the report print).

Reading the pipeline's evidence files into one bundle is ``reappreg.card.evidence``. Nothing here
imports the library beyond ``reappreg.errors`` and ``reappreg.io``; nothing is imported here, so a
stage reads only the modules it uses.
"""
