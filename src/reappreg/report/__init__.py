"""One page a person reads after ``dvc repro``: every stage's outcome, from its tracked files.

:func:`collect` reads the pipeline's output files (data, validation report, guard
certificate, reward-model and policy metrics and the RM comparison figure, judge calibration,
win-rates, the results table across models, claims, registration receipt, leak scan) and turns
each into a :class:`Section` of tables and figures; after the summary the page leads with the
results table (one row per row of ``metrics/results.json``). It invents nothing: a file that is absent or unreadable becomes a section that
says which file and why (and which stage writes it), and a value a file does not have is
shown as missing, not computed. Other modules own these files' schemas, so they are read
tolerantly, by key: known keys get readable labels, and whatever else is there is still
shown.

:func:`render_html` writes one self-contained page (figures embedded as PNG data URIs, no
external CSS or script); :func:`render_markdown` its text twin (the same tables; figures
are named, their numbers are in the tables). :func:`headline` picks the handful of numbers
``dvc metrics show`` compares between experiments.
"""

from reappreg.report.blocks import Figure, Section, Table, empty_reason
from reappreg.report.headline import HEADLINE_MAX_KEYS, headline
from reappreg.report.render import render_html, render_markdown
from reappreg.report.sections import STAGE_OF, ReportSources, collect

__all__ = ["HEADLINE_MAX_KEYS", "STAGE_OF", "Figure", "ReportSources", "Section", "Table", "collect", "empty_reason",
           "headline", "render_html", "render_markdown"]
