"""Adversaries and honest corpora for the guard's tests and benchmarks: not part of the library.

What attacks the guard (``disguise``: disguised copies of a held-out answer, per-word edits;
``splits``: an answer cut into pieces spread over records, each buried in filler) and what
it must let through (``honest``: texts built from stock phrasing measured in a reference
corpus) are generated here, seeded, so the tests (``tests/guard/``) and the benchmarks
(``benchmarks/guard_*.py``) plant exactly the same leaks. Nothing under ``src/`` imports it:
a change here re-runs no pipeline stage.

Import it as ``guard_support``: the benchmarks run with ``benchmarks/`` first on
``sys.path`` (``python benchmarks/guard_bench.py``), and pytest adds the folder through
``pythonpath`` in ``pyproject.toml``.
"""
