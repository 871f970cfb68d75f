"""Guard normalisation, decoding views and the whole scan on adversarial inputs: seconds per
megabyte at 0.1, 1 and 4 MB, and the CPU seconds of the largest.

Linear time means seconds/MB stays flat as the input grows; the ratio column is the 4 MB rate
over the 0.1 MB rate, measured in this one run (about 1 for linear, about 40 for quadratic
growth over that range). Each input is what the scan does with one text
(``detect._expand_views``): normalised, and through every decoding view, each view's output
normalised again where the view changed the text. With ``--scan`` the last columns time the
whole ``check_units`` of the text (every detector, every view) against a small held-out set.
The target: every input at 4 MB (``guard.max_text_chars`` is 4,000,000) under 10 s of CPU.

    python benchmarks/guard_linear_bench.py           # views
    python benchmarks/guard_linear_bench.py --scan    # and the whole scan
"""

from __future__ import annotations

import argparse
import time

from reappreg.guard.decode import decode_views
from reappreg.guard.normalise import scan_views

ANSWER = "It may help to recognise that your friend may be saving her thanks for a calmer moment. "
SIZES_MB = (0.1, 1.0, 4.0)
TARGET_CPU_S = 10.0


def _fill(unit: str, mb: float) -> str:
    n = int(mb * 1_000_000)
    return (unit * (n // len(unit) + 1))[:n]


INPUTS = {
    "unclosed comments": lambda mb: ANSWER + _fill("<!--", mb),
    "unclosed tags": lambda mb: ANSWER + _fill("<a title='x ", mb),
    "unclosed quotes in a tag": lambda mb: ANSWER + _fill('<b c="', mb),
    "attributes without end": lambda mb: ANSWER + _fill("<i data-x=a title=b ", mb),
    "nested overrides": lambda mb: ANSWER + _fill("\u202e\u202dab", mb),
    "combining marks": lambda mb: ANSWER + "a" + _fill("\u0301\u0345", mb),
    "no spaces": lambda mb: _fill("answerfriendcalmer", mb),
    "entities": lambda mb: ANSWER + _fill("&amp;", mb),
    "percent escapes": lambda mb: ANSWER + _fill("%25%2", mb),
    "quoted-printable runs": lambda mb: ANSWER + _fill("=3D=3", mb),
    "unclosed MIME words": lambda mb: ANSWER + _fill("=?utf-8?q?a_b", mb),
    "backslash escapes": lambda mb: ANSWER + _fill("\\u00\\x4\\", mb),
    "unclosed bbcode/tokens": lambda mb: ANSWER + _fill("[b=<|[A", mb),
    "latex commands": lambda mb: ANSWER + _fill("\\emph{a}\\", mb),
    "leet runs": lambda mb: _fill("c0n5", mb),
    "symbol alphabets": lambda mb: ANSWER + _fill("\U0001F172\u1D04\u2C65", mb),
    "rotated letters": lambda mb: ANSWER + _fill("\u0250\u01dd\u0265 ", mb),
}


def views_of(text: str) -> None:
    """What the scan does with one text before the detectors: normalise it, decode it in every
    view, normalise each decoding that differs."""
    scan_views(text)
    for _, (decoded,) in decode_views([text]):
        if decoded != text:
            scan_views(decoded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", action="store_true", help="also time the whole check_units of each input")
    parser.add_argument("--sizes", type=float, nargs="+", default=list(SIZES_MB),
                        help="sizes in MB (a quick run: --sizes 4; the ratio column needs two sizes)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="time only the inputs whose name contains one of these words")
    args = parser.parse_args()
    sizes = tuple(args.sizes)
    inputs = {name: make for name, make in INPUTS.items()
              if args.only is None or any(word in name for word in args.only)}
    scan = None
    if args.scan:
        from reappreg.guard import AnswerMeta, FastHasher, HeldoutIndex, TextUnit, check_units
        from reappreg.settings.guard import GuardSettings

        index = HeldoutIndex.build([AnswerMeta("a1", None, "v1"), AnswerMeta("a2", None, "v2")],
                                   [ANSWER, "Perhaps the meeting ran long and nobody noticed how quiet you had become."],
                                   GuardSettings(semantic={"enabled": False}), FastHasher())

        def scan(text: str) -> None:
            check_units(index, [TextUnit("t", "r", "text", text)])

    views_of(ANSWER + "\u0250 th4t")  # the tables the views build once (ICU, rotated letters, leetspeak) before timing
    header = f"{'input':26s} " + " ".join(f"{f'{mb:g} MB s/MB':>12s}" for mb in sizes) + f" {'4MB/0.1MB':>10s} {'CPU s 4MB':>10s}"
    if scan:
        header += f" {'scan s/MB':>10s} {'scan CPU s 4MB':>15s}"
    print(header)
    worst = 0.0
    for name, make in inputs.items():
        rates, cpu, scan_cpu, scan_rate = [], 0.0, 0.0, 0.0
        for mb in sizes:
            text = make(mb)
            size = len(text.encode("utf-8")) / 1e6
            started, cpu_started = time.perf_counter(), time.process_time()
            views_of(text)
            rates.append((time.perf_counter() - started) / size)
            cpu = time.process_time() - cpu_started
            if scan and mb == sizes[-1]:
                started, cpu_started = time.perf_counter(), time.process_time()
                scan(text)
                scan_rate = (time.perf_counter() - started) / size
                scan_cpu = time.process_time() - cpu_started
        worst = max(worst, cpu, scan_cpu)
        line = f"{name:26s} " + " ".join(f"{r:12.3f}" for r in rates) + f" {rates[-1] / rates[0]:10.2f} {cpu:10.2f}"
        if scan:
            line += f" {scan_rate:10.3f} {scan_cpu:15.2f}"
        print(line, flush=True)
    print(f"\nslowest input at 4 MB: {worst:.2f} s of CPU (target < {TARGET_CPU_S:g} s): "
          f"{'met' if worst < TARGET_CPU_S else 'NOT met'}")


if __name__ == "__main__":
    main()
