"""Guard normalisation and decoding views on adversarial inputs: seconds per megabyte at
0.1, 1 and 4 MB (normalisation plus every decoding view, as the scan applies them).

Linear time means seconds/MB stays flat as the input grows; the last column is the ratio of
the 4 MB rate to the 0.1 MB rate, measured in this one run (about 1 for linear, about 40
for quadratic growth over that range).

    python benchmarks/guard_linear_bench.py
"""

from __future__ import annotations

import time

from reappreg.guard.decode import DECODE_VIEWS
from reappreg.guard.normalise import normalise

ANSWER = "It may help to recognise that your friend may be saving her thanks for a calmer moment. "
SIZES_MB = (0.1, 1.0, 4.0)


def _fill(unit: str, mb: float) -> str:
    n = int(mb * 1_000_000)
    return (unit * (n // len(unit) + 1))[:n]


INPUTS = {
    "unclosed comments": lambda mb: ANSWER + _fill("<!--", mb),
    "unclosed tags": lambda mb: ANSWER + _fill("<a title='x ", mb),
    "unclosed quotes in a tag": lambda mb: ANSWER + _fill('<b c="', mb),
    "nested overrides": lambda mb: ANSWER + _fill("\u202e\u202dab", mb),
    "combining marks": lambda mb: ANSWER + "a" + _fill("\u0301\u0345", mb),
    "no spaces": lambda mb: _fill("answerfriendcalmer", mb),
    "entities": lambda mb: ANSWER + _fill("&amp;", mb),
    "percent escapes": lambda mb: ANSWER + _fill("%25%2", mb),
    "backslash escapes": lambda mb: ANSWER + _fill("\\u00\\x4\\", mb),
    "unclosed bbcode/tokens": lambda mb: ANSWER + _fill("[b=<|[A", mb),
    "latex commands": lambda mb: ANSWER + _fill("\\emph{a}\\", mb),
    "leet runs": lambda mb: _fill("c0n5", mb),
    "symbol alphabets": lambda mb: ANSWER + _fill("\U0001F172\u1D04\u2C65", mb),
}


def _all_views(text: str) -> None:
    normalise(text)
    for view in DECODE_VIEWS:
        normalise(view.decode(text))


def main() -> None:
    print(f"{'input':26s} " + " ".join(f"{f'{mb:g} MB s/MB':>12s}" for mb in SIZES_MB) + f" {'4MB/0.1MB':>10s}")
    for name, make in INPUTS.items():
        rates = []
        for mb in SIZES_MB:
            text = make(mb)
            started = time.perf_counter()
            _all_views(text)
            rates.append((time.perf_counter() - started) / (len(text.encode("utf-8")) / 1e6))
        print(f"{name:26s} " + " ".join(f"{r:12.3f}" for r in rates) + f" {rates[-1] / rates[0]:10.2f}")


if __name__ == "__main__":
    main()
