"""Recall of the guard on edited copies, and its false positives on honest texts.

Held-out answers: the seeded sample's 180 model reappraisals (``reappreg.data.sample``, the
answers the tests use). Each edit kind of ``guard_support.disguise.edit`` (typo, inserted
word, function-word swap, tense/number shift) at 10%, 20% and 33% of the words, placed

* alone,
* inside ~60 words of filler (about 30 before, 30 after),
* inside a long unrelated document of ~20,000 characters (at a random place),

``--per-cell`` copies of random answers per (kind, rate, placement); filler is consecutive
words of the sample's human reappraisals (``disguise.word_filler``). Recall is measured for
the ``edits`` detector alone and for the whole guard (any detector naming the planted answer).

False positives (texts with a hit), honest sets:

* the sample's 600 human reappraisals against its held-out answers (same scenarios),
* the 600 Sharma et al. (2023) reframes and their situations (read in place from
  ``../shared/data/sharma2023/``; skipped when absent) against the sample's answers,
* the Sharma reframes as held-out answers, the human reappraisals as training texts,
* Sharma reframes of half the situations against those of the other half.

One scan runs at ``--floor`` (default 0.3) instead of the ``edits.threshold`` default, so
the table shows recall and false positives at every threshold in ``--sweep``: that is how
the default was chosen.

    python benchmarks/guard_edit_recall.py                  # 30 copies per cell
    python benchmarks/guard_edit_recall.py --per-cell 10    # quicker
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARMA = REPO.parent / "shared" / "data" / "sharma2023" / "reframing_dataset.csv"
PLACEMENTS = ("alone", "filler_60", "document_20k")


def place(kind: str, text: str, filler, rng: random.Random) -> str:
    if kind == "alone":
        return text
    if kind == "filler_60":
        before = rng.randint(20, 40)
        return f"{filler(before)} {text} {filler(60 - before)}"
    words: list[str] = []
    size = 0
    while size < 20_000:
        chunk = filler(200)
        words.append(chunk)
        size += len(chunk) + 1
    document = " ".join(words).split()
    at = rng.randrange(len(document))
    return " ".join(document[:at] + [text] + document[at:])


def main(argv: list[str] | None = None) -> int:
    from reappreg.data.sample import generate_sample
    from reappreg.guard import AnswerMeta, FastHasher, Group, HeldoutIndex, TextUnit, check_units
    from guard_support.disguise import EDIT_KINDS, EDIT_RATES, edit, word_filler
    from reappreg.settings.guard import GuardSettings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-cell", type=int, default=30, help="edited copies per (kind, rate, placement)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--floor", type=float, default=0.3, help="edits threshold of the one scan (scores above it are kept)")
    parser.add_argument("--sweep", type=float, nargs="*", default=[0.6, 0.65, 0.7, 0.75, 0.8, 0.85])
    args = parser.parse_args(argv)

    defaults = GuardSettings()
    config = defaults
    scan_config = GuardSettings.model_validate({"edits": {**defaults.edits.model_dump(), "threshold": args.floor}})
    default_t = config.edits.threshold
    thresholds = sorted({*args.sweep, default_t})

    data = generate_sample(seed=11)
    frame = data.reappraisals
    human = frame[frame.source == "human"].to_dict("records")
    heldout = frame[frame.source != "human"].to_dict("records")
    metas = [AnswerMeta(a["reappraisal_id"], a["source"], a["vignette_id"]) for a in heldout]
    texts = [a["text"] for a in heldout]
    index = HeldoutIndex.build(metas, texts, scan_config, FastHasher())
    eligible = [i for i, (n, _) in enumerate(index.edit_keys) if n >= config.edits.min_answer_words]
    print(f"held-out: {len(heldout)} sample answers, {len(eligible)} with >= {config.edits.min_answer_words} content words "
          f"(content words per answer {min(n for n, _ in index.edit_keys)}-{max(n for n, _ in index.edit_keys)}); "
          f"{len(human)} human reappraisals", flush=True)

    rng = random.Random(args.seed)
    filler = word_filler([r["text"] for r in human], rng)
    units, planted = [], []  # planted: (kind, rate, placement, answer id, record id)
    for kind in EDIT_KINDS:
        for rate in EDIT_RATES:
            for placement in PLACEMENTS:
                for j in range(args.per_cell):
                    a = rng.choice(eligible)
                    rid = f"{kind}-{rate}-{placement}-{j}"
                    units.append(TextUnit("plants", rid, "text", place(placement, edit(kind, rng, texts[a], rate), filler, rng)))
                    planted.append((kind, rate, placement, metas[a].answer_id, rid))
    t0 = time.perf_counter()
    hits = check_units(index, units)
    seconds = time.perf_counter() - t0
    edit_score: dict[tuple[str, str], float] = defaultdict(float)
    other: set[tuple[str, str]] = set()
    for h in hits:
        if h.detector == "edits":
            edit_score[(h.record_id, h.answer_id)] = max(edit_score[(h.record_id, h.answer_id)], h.score)
        else:
            other.add((h.record_id, h.answer_id))
    chars = sum(len(u.text) for u in units)
    print(f"scanned {len(units)} planted texts ({chars:,} characters) in {seconds:.1f}s", flush=True)

    # ------------------------------------------------------------------ recall table
    print(f"\nrecall at edits.threshold = {default_t}: edits detector / the other detectors (the guard without it) / "
          f"whole guard; {args.per_cell} copies per cell")
    header = f"{'kind':<20}{'rate':>6}" + "".join(f"{p:>22}" for p in PLACEMENTS)
    print(header)
    print("-" * len(header))
    cells: dict[tuple, list[tuple[float, bool]]] = defaultdict(list)
    for kind, rate, placement, answer, rid in planted:
        cells[(kind, rate, placement)].append((edit_score.get((rid, answer), 0.0), (rid, answer) in other))
    for kind in EDIT_KINDS:
        for rate in EDIT_RATES:
            row = f"{kind:<20}{rate:>6.0%}"
            for placement in PLACEMENTS:
                values = cells[(kind, rate, placement)]
                ed = sum(s >= default_t for s, _ in values) / len(values)
                others = sum(o for _, o in values) / len(values)
                whole = sum(s >= default_t or o for s, o in values) / len(values)
                row += f"{ed:>8.2f} / {others:.2f} / {whole:.2f}"
            print(row)
    print(f"\nedits-detector recall by threshold (all placements; rate 10% / 20% / 33%)")
    print(f"{'threshold':<12}" + "".join(f"{k:>26}" for k in EDIT_KINDS))
    for t in thresholds:
        row = f"{t:<12.2f}"
        for kind in EDIT_KINDS:
            parts = []
            for rate in EDIT_RATES:
                values = [s for p in PLACEMENTS for s, _ in cells[(kind, rate, p)]]
                parts.append(f"{sum(s >= t for s in values) / len(values):.2f}")
            row += f"{' / '.join(parts):>26}"
        print(row)

    # ------------------------------------------------------------------ false positives
    honest: list[tuple[str, list, object, list]] = []  # (name, units, index, groups)
    human_units = [TextUnit("human", r["reappraisal_id"], "text", r["text"]) for r in human]
    honest.append(("sample humans vs sample answers", human_units, index, []))
    if SHARMA.exists():
        import pandas as pd

        sharma = pd.read_csv(SHARMA)
        s_units = [TextUnit("sharma", f"r{i}", "reframe", t) for i, t in enumerate(sharma.reframe.tolist())]
        s_units += [TextUnit("sharma", f"s{i}", "situation", t) for i, t in enumerate(sharma.situation.tolist())]
        honest.append(("sharma reframes+situations vs sample answers", s_units, index, []))
        s_index = HeldoutIndex.build([AnswerMeta(f"h{i}") for i in range(len(sharma))], sharma.reframe.tolist(),
                                     scan_config, FastHasher())
        honest.append(("sample humans vs sharma reframes as answers", human_units, s_index, []))
        situations = sorted(sharma.situation.unique())
        held_s = set(situations[0::2])
        held, train = sharma[sharma.situation.isin(held_s)], sharma[~sharma.situation.isin(held_s)]
        h_index = HeldoutIndex.build([AnswerMeta(f"h{i}") for i in range(len(held))], held.reframe.tolist(), scan_config,
                                     FastHasher())
        halves = [TextUnit("sharma", f"t{i}", "reframe", t) for i, t in enumerate(train.reframe.tolist())]
        honest.append(("sharma reframes, other half of situations", halves, h_index, []))
    else:
        print(f"\n(Sharma et al. data not found at {SHARMA}: its honest sets are skipped)")
    print(f"\nfalse positives (texts flagged): edits detector at each threshold | any other detector")
    print(f"{'honest set':<48}{'texts':>7}" + "".join(f"{t:>7.2f}" for t in thresholds) + f"{'other':>8}{'max':>7}")
    for name, h_units, h_index, groups in honest:
        found = check_units(h_index, h_units, groups=groups)
        best: dict[str, float] = defaultdict(float)
        others = set()
        for h in found:
            if h.detector == "edits":
                best[h.record_id] = max(best[h.record_id], h.score)
            else:
                others.add(h.record_id)
        row = f"{name:<48}{len(h_units):>7}" + "".join(f"{sum(s >= t for s in best.values()):>7d}" for t in thresholds)
        print(row + f"{len(others):>8}{max(best.values(), default=0.0):>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
