"""Benchmark of the separation guard: throughput, recall on planted leaks, false positives.

Builds (seeded, in memory) ``--n-train`` training texts of realistic length (two-sentence
reappraisals and longer paragraphs, from a rich phrase grammar) and ``--n-heldout``
held-out answers from the same grammar, then plants overlaps into the training texts:

* verbatim: an answer copied, half of them with surface variants (case, curly quotes,
  NBSP, extra punctuation, zero-width space) that normalisation must fold;
* edited:   an answer with <= 20% of its words substituted, deleted or inserted;
* embedded: an answer placed verbatim inside a 300-500 word paragraph.

It then measures, in one run and on the same data:

* the guard (``reappreg.guard.scan_texts``) with ``--workers`` processes and with one;
* a naive baseline on a subsample: one datasketch ``MinHash`` per text updated shingle by
  shingle (default SHA-1 hash), one ``MinHashLSH.query`` per text, exact verification of
  the candidates and a per-text dictionary lookup for the n-gram detector, no batching;
* brute-force exact containment and Jaccard over all (text, answer) pairs on a subsample,
  which is also the ground truth for the guard's LSH misses on that subsample;
* recall per planted kind, false positives among the clean texts, and the highest exact
  score any clean text reaches in the brute-force subsample (the margin to the thresholds).

    python benchmarks/guard_bench.py                 # 100k texts vs 1k answers
    python benchmarks/guard_bench.py --n-train 20000 # quicker

Detector settings are the defaults of ``GuardSettings`` (= params.yaml) unless overridden.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

import numpy as np

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


def surface_variant(rng: np.random.Generator, text: str) -> str:
    """Same words, different surface: what normalisation must fold."""
    choice = int(rng.integers(5))
    if choice == 0:
        return text.upper()
    if choice == 1:
        return text.replace("'", "\u2019").replace(" ", "\u00a0", 3).replace(".", "!")
    if choice == 2:
        return "\u201c" + text.replace(",", " ,").replace(" ", "  ") + "\u201d"
    if choice == 3:
        return text.replace("e", "e\u200b", 2).lower()
    return "\uff08" + text + "\uff09"  # full-width brackets


def word_edit(rng: np.random.Generator, text: str, fraction: float = 0.2) -> str:
    """Substitute, delete or insert words: at most ``fraction`` of the words are edited."""
    words = text.split()
    edits = int(fraction * len(words))
    positions = rng.choice(len(words), size=edits, replace=False)
    out: list[str] = []
    for i, word in enumerate(words):
        if i in set(positions.tolist()):
            op = int(rng.integers(3))
            if op == 0:
                out.append(VOCAB[int(rng.integers(len(VOCAB)))])
            elif op == 1:
                continue
            else:
                out.extend([word, VOCAB[int(rng.integers(len(VOCAB)))]])
        else:
            out.append(word)
    return " ".join(out)


def make_data(n_train: int, n_heldout: int, n_planted: int, seed: int):
    rng = np.random.default_rng(seed)
    heldout, seen = [], set()
    while len(heldout) < n_heldout:
        # held-out answers run longer than most human reappraisals, as GPT-4's do
        text = reappraisal(rng, HELDOUT, (3, 4)) if rng.random() < 0.7 else paragraph(rng, 40, 90, HELDOUT)
        if text not in seen:
            seen.add(text)
            heldout.append(text)
    texts, kinds, targets = [], [], []
    for _ in range(n_train - 3 * n_planted):
        texts.append(reappraisal(rng) if rng.random() < 0.7 else paragraph(rng, 80, 220))
        kinds.append("clean")
        targets.append(-1)
    plant_targets = rng.choice(n_heldout, size=3 * n_planted, replace=n_heldout < 3 * n_planted)
    for j, a in enumerate(plant_targets):
        kind = ("verbatim", "edited", "embedded")[j % 3]
        answer = heldout[int(a)]
        if kind == "verbatim":
            text = surface_variant(rng, answer) if j % 2 else answer
        elif kind == "edited":
            text = word_edit(rng, answer)
        else:
            before, after = paragraph(rng, 150, 250), paragraph(rng, 120, 230)
            text = f"{before} {answer} {after}"
        texts.append(text)
        kinds.append(kind)
        targets.append(int(a))
    order = rng.permutation(len(texts))
    return heldout, [texts[i] for i in order], [kinds[i] for i in order], [targets[i] for i in order]


# ----------------------------------------------------------------------------- baselines


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
    if shared / len(answer_grams) >= config.ngram_containment:
        return True
    if not config.ngram_min_run or shared < config.ngram_min_run - config.ngram_n + 1:
        return False  # too few shared n-grams for a run that long (the guard prunes the same way)
    return _longest_run(text_grams, answer_grams, config.ngram_n, answer_words) >= config.ngram_min_run


def naive_scan(heldout: list[str], texts: list[str], config) -> list[tuple[int, int, str]]:
    """One MinHash per text, shingle by shingle; one LSH query per text; no batching."""
    from datasketch import MinHash, MinHashLSH

    from reappreg.guard.text import tokens

    def sketch(shingles):
        m = MinHash(num_perm=config.num_perm, seed=config.seed)
        for s in shingles:
            m.update(s.encode("utf-8"))
        return m

    lsh = MinHashLSH(num_perm=config.num_perm, params=(config.bands, config.rows))
    answer_ngrams, answer_shingles, answer_words, by_ngram = [], [], [], defaultdict(set)
    for a, text in enumerate(heldout):
        toks = tokens(text)
        answer_words.append(len(toks))
        answer_ngrams.append(set(_gram_list(toks, config.ngram_n)))
        answer_shingles.append(set(_gram_list(toks, config.shingle_words)))
        for g in answer_ngrams[-1]:
            by_ngram[g].add(a)
        lsh.insert(a, sketch(answer_shingles[-1]))
    hits = []
    for i, text in enumerate(texts):
        toks = tokens(text)
        text_grams = _gram_list(toks, config.ngram_n)
        counts: dict[int, int] = defaultdict(int)
        for g in set(text_grams):
            for a in by_ngram.get(g, ()):
                counts[a] += 1
        for a, c in counts.items():
            if _ngram_hit(config, text_grams, c, answer_ngrams[a], answer_words[a]):
                hits.append((i, a, "ngram"))
        shingles = set(_gram_list(toks, config.shingle_words))
        if shingles:
            for a in lsh.query(sketch(shingles)):
                inter = len(shingles & answer_shingles[a])
                if inter / (len(shingles) + len(answer_shingles[a]) - inter) >= config.jaccard:
                    hits.append((i, a, "minhash"))
    return hits


def brute_force(heldout: list[str], texts: list[str], config):
    """Exact containment, longest run and Jaccard of every (text, answer) pair."""
    from reappreg.guard.text import tokens

    answers = [tokens(t) for t in heldout]
    a_ng = [set(_gram_list(t, config.ngram_n)) for t in answers]
    a_sh = [set(_gram_list(t, config.shingle_words)) for t in answers]
    hits, best_containment, best_jaccard = [], np.zeros(len(texts)), np.zeros(len(texts))
    for i, text in enumerate(texts):
        toks = tokens(text)
        text_grams = _gram_list(toks, config.ngram_n)
        ng, sh = set(text_grams), set(_gram_list(toks, config.shingle_words))
        for a in range(len(answers)):
            shared = len(ng & a_ng[a])
            best_containment[i] = max(best_containment[i], shared / len(a_ng[a]))
            if shared and _ngram_hit(config, text_grams, shared, a_ng[a], len(answers[a])):
                hits.append((i, a, "ngram"))
            inter = len(sh & a_sh[a])
            jaccard = inter / (len(sh) + len(a_sh[a]) - inter) if sh else 0.0
            best_jaccard[i] = max(best_jaccard[i], jaccard)
            if jaccard >= config.jaccard:
                hits.append((i, a, "minhash"))
    return hits, best_containment, best_jaccard


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    from reappreg.guard import FastHasher, GuardConfig, HeldoutIndex, scan_texts
    from reappreg.guard.detect import AnswerMeta
    from reappreg.settings.guard import GuardSettings

    defaults = GuardSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=100_000)
    parser.add_argument("--n-heldout", type=int, default=1_000)
    parser.add_argument("--n-planted", type=int, default=300, help="planted texts per kind")
    parser.add_argument("--naive-sample", type=int, default=4_000)
    parser.add_argument("--brute-sample", type=int, default=1_500)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--chunk-size", type=int, default=defaults.chunk_size)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shingle-words", type=int, default=defaults.minhash.shingle_words)
    parser.add_argument("--threshold", type=float, default=defaults.minhash.threshold)
    parser.add_argument("--num-perm", type=int, default=defaults.minhash.num_perm)
    parser.add_argument("--bands", type=int, default=defaults.minhash.bands)
    parser.add_argument("--rows", type=int, default=defaults.minhash.rows)
    args = parser.parse_args(argv)

    detectors = defaults.detectors()
    detectors["minhash"].update(shingle_words=args.shingle_words, threshold=args.threshold,
                                num_perm=args.num_perm, bands=args.bands, rows=args.rows)
    config = GuardConfig.from_dict(detectors)

    t0 = time.perf_counter()
    heldout, texts, kinds, targets = make_data(args.n_train, args.n_heldout, args.n_planted, args.seed)
    gen_s = time.perf_counter() - t0
    words = np.array([len(t.split()) for t in texts])
    print(f"data: {len(texts)} training texts (median {int(np.median(words))} words, "
          f"{(words > 60).mean():.0%} paragraphs > 60 words), {len(heldout)} held-out answers, "
          f"{3 * args.n_planted} planted; generated in {gen_s:.1f}s", flush=True)

    t0 = time.perf_counter()
    index = HeldoutIndex.build([AnswerMeta(f"h{a}") for a in range(len(heldout))], heldout, config, FastHasher())
    build_s = time.perf_counter() - t0

    timings = {}
    t0 = time.perf_counter()
    hits = scan_texts(index, texts, workers=args.workers, chunk_size=args.chunk_size)
    timings["guard"] = time.perf_counter() - t0
    one_n = min(len(texts), 20_000)
    t0 = time.perf_counter()
    hits_one = scan_texts(index, texts[:one_n], workers=1, chunk_size=args.chunk_size)
    timings["guard_1"] = time.perf_counter() - t0
    same_one = {(h[0], h[1], h[2]) for h in hits_one} == {(h[0], h[1], h[2]) for h in hits if h[0] < one_n}

    rng = np.random.default_rng(args.seed + 1)
    naive_idx = np.sort(rng.choice(len(texts), size=min(args.naive_sample, len(texts)), replace=False))
    t0 = time.perf_counter()
    naive_hits = naive_scan(heldout, [texts[i] for i in naive_idx], config)
    timings["naive"] = time.perf_counter() - t0
    brute_idx = np.sort(rng.choice(len(texts), size=min(args.brute_sample, len(texts)), replace=False))
    t0 = time.perf_counter()
    brute_hits, best_c, best_j = brute_force(heldout, [texts[i] for i in brute_idx], config)
    timings["brute"] = time.perf_counter() - t0

    flagged: dict[int, set[int]] = defaultdict(set)
    for i, a, *_ in hits:
        flagged[i].add(a)
    recall = {}
    for kind in ("verbatim", "edited", "embedded"):
        planted = [i for i, k in enumerate(kinds) if k == kind]
        recall[kind] = (sum(targets[i] in flagged.get(i, ()) for i in planted) / len(planted), len(planted))
    clean = [i for i, k in enumerate(kinds) if k == "clean"]
    false_pos = sum(1 for i in clean if i in flagged)
    guard_on_brute = {(int(np.searchsorted(brute_idx, i)), a, d) for i, a, d, *_ in hits if i in set(brute_idx.tolist())}
    brute_set = set(brute_hits)
    lsh_missed = len(brute_set - guard_on_brute)
    clean_in_brute = np.array([kinds[i] == "clean" for i in brute_idx])
    naive_set = {(int(naive_idx[i]), a, d) for i, a, d in naive_hits}
    guard_on_naive = {(i, a, d) for i, a, d, *_ in hits if i in set(naive_idx.tolist())}

    rate = {
        f"guard, {args.workers} workers": len(texts) / timings["guard"],
        "guard, 1 worker": one_n / timings["guard_1"],
        "naive (MinHash + query per text)": len(naive_idx) / timings["naive"],
        "brute-force exact (all pairs)": len(brute_idx) / timings["brute"],
    }
    base = rate["naive (MinHash + query per text)"]
    lsh = config.to_dict()["minhash"]["lsh"]
    print()
    print(f"settings: ngram n={config.ngram_n} containment>={config.ngram_containment} min_run={config.ngram_min_run}; "
          f"minhash {config.shingle_words}-word shingles J>={config.jaccard} num_perm={config.num_perm} "
          f"b={config.bands} r={config.rows} (P[miss | J=t]={lsh['fn_probability_at_threshold']:.4f}); "
          f"index build {build_s:.2f}s; cpu cores {os.cpu_count()}")
    print(f"{'measure':<44}{'value':>14}{'texts':>10}{'vs naive':>10}")
    print("-" * 78)
    sizes = {f"guard, {args.workers} workers": len(texts), "guard, 1 worker": one_n,
             "naive (MinHash + query per text)": len(naive_idx), "brute-force exact (all pairs)": len(brute_idx)}
    for name, value in rate.items():
        print(f"{'texts/s ' + name:<44}{value:>14,.0f}{sizes[name]:>10}{value / base:>9.1f}x")
    for kind, (value, count) in recall.items():
        print(f"{'recall ' + kind:<44}{value:>14.4f}{count:>10}")
    print(f"{'false positives among clean texts':<44}{false_pos:>14d}{len(clean):>10}")
    print(f"{'exact pairs the guard missed (brute subsample)':<44}{lsh_missed:>14d}{len(brute_set):>10}")
    print(f"{'max containment, clean texts (brute)':<44}{best_c[clean_in_brute].max():>14.3f}{int(clean_in_brute.sum()):>10}")
    print(f"{'max Jaccard, clean texts (brute)':<44}{best_j[clean_in_brute].max():>14.3f}{int(clean_in_brute.sum()):>10}")
    print(f"{'naive and guard agree on their subsample':<44}{str(naive_set == guard_on_naive):>14}{len(naive_idx):>10}")
    print(f"{'1 worker and N workers agree':<44}{str(same_one):>14}{one_n:>10}")
    targets_ok = (rate[f"guard, {args.workers} workers"] >= 10 * base and recall["verbatim"][0] == 1.0
                  and recall["embedded"][0] == 1.0 and recall["edited"][0] >= 0.99 and false_pos == 0)
    print(f"\ntargets (>=10x naive, recall 1.0/1.0/>=0.99, no false positive): {'met' if targets_ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
