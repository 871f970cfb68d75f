"""The format gate: a reappraisal answer must be one or two sentences.

Sentence boundaries come from pySBD (rule-based sentence boundary disambiguation, which
passes the "Golden Rules" for English: abbreviations such as Dr./Mr./e.g./i.e./etc.,
ellipses, quotes after terminal punctuation, decimal numbers, text without a final
full stop). A segment counts as a sentence only if it contains a letter or digit, so a
stray "..." or a lone quote mark is not a sentence of its own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

_HAS_CONTENT = re.compile(r"[^\W_]", re.UNICODE)
_WRAPPED_LINE = re.compile(r"[ \t]*\n\s*(?=[a-z])")


@functools.lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    # clean=False: segment the text exactly as written (no whitespace/newline rewriting).
    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (stripped), ignoring segments without any letter or digit."""
    if not text or not text.strip():
        return []
    # pySBD treats a line break as a boundary (a bulleted answer is several sentences even
    # without full stops); a break followed by a lower-case letter is a hard-wrapped line
    # inside one sentence, so it is joined first.
    text = _WRAPPED_LINE.sub(" ", text)
    sentences = []
    for segment in _segmenter().segment(text):
        segment = segment.strip()
        if _HAS_CONTENT.search(segment):
            sentences.append(segment)
    return sentences


def count_sentences(text: str) -> int:
    return len(split_sentences(text))


def format_gate_ok(text: str, max_sentences: int = 2) -> bool:
    """True when ``text`` has between one and ``max_sentences`` sentences."""
    return 1 <= count_sentences(text) <= max_sentences


def rejected_share(gate_ok: Iterable[bool]) -> float | None:
    """The share of texts the format gate rejects, from each text's verdict
    (:func:`format_gate_ok`); None for no texts. The one definition behind every figure that
    states it (the RM metrics' ``format_gate_fail_rate`` and ``<split>.format_gate``)."""
    verdicts = [bool(ok) for ok in gate_ok]
    return sum(not ok for ok in verdicts) / len(verdicts) if verdicts else None
