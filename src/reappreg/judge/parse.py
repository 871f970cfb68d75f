"""Verdicts: the label distribution a judge's verdict is read from, and free-text parsing.

A verdict is one of ``A``, ``B``, ``tie`` (when allowed) or ``unparseable``. The backends
read it without free text where they can (:mod:`reappreg.judge.local`,
:mod:`reappreg.judge.http`); :func:`parse_verdict` is the last resort for a server that
offers neither logprobs nor constrained decoding, and its rows say ``free_text``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from reappreg.errors import ReappregError
from reappreg.judge.prompt import TIE


class JudgeBackendError(ReappregError):
    """The judge backend failed (unreachable endpoint, HTTP error, malformed or oversized response...)."""


@dataclass(frozen=True)
class JudgeResult:
    """One judged prompt. Probabilities are over the allowed labels (None without them)."""

    raw_output: str
    verdict: str
    verdict_method: str
    p_a: float | None = None
    p_b: float | None = None
    p_tie: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def from_label_probabilities(mass: Mapping[str, float], labels: tuple[str, ...], method: str,
                             raw_output: str) -> JudgeResult:
    """Renormalise the probability mass on each label; the verdict is the most probable label.

    ``mass`` maps each label to the (unnormalised) probability the model put on it. Equal
    top masses of A and B are a tie (0.5 for both answers). Zero mass on every label has no
    verdict and is ``unparseable`` (never a guess).
    """
    values = {label: float(mass.get(label, 0.0)) for label in labels}
    if not all(math.isfinite(v) and v >= 0 for v in values.values()):
        raise ValueError(f"label masses must be finite and >= 0, got {values}")
    total = sum(values.values())
    if total <= 0:
        return JudgeResult(raw_output, "unparseable", method)
    probs = {label: v / total for label, v in values.items()}
    best = max(probs.values())
    top = [label for label in labels if probs[label] == best]
    verdict = top[0] if len(top) == 1 else TIE
    return JudgeResult(raw_output, verdict, method, p_a=probs["A"], p_b=probs["B"],
                       p_tie=probs.get(TIE) if TIE in labels else None)


def from_label(text: str, labels: tuple[str, ...], method: str) -> JudgeResult | None:
    """A constrained reply that is exactly one label (tie case-insensitive); None otherwise.

    A constrained reply names a label but carries no probabilities: p_a/p_b/p_tie stay None.
    """
    stripped = text.strip()
    for label in labels:
        if stripped == label or (label == TIE and stripped.lower() == TIE):
            return JudgeResult(text, label, method)
    return None


def from_free_text(text: str | None, labels: tuple[str, ...]) -> JudgeResult:
    verdict = parse_verdict(text)
    if verdict == TIE and TIE not in labels:
        verdict = "unparseable"  # a tie was not on offer: not a verdict we may count
    return JudgeResult("" if text is None else text, verdict, "free_text")


_LETTER_OR_TIE = (
    r"(?:\(\s*(?P<paren>[abAB])\s*\)"  # (a) (B)
    r"|\[\s*(?P<brack>[abAB])\s*\]"  # [a] [B]
    r"|(?P<upper>[AB])\b"  # bare capital letter
    r"|(?P<lower>[ab])(?=\s*$|[.,;:!)\]\n*])"  # bare small letter only when it ends the phrase
    r"|(?P<tie>(?i:tie|draw|equal))\b)"
)
_STRONG_LABEL = r"(?i:final\s+verdict|verdict|final\s+answer|answer|winner|choice|decision|result|output|preference)"
_WEAK_LABEL = r"(?i:reappraisal|response|answer|output|option|assistant|candidate|text)"
_BETTER = r"(?i:is\s+(?:the\s+)?(?:better|more|stronger|superior|preferred|preferable|best|winner))"

# Tiers from most to least explicit. The first tier that yields any verdict decides; if
# that tier yields two different verdicts the output is ambiguous and stays unparseable
# (a weaker tier must not overrule a contradiction in a stronger one).
_TIERS: list[re.Pattern[str]] = [
    re.compile(r"\[\[\s*(?P<double>(?i:A|B|C|tie))\s*\]\]"),  # MT-Bench style, [[C]] = tie
    re.compile(rf"\b{_STRONG_LABEL}\s*(?:[:=\-]|\bis\b)\s*(?:\*\*)?\s*{_LETTER_OR_TIE}"),
    re.compile(rf"(?:\b{_WEAK_LABEL}\s+)?\(?(?P<subject>[AB])\)?\s+{_BETTER}\b"),
    re.compile(rf"\b(?i:prefer|prefers|preferred|choose|chose|pick|select)\s+(?:{_WEAK_LABEL}\s+)?{_LETTER_OR_TIE}"),
    re.compile(r"^\s*[*_\"'`>#\s]*(?:\(\s*(?P<paren>[abAB])\s*\)|(?P<lead>[AB])(?=\s*$|[.,;:!)\]\n*\"'`]))"),  # "A", "B.", "(b)"
    re.compile(rf"\b{_WEAK_LABEL}\s*{_LETTER_OR_TIE}"),  # "Answer A", "Output (a)", "[Reappraisal B]"
    re.compile(r"(?i)\b(?P<tieword>tie|equally\s+(?:good|effective|helpful|strong)|both\s+are\s+equally)\b"),
]


def _match_verdict(match: re.Match[str]) -> str:
    groups = {k: v for k, v in match.groupdict().items() if v}
    for key in ("double", "paren", "brack", "upper", "lower", "subject", "lead"):
        if key in groups:
            value = groups[key].upper()
            return "tie" if value in ("C", "TIE") else value
    return "tie"  # only the tie alternatives are left


def parse_verdict(text: str | None) -> str:
    """Map a judge's free-text output to ``A``, ``B``, ``tie`` or ``unparseable``.

    Tolerates ``A``, ``[[A]]``, ``Answer A``, ``Output (a)``, ``Verdict: B``, ``tie``,
    ``[[C]]``, ``Reappraisal A is better than Reappraisal B`` and markdown emphasis. A
    thinking judge's reasoning (before ``</think>``) is ignored. Contradictory or absent
    verdicts return ``unparseable`` -- never a guess.
    """
    if text is None:
        return "unparseable"
    body = text.rsplit("</think>", 1)[-1] if "</think>" in text else text
    if not body.strip():
        return "unparseable"
    for pattern in _TIERS:
        found = {_match_verdict(m) for m in pattern.finditer(body)}
        if len(found) == 1:
            return found.pop()
        if len(found) > 1:
            return "unparseable"
    return "unparseable"


__all__ = ["JudgeBackendError", "JudgeResult", "from_free_text", "from_label", "from_label_probabilities", "parse_verdict"]


def from_reply(method: str, content: str | None, labels: tuple[str, ...]) -> JudgeResult | None:
    """The verdict a label-only reply gives under ``method`` (guided, json_schema, free_text).

    None when a constrained method's reply names no label (the judge then tries its next
    method). The stats stage calls this too, to re-derive each row's verdict from the judge's
    own reply instead of taking the row's label.
    """
    if method == "guided":
        return from_label(content or "", labels, "guided")
    if method == "json_schema":
        try:
            verdict = json.loads(content or "").get("verdict")
        except (json.JSONDecodeError, AttributeError):
            return None
        found = from_label(str(verdict), labels, "json_schema") if isinstance(verdict, str) else None
        return None if found is None else JudgeResult(content or "", found.verdict, "json_schema")
    if method == "free_text":
        return from_free_text(content, labels)
    raise ValueError(f"from_reply: {method!r} is not a label-only method")
