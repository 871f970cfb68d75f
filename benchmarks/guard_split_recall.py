"""Recall of the guard on answers split over records, and its false positives on honest records.

Held-out answers: the seeded sample's 180 model reappraisals (23 to 34 words) and, when present
next to the repo (read in place), the 600 Sharma et al. (2023) reframes (4 to 58 words). Each
split (``guard_support.splits``) cuts an answer into 1 to 6 pieces (by letters, or at its
clauses), buries each piece in 0, 40 or 200 words of filler (consecutive words of the
sample's human reappraisals), one piece per record, and places the records in one training
file among honest records: adjacent, shuffled, interleaved within ``--span`` records, or
anywhere in the file under one ``author_id``. The file is checked as ``guard run`` checks a
source (``fragment_groups``: declared fields and adjacent records, ``guard.fragments``).

A split is caught when every record holding an in-scope piece (``splits.piece_content``: its
letters shared with the answer, at their stock weight, reach ``fragments.min_piece``, the
stated bound) is flagged for its answer (the hit's answer, or one its matched text is
closest to). Recall is given per class (pieces x filler, and per placement), over the splits
whose pieces are all in scope, and over every split counting only its in-scope pieces (a
split with none is not counted).

False positives, in the same file: the honest records are the sample's 600 human
reappraisals and texts built from measured stock phrasing (``guard_support.honest``: phrases
in 3+ answers to 2+ scenarios, and phrases in 3+ Sharma reframes), several per author, so
they share both stock phrases and groups. A flagged honest record is a false positive; the
rate is given over every honest record and over the stock-phrase texts alone.

    python benchmarks/guard_split_recall.py                  # 8 splits per class
    python benchmarks/guard_split_recall.py --per-class 3    # quicker
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


def heldout_sets() -> dict[str, list[dict]]:
    from reappreg.data.sample import generate_sample

    frame = generate_sample(seed=11).reappraisals
    sets = {"sample": [{"id": r, "vignette": v, "text": t} for r, v, t in
                       zip(frame.reappraisal_id, frame.vignette_id, frame.text) if not r.startswith("r-")]}
    if SHARMA.exists():
        import pandas as pd

        sharma = pd.read_csv(SHARMA)
        sets["sharma"] = [{"id": f"s{i}", "vignette": f"sit{hash(s) % 10**8}", "text": t}
                          for i, (s, t) in enumerate(zip(sharma.situation, sharma.reframe))]
    return sets


def main(argv: list[str] | None = None) -> int:
    from guard_support.disguise import word_filler
    from guard_support.honest import stock_phrases, stock_texts
    from guard_support.splits import FILLER_WORDS, PLACEMENTS, piece_content, place, split_answer

    from reappreg.data.sample import generate_sample
    from reappreg.guard import AnswerMeta, FastHasher, HeldoutIndex, SourceSpec, check_units, fragment_groups, read_source
    from reappreg.io import write_jsonl
    from reappreg.settings.guard import GuardSettings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=8, help="splits per (pieces, filler, placement, cut)")
    parser.add_argument("--span", type=int, default=8, help="records an interleaved split spreads over")
    parser.add_argument("--honest-stock", type=int, default=600, help="honest texts built from stock phrases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("/tmp") / "guard_split_recall")
    args = parser.parse_args(argv)
    settings = GuardSettings(semantic={"enabled": False})
    min_piece = settings.fragments.min_piece
    frame = generate_sample(seed=11).reappraisals
    human = frame[frame.source == "human"].text.tolist()
    rng = random.Random(args.seed)
    filler = word_filler(human, rng)
    grand: dict[str, dict] = {}
    for name, answers in heldout_sets().items():
        started = time.perf_counter()
        index = HeldoutIndex.build([AnswerMeta(a["id"], None, a["vignette"]) for a in answers],
                                   [a["text"] for a in answers], settings, FastHasher())
        splits = []
        for pieces in range(1, 7):
            for words in FILLER_WORDS:
                for placement in PLACEMENTS:
                    for by_clause in (False, True):
                        for _ in range(args.per_class):
                            a = rng.randrange(len(answers))
                            splits.append(split_answer(rng, a, answers[a]["text"], pieces, words, placement, filler, by_clause))
        phrases = stock_phrases([a["text"] for a in answers], min_docs=3, groups=[a["vignette"] for a in answers], min_groups=2)
        if SHARMA.exists():
            import pandas as pd

            phrases += stock_phrases(pd.read_csv(SHARMA).reframe.tolist(), min_docs=3)
        stock = stock_texts(rng, phrases, human, args.honest_stock)
        honest = list(human) + stock
        texts, authors = place(rng, honest, splits, args.span)
        honest_authors = [f"h{rng.randrange(len(honest) // 4)}" for _ in texts]
        rows = [{"id": f"r{i}", "text": t, "author_id": a or honest_authors[i]} for i, (t, a) in enumerate(zip(texts, authors))]
        path = args.out / name / "train.jsonl"
        write_jsonl(path, rows)
        source = read_source(SourceSpec(path, "id", ("text",)))
        hits = check_units(index, source.units, groups=fragment_groups([source], settings), workers=1)
        caught: dict[str, set[str]] = defaultdict(set)
        for h in hits:
            caught[h.record_id].update({h.answer_id, *h.closest})
        in_split = {f"r{row}" for s in splits for row in s.records}
        false_pos = {h.record_id for h in hits} - in_split
        stock_set = set(stock)
        stock_rows = {f"r{i}" for i, t in enumerate(texts) if f"r{i}" not in in_split and t in stock_set}
        per_class: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # caught/in scope, caught/all
        for s in splits:
            answer = answers[s.answer]["id"]
            scope = [piece_content(index, p, s.answer) >= min_piece for p in s.pieces]
            needed = [f"r{row}" for row, ok in zip(s.records, scope) if ok]
            if not needed:
                continue  # every piece under the bound (or stock phrasing only): out of scope
            ok = all(answer in caught.get(r, set()) for r in needed)
            in_scope = all(scope)
            for key in ((s.placement, len(s.pieces), s.filler), ("any", len(s.pieces), s.filler), (s.placement, "any", "any")):
                cell = per_class[key]
                cell[0] += ok and in_scope
                cell[1] += in_scope
                cell[2] += ok
                cell[3] += 1
        grand[name] = {"classes": per_class, "fp": len(false_pos), "honest": len(texts) - len(in_split),
                       "fp_stock": len(false_pos & stock_rows), "stock": len(stock_rows),
                       "seconds": time.perf_counter() - started, "records": len(texts), "answers": len(answers)}

    print(f"bounds: fragments.min_piece={min_piece} letters, fragments.adjacent={settings.fragments.adjacent} records, "
          f"fragments.coverage={settings.fragments.coverage}, group fields {list(settings.fragments.group_fields)}")
    for name, result in grand.items():
        print(f"\n{name}: {result['answers']} held-out answers; {result['records']} records in one file; "
              f"{result['seconds']:.0f}s")
        print(f"{'placement':<12}{'pieces':>7}{'filler':>7}{'all pieces in scope':>21}{'in-scope pieces':>17}")
        for key in sorted(result["classes"], key=lambda k: (k[0] != "any", str(k))):
            caught_in, total_in, caught_all, total = result["classes"][key]
            scope = f"{caught_in / total_in:.2f} ({total_in})" if total_in else "-"
            print(f"{key[0]:<12}{str(key[1]):>7}{str(key[2]):>7}{scope:>21}{f'{caught_all / total:.2f} ({total})':>17}")
        print(f"false positives: {result['fp']} of {result['honest']} honest records "
              f"({result['fp'] / max(result['honest'], 1):.4f}); among the honest texts built from stock phrases: "
              f"{result['fp_stock']} of {result['stock']} ({result['fp_stock'] / max(result['stock'], 1):.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
