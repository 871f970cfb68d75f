"""Compare the UTS #39 confusable skeletons of two ICU builds over every assigned code point.

Why: the guard's skeleton view (``guard.normalise``) comes from ICU's SpoofChecker, so the ICU
build decides which look-alikes fold. Run ``dump`` under each Python environment (for example
the project's venv with ``pyicu-wheels``, and a venv with upstream ``pyicu`` built from source
against the distribution's ICU: ``pip wheel --no-binary pyicu pyicu==2.17``), then ``diff``:

    python benchmarks/icu_skeleton_diff.py dump a.json      # in environment A
    python benchmarks/icu_skeleton_diff.py dump b.json      # in environment B
    python benchmarks/icu_skeleton_diff.py diff a.json b.json

``diff`` prints a table: code points whose skeleton differs, how many of them one build leaves
unmapped (maps to itself), and the character-name families they fall in.
"""

from __future__ import annotations

import collections
import json
import sys
import unicodedata


def dump(path: str) -> None:
    import icu

    checker = icu.SpoofChecker()
    table = {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or unicodedata.category(chr(cp)) == "Cn":
            continue
        table[cp] = checker.getSkeleton(0, chr(cp))  # the type argument is ignored since ICU 58
    with open(path, "w", encoding="utf-8") as out:
        json.dump({"icu": icu.ICU_VERSION, "unicode": icu.UNICODE_VERSION, "pyicu": icu.VERSION, "skeleton": table}, out)
    print(f"ICU {icu.ICU_VERSION} (Unicode {icu.UNICODE_VERSION}, PyICU {icu.VERSION}): {len(table)} code points -> {path}")


def diff(path_a: str, path_b: str) -> None:
    a, b = (json.load(open(p, encoding="utf-8")) for p in (path_a, path_b))
    keys = sorted(set(a["skeleton"]) & set(b["skeleton"]), key=int)
    differ = [k for k in keys if a["skeleton"][k] != b["skeleton"][k]]
    families = collections.Counter(unicodedata.name(chr(int(k)), "?").split(" ")[0] for k in differ)
    label = {p: f"ICU {d['icu']} / Unicode {d['unicode']} / PyICU {d['pyicu']}" for p, d in ((path_a, a), (path_b, b))}
    print(f"| build | code points compared | skeletons differing | of those, mapped to itself |")
    print("| --- | ---: | ---: | ---: |")
    for path, d in ((path_a, a), (path_b, b)):
        same = sum(1 for k in differ if d["skeleton"][k] == chr(int(k)))
        print(f"| {label[path]} | {len(keys)} | {len(differ)} | {same} |")
    print("\nfamilies of the differing code points:", ", ".join(f"{n} {c}" for n, c in families.most_common(12)))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
