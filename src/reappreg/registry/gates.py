"""Gates evaluated from signed evidence only.

Each declared :class:`~reappreg.evidence.declarations.Gate` compares one key of the flat
evidence dict recorded in a version's signed statement with a fixed value or with another
evidence key. A missing key, a null, or a non-number under a numeric comparison fails the
gate and says so. The implicit first gate, ``signed_evidence``, passes only when the
version's envelope verified against a trusted key and its bytes match the signed digests;
without it every other gate fails too (there is no evidence to read).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reappreg.evidence.declarations import Gate

_OPS = {"==": operator.eq, "!=": operator.ne, ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
SIGNED_GATE = "signed_evidence"


@dataclass
class GateCheck:
    gate: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "passed": self.passed, "detail": self.detail}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "null" if value is None else str(value)


def check_gate(gate: Gate, evidence: Mapping[str, Any]) -> GateCheck:
    if gate.evidence not in evidence:
        return GateCheck(gate.name, False, f"{gate.evidence} missing from the signed evidence")
    left = evidence[gate.evidence]
    if gate.than is not None:
        if gate.than not in evidence:
            return GateCheck(gate.name, False, f"{gate.than} missing from the signed evidence")
        right, shown = evidence[gate.than], f"{gate.than}={_show(evidence[gate.than])}"
    else:
        right, shown = gate.value, _show(gate.value)
    detail = f"{gate.evidence}={_show(left)} {gate.op} {shown}" + (f" [{gate.source}]" if gate.source else "")
    if gate.op in ("==", "!="):
        a, b = _number(left), _number(right)
        same = (a == b) if a is not None and b is not None else left == right
        return GateCheck(gate.name, same if gate.op == "==" else not same, detail)
    a, b = _number(left), _number(right)
    if a is None or b is None:
        return GateCheck(gate.name, False, detail + " (not a number)")
    return GateCheck(gate.name, bool(_OPS[gate.op](a, b)), detail)


def evaluate_gates(gates: list[Gate], evidence: Mapping[str, Any] | None, *, unsigned_reason: str | None = None) -> list[GateCheck]:
    """``signed_evidence`` then every declared gate. ``evidence`` None (no valid envelope) fails all of them."""
    if evidence is None:
        why = unsigned_reason or "no valid signed evidence"
        return [GateCheck(SIGNED_GATE, False, why)] + [GateCheck(g.name, False, f"no valid signed evidence ({g.evidence} unread)")
                                                       for g in gates]
    return [GateCheck(SIGNED_GATE, True, "envelope signed by a trusted key; bytes match")] + [check_gate(g, evidence) for g in gates]


def failed(checks: list[GateCheck]) -> list[GateCheck]:
    return [c for c in checks if not c.passed]


def describe_failures(checks: list[GateCheck]) -> str:
    return "; ".join(f"{c.gate} ({c.detail})" for c in failed(checks))
