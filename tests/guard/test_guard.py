"""Separation guard: planted leaks are caught, clean data passes, certificates and sketches hold up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pydantic import ValidationError

from reappreg.errors import InputError
from reappreg.guard import (
    AnswerMeta,
    FastHasher,
    GuardPaths,
    HeldoutIndex,
    SourceSpec,
    TextUnit,
    audit,
    check_units,
    index_from_sketch,
    load_sketch,
    read_key,
    run_guard,
    scan_texts,
)
from reappreg.guard.hashing import KeyedHasher
from reappreg.guard.minhash import lsh_error_rates
from reappreg.guard.normalise import text_views, tokens
from reappreg.hashing import dvc_md5
from reappreg.io import read_json, read_jsonl, write_jsonl
from reappreg.settings import load_params
from reappreg.settings.guard import GuardSettings

REPO = Path(__file__).resolve().parents[2]


def default_config(**minhash) -> GuardSettings:
    """The default ``guard`` settings (semantic report off), with ``minhash`` settings changed."""
    return GuardSettings.model_validate({"minhash": minhash, "semantic": {"enabled": False}})


def brute_force_pairs(heldout: list[str], texts: list[str], config: GuardSettings) -> dict[tuple[int, int, str], float]:
    """Independent exact reference over all pairs: {(text, answer, detector): exact score}.

    Stock weights by their definition (``guard.stock``; answers without scenario ids: a gram
    in more than ``stock.contexts`` answers weighs contexts / answers holding it), on strings."""

    def grams(toks, n):
        if 0 < len(toks) < n:
            return [tuple(toks)]
        return [tuple(toks[p : p + n]) for p in range(len(toks) - n + 1)]

    def weights_of(sets):
        held = {}
        for s in sets:
            for g in s:
                held[g] = held.get(g, 0) + 1
        if not config.stock.enabled:
            return lambda g: 1.0
        return lambda g: min(1.0, config.stock.contexts / held[g]) if g in held else 1.0

    out = {}
    answers = [tokens(a) for a in heldout]
    n_ng, n_sh, n = config.ngram.n, config.minhash.shingle_words, config.chars.n
    answer_ng = [set(grams(t, n_ng)) for t in answers]
    answer_sh = [set(grams(t, n_sh)) for t in answers]
    answer_views = [text_views(a)[1] for a in heldout]
    answer_win = [{v[p : p + n] for p in range(len(v) - n + 1)} for v in answer_views]
    w_ng, w_sh, w_ch = weights_of(answer_ng), weights_of(answer_sh), weights_of(answer_win)
    for i, text in enumerate(texts):
        toks = tokens(text)
        t_ng, t_sh = grams(toks, n_ng), set(grams(toks, n_sh))
        for a, atoks in enumerate(answers):
            a_ng, a_sh = answer_ng[a], answer_sh[a]
            containment = sum(w_ng(g) for g in set(t_ng) & a_ng) / sum(w_ng(g) for g in a_ng)
            run = best = 0.0
            for g in t_ng:
                run = run + w_ng(g) if g in a_ng else 0.0
                best = max(best, run)
            words = min(best + n_ng - 1, len(atoks)) if best else 0
            if containment >= config.ngram.containment or (config.ngram.min_run and words >= config.ngram.min_run):
                out[(i, a, "ngram")] = containment
            t = config.minhash.threshold
            if t_sh and t <= len(a_sh) / len(t_sh) <= 1 / t:
                shared = t_sh & a_sh
                jaccard = sum(w_sh(g) for g in shared) / (sum(w_sh(g) for g in a_sh) + len(t_sh - a_sh))
                if jaccard >= t:
                    out[(i, a, "minhash")] = jaccard
            # chars: windows of the letter view, as strings; the letters of the answer inside
            # shared windows (each distinct window at its first place in the text), times their
            # mean weight, over the answer's letters times its windows' mean weight
            t_view, a_view, a_win = text_views(text)[1], answer_views[a], answer_win[a]
            if not a_win:
                continue
            t_win = [t_view[p : p + n] for p in range(len(t_view) - n + 1)]
            first = {}
            for p, w in enumerate(t_win):
                if w in a_win and w not in first:
                    first[w] = p
            covered_letters = set()
            for p in first.values():
                covered_letters.update(range(p, p + n))
            mean_shared = sum(w_ch(w) for w in first) / len(first) if first else 0.0
            mean_answer = sum(w_ch(w) for w in a_win) / len(a_win)
            contained = min(len(covered_letters) * mean_shared / (len(a_view) * mean_answer), 1.0)
            run = best = 0.0
            for w in t_win:
                run = run + w_ch(w) if w in a_win else 0.0
                best = max(best, run)
            run_letters = min(best + n - 1, len(a_view)) if best else 0
            if contained >= config.chars.containment or (config.chars.min_run and run_letters >= config.chars.min_run):
                out[(i, a, "chars")] = contained
    if config.edits.enabled:
        out.update(brute_force_edits(heldout, texts, config))
    return out


def brute_force_edits(heldout: list[str], texts: list[str], config: GuardSettings) -> dict[tuple[int, int, str], float]:
    """The ``edits`` detector by its definition, on strings: content words (skeletons, function
    words dropped); two match when their Snowball stems are equal or {word} and its one-letter
    deletions (words of 4+ letters) meet; the best LCS by dynamic programming over stretches
    of span x L content words starting at multiples of L, over L."""
    import math

    from snowballstemmer.english_stemmer import EnglishStemmer

    from reappreg.guard.edits import MIN_TYPO_LETTERS, STOP_WORDS
    from reappreg.guard.normalise import skeleton

    stemmer, stop = EnglishStemmer(), {skeleton(w) for w in STOP_WORDS} | STOP_WORDS

    def content(text):
        out = []
        for tok in tokens(text):
            skel = skeleton(tok)
            if tok in stop or skel in stop:
                continue
            near = {skel} | ({skel[:i] + skel[i + 1 :] for i in range(len(skel))} if len(skel) >= MIN_TYPO_LETTERS else set())
            out.append((stemmer.stemWord(skel), near))
        return out

    def lcs(xs, ys, match):
        row = [0] * (len(ys) + 1)
        for x in xs:
            new = [0]
            for j, y in enumerate(ys):
                new.append(max(row[j + 1], new[j], row[j] + match(x, y)))
            row = new
        return row[-1]

    def match(x, y):
        return x[0] == y[0] or bool(x[1] & y[1])

    out = {}
    answers = [content(a) for a in heldout]
    for i, text in enumerate(texts):
        words = content(text)
        for a, answer in enumerate(answers):
            length = len(answer)
            if length < config.edits.min_answer_words:
                continue
            if sum(any(match(w, y) for w in words) for y in answer) < config.edits.threshold * length:
                continue  # the in-order match is never more than the answer words matched at all
            width = math.ceil(config.edits.span * length)
            best = max(lcs(words[k : k + width], answer, match) for k in range(0, max(len(words), 1), length))
            if best / length >= config.edits.threshold:
                out[(i, a, "edits")] = best / length
    return out


def assert_matches_brute_force(found: dict[tuple[int, int, str], float], truth: dict[tuple[int, int, str], float]):
    """n-gram hits are exact; MinHash hits are true pairs with exact scores, and LSH may miss only
    pairs near the threshold (a pair with J >= 0.45 is missed with probability < 0.001)."""
    for exact in ("ngram", "chars", "edits"):
        assert {k for k in found if k[2] == exact} == {k for k in truth if k[2] == exact}, exact
    assert set(found) <= set(truth)
    for key, score in found.items():
        assert score == pytest.approx(truth[key])
    missed = {k: v for k, v in truth.items() if k not in found}
    assert all(v < 0.45 for v in missed.values()), missed


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def stage(split_data, tmp_path):
    """Paths and specs for one guard stage over the lead's sample split (+ rendered prompts)."""
    train_dir, heldout = split_data
    vignettes = read_jsonl(train_dir / "vignettes.jsonl")
    prompts = tmp_path / "prompts" / "grpo.jsonl"
    write_jsonl(prompts, [{"prompt_id": f"grpo-{v['vignette_id']}", "vignette_id": v["vignette_id"],
                           "prompt": f"Write a short reappraisal for this situation.\n{v['scenario']}"} for v in vignettes])
    out = tmp_path / "out"
    paths = {
        "train_dir": train_dir, "heldout": heldout, "prompts": prompts,
        "guarded_dir": out / "guarded", "certificate_path": out / "guard" / "certificate.json",
        "quarantine_path": out / "guard" / "quarantine.jsonl", "sketch_path": out / "guard" / "heldout_sketch.json",
        "secret_dir": out / "guard_secret", "sketch_key_path": tmp_path / "heldout" / "sketch.key",
    }
    specs = [
        SourceSpec.parse(f"{train_dir / 'vignettes.jsonl'}:vignette_id:title,scenario"),
        SourceSpec.parse(f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text"),
        SourceSpec.parse(f"prompts.jsonl={prompts}:prompt_id:prompt"),
    ]
    return {"paths": paths, "specs": specs, "answers": read_jsonl(heldout)}


def run_stage(stage, *, policy="block", config=None, specs=None, **overrides):
    p = stage["paths"]
    settings = (config or default_config()).model_copy(update={"policy": policy})
    paths = GuardPaths(guarded_dir=p["guarded_dir"], certificate_path=p["certificate_path"],
                       quarantine_path=p["quarantine_path"], sketch_path=p["sketch_path"], secret_dir=p["secret_dir"],
                       sketch_key_path=p["sketch_key_path"])
    return run_guard(heldout=SourceSpec(p["heldout"], "answer_id", ("text",)),
                     train=stage["specs"] if specs is None else specs, settings=settings, paths=paths, **overrides)


def add_reappraisals(stage, records: list[dict]) -> Path:
    path = stage["paths"]["train_dir"] / "reappraisals.jsonl"
    rows = read_jsonl(path)
    base = {"vignette_id": rows[0]["vignette_id"], "author_id": "planted", "source": "human"}
    write_jsonl(path, rows + [{**base, **r} for r in records])
    return path


def filler_words(stage, count: int) -> str:
    """Real training text (the sample's human reappraisals), repeated to ``count`` words."""
    words = " ".join(r["text"] for r in read_jsonl(stage["paths"]["train_dir"] / "reappraisals.jsonl")).split()
    return " ".join((words * (count // len(words) + 1))[:count])


def surface_variant(text: str) -> str:
    """Same words, different surface: curly quotes, NBSP, zero-width space, case, punctuation."""
    words = text.split()
    words[1] = words[1].upper()
    out = "\u201c" + "\u00a0".join(words[:4]) + " " + " ".join(words[4:]) + "\u201d"
    out = out.replace("'", "\u2019").replace(",", " ,, ").replace(".", "!!")
    mid = len(out) // 2
    return out[:mid] + "\u200b" + out[mid:]


def word_edited(text: str, fraction: float = 0.2) -> str:
    """Exactly floor(fraction x words) edits, spread evenly (the worst case for shingles):
    substitutions, deletions and insertions in turn."""
    words = text.split()
    edits = int(fraction * len(words))
    step = len(words) / edits
    targets = {int(k * step + step / 2) for k in range(edits)}
    out = []
    for i, word in enumerate(words):
        if i not in targets:
            out.append(word)
            continue
        op = len(out) % 3
        if op == 0:
            out.append("banana")
        elif op == 2:
            out.extend([word, "zeppelin"])
        # op == 1: deletion
    return " ".join(out)


# ----------------------------------------------------------------------------- normalisation & hashing


def test_normalisation_folds_unicode_case_and_punctuation():
    plain = "Don't worry, it's fine - really."
    variants = [
        "DON’T WORRY, IT’S FINE — REALLY!",
        "don\u02bct\u00a0worry,\u2003it's fine -- really...",
        "\u201cDon't wor\u200bry, it's fine \u2013 really.\u201d",
        "Ｄｏｎ'ｔ worry, it's ﬁne - really.".replace("ﬁ", "fi"),
        "Don't\tworry,\n\nit's   fine - really",
    ]
    assert tokens(plain) == ["dont", "worry", "its", "fine", "really"]
    for variant in variants:
        assert tokens(variant) == tokens(plain), variant
    assert tokens("ﬁne") == ["fine"]  # ligature folded by NFKC
    assert tokens("Straße") == tokens("STRASSE")  # casefold, not lower


def test_ascii_fast_path_folds_like_the_general_path():
    import random
    import string

    from reappreg.guard.normalise import (_ascii_letter_view, _ascii_letters, _fold_core, _words, fold, fold_general,
                                          letters, text_views_general)

    rng = random.Random(0)
    alphabet = string.printable + "\x00\x01\x07\x1b\x7f|&<>[]()*_~`'-"
    for _ in range(5000):
        sample = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert fold(sample) == fold_general(sample), repr(sample)
        assert text_views(sample) == text_views_general(sample), repr(sample)
        folded = _fold_core(sample)
        if folded.isascii():
            assert _ascii_letter_view(folded) == folded.translate(_ascii_letters()) == letters(_words(folded))
    for sample in ["a&amp;b", "<b>bo</b>ld", "[link](http://x)", "ans-\nwer", "He|lo", "don't", "&lt;p&gt;x",
                   "a | b", "x&nbsp;y", "wel|-\ncome"]:
        assert fold(sample) == fold_general(sample), sample
        assert text_views(sample) == text_views_general(sample), sample


def test_batched_lsh_lookups_equal_datasketch_query():
    from datasketch import LeanMinHash, MinHashLSH

    from reappreg.guard.minhash import BandLookup, lsh_candidates

    rng = np.random.default_rng(1)
    lsh = MinHashLSH(num_perm=64, params=(32, 2))
    indexed = rng.integers(0, 2**32, size=(300, 64), dtype=np.uint32)
    for i, sig in enumerate(indexed):
        lsh.insert(i, LeanMinHash(seed=1, hashvalues=sig, scheme="affine32"))
    queries = indexed[rng.integers(0, 300, size=400)].copy()
    queries[:, :56] = rng.integers(0, 2**32, size=(400, 56), dtype=np.uint32)  # only the last 4 bands kept
    queries[200:] = rng.integers(0, 2**32, size=(200, 64), dtype=np.uint32)  # and some unrelated ones
    expected = [set(lsh.query(LeanMinHash(seed=1, hashvalues=q, scheme="affine32"))) for q in queries]
    assert lsh_candidates(BandLookup(lsh, indexed), queries) == expected
    assert sum(map(len, expected)) > 0
    # bands wider than 8 bytes (rows x 32 bits > 64) go through the 64-bit mix; same answer
    wide = MinHashLSH(num_perm=64, params=(8, 8))
    for i, sig in enumerate(indexed):
        wide.insert(i, LeanMinHash(seed=1, hashvalues=sig, scheme="affine32"))
    queries[:100, :56] = indexed[:100, :56]  # the first 7 bands of answers 0..99 kept
    expected_wide = [set(wide.query(LeanMinHash(seed=1, hashvalues=q, scheme="affine32"))) for q in queries]
    assert lsh_candidates(BandLookup(wide, indexed), queries) == expected_wide
    assert sum(map(len, expected_wide)) >= 100


def test_fast_hasher_vectorised_keys_equal_scalar_keys():
    hasher = FastHasher()
    token_lists = [tokens("one two three four five six seven"), tokens("short text"), [], tokens("a b c d e")]
    keys, offsets = hasher.grams(token_lists, 5, "ng")
    assert np.diff(offsets).tolist() == [3, 1, 0, 1]
    expected = []
    for toks in token_lists:
        if 0 < len(toks) < 5:
            expected.append(hasher.gram_key(toks, 5, "ng"))
        expected += [hasher.gram_key(toks[p : p + 5], 5, "ng") for p in range(len(toks) - 4)]
    assert keys.tolist() == expected
    assert len(set(keys.tolist())) == len(expected)  # distinct grams, distinct keys


def test_vectorised_token_keys_equal_the_word_by_word_keys():
    """The scan hashes folded ASCII text in numpy (``scan_views`` + ``grams_of_views``); it must
    give exactly the keys of the word-by-word path the held-out index is built with, also for
    texts mixing ASCII and other scripts, empty texts and texts shorter than a gram."""
    import random
    import string

    from reappreg.guard.hashing import ascii_token_keys, token_key
    from reappreg.guard.normalise import ascii_words, scan_views, skeleton

    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + " -|'.,&<>*_\n\t" + "mmm01"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(400)]
    texts += ["", "m", "rn", "0l1", "Ünïcödé wörds here", "pаypal (Cyrillic а)", "one two three four five six",
              "a-\nb", "x&amp;y <b>bold</b>", "Straße 10 m"]
    rng.shuffle(texts)
    hasher = FastHasher()
    views = [scan_views(t) for t in texts]
    assert [v[1] for v in views] == [text_views(t)[1] for t in texts]
    specs = [(5, "ng"), (2, "sh"), (1, "ng")]
    token_lists = [text_views(t)[0] for t in texts]
    for (keys, offsets), (want, want_offsets) in zip(FastHasher().grams_of_views([v[0] for v in views], specs),
                                                     hasher.grams_many(token_lists, specs)):
        assert keys.tolist() == want.tolist() and offsets.tolist() == want_offsets.tolist()
    ascii_views = [v[0] for v in views if isinstance(v[0], str)]
    keys, counts = ascii_token_keys(ascii_views)
    words = [w for v in ascii_views for w in ascii_words(v)]
    assert keys.tolist() == [token_key(skeleton(w)) for w in words] and counts.sum() == len(words)


def test_letter_grams_equal_the_scalar_key_of_every_window():
    from reappreg.guard.hashing import letter_grams, letter_key

    rng = np.random.default_rng(3)
    alphabet = list("abcdefghijklmnopqrstuvwxyzßéжω")
    views = ["", "short", *("".join(rng.choice(alphabet, size=int(k))) for k in rng.integers(0, 80, size=30)), "x" * 25]
    for n in (4, 25):
        keys, offsets = letter_grams(views, n)
        expected = [letter_key(v[s : s + n], n) for v in views for s in range(len(v) - n + 1)]
        assert keys.tolist() == expected
        assert np.diff(offsets).tolist() == [max(len(v) - n + 1, 0) for v in views]


def test_signatures_are_bit_identical_to_datasketch():
    from datasketch import MinHash

    from reappreg.guard.minhash import minhash_permutations, minhash_signatures

    rng = np.random.default_rng(3)
    sets = [rng.integers(0, 2**63, size=n, dtype=np.uint64) for n in (1, 7, 0, 300, 40)]
    keys = np.concatenate(sets)
    offsets = np.cumsum([0] + [len(s) for s in sets])
    sig = minhash_signatures(keys, offsets, minhash_permutations(64, 5), max_block=50)  # forces several blocks
    for row, values in zip(sig, sets):
        ref = MinHash(num_perm=64, seed=5, hashfunc=lambda x: x)
        ref.update_batch([int(v) & 0xFFFFFFFF for v in values])
        assert np.array_equal(row, ref.hashvalues)


def test_every_registered_detector_has_its_params_section_and_its_recorded_settings():
    from reappreg.guard import DETECTORS
    from reappreg.guard.registry import REGISTERED, settings_from_record, settings_record

    settings = GuardSettings()
    record = settings_record(settings)
    assert list(record) == ["normalisation", "stock", *DETECTORS] and DETECTORS == tuple(d.name for d in REGISTERED)
    for detector in REGISTERED:
        section = getattr(settings, detector.name)  # params: guard.<name>
        assert detector.section(settings) is section
        assert set(record[detector.name]) == set(type(section).model_fields) | set(detector.derived)
    assert settings_from_record(json.loads(json.dumps(record))) == settings


def test_a_detector_without_its_params_section_or_report_row_cannot_be_registered():
    """Each detector declares its params section and its report row; the registry refuses a
    detector that lacks either, and a params section no registered detector owns."""
    from reappreg.guard.detector import Detector
    from reappreg.guard.registry import REGISTERED, check_registered
    from reappreg.settings.guard import DetectorSection, NgramSettings

    check_registered(REGISTERED)

    class Undeclared(Detector):
        name = "undeclared"

    class Unlisted(Detector):  # a section model that GuardSettings has no field for
        name = "unlisted"
        settings_model = type("UnlistedSettings", (DetectorSection,), {})
        label, shown = "something", ("x",)

    class NoRow(Detector):
        name = "ngram"
        settings_model = NgramSettings
        label, shown = "", ("not_a_setting",)

    with pytest.raises(RuntimeError, match="'undeclared' names no params section"):
        check_registered((*REGISTERED, Undeclared()))
    with pytest.raises(RuntimeError, match="GuardSettings has no field 'unlisted'"):
        check_registered((*REGISTERED, Unlisted()))
    with pytest.raises(RuntimeError, match=r"params sections of no registered detector: \['edits'\]"):
        check_registered(REGISTERED[:-1])
    with pytest.raises(RuntimeError, match="'ngram' has no report label.*shows \\['not_a_setting'\\]"):
        check_registered((NoRow(), *REGISTERED[1:]))


def test_lsh_error_rates_match_the_banding_and_datasketch():
    from datasketch import MinHashLSH
    from datasketch.lsh import _false_negative_probability

    rates = lsh_error_rates(0.3, 32, 2)
    assert rates["fn_probability_at_threshold"] == pytest.approx((1 - 0.3**2) ** 32)
    assert rates["fn_integral"] == pytest.approx(_false_negative_probability(0.3, 32, 2))
    optimised = default_config(bands=None, rows=None, threshold=0.5, num_perm=128)
    lsh = MinHashLSH(threshold=0.5, num_perm=128)
    assert (optimised.minhash.bands, optimised.minhash.rows) == (lsh.b, lsh.r)
    with pytest.raises(ValidationError, match="bands x rows"):
        default_config(bands=40, rows=2)  # 80 > num_perm 64


# ----------------------------------------------------------------------------- detectors


def test_planted_leaks_of_each_kind_are_caught_and_unrelated_texts_are_not(stage):
    answers = stage["answers"]
    a = [x["text"] for x in answers[:4]]
    long_text = filler_words(stage, 250) + " " + a[3] + " " + filler_words(stage, 250)
    assert len(long_text.split()) >= 500
    planted = {
        "leak-verbatim": (a[0], 0),
        "leak-variant": (surface_variant(a[1]), 1),
        "leak-edited": (word_edited(a[2]), 2),
        "leak-embedded": (long_text, 3),
    }
    clean = [r["text"] for r in read_jsonl(stage["paths"]["train_dir"] / "reappraisals.jsonl")]
    config = default_config()
    held = [x["text"] for x in answers]
    index = HeldoutIndex.build([AnswerMeta(x["answer_id"]) for x in answers], held, config, FastHasher())
    units = [TextUnit("t", rid, "text", text) for rid, (text, _) in planted.items()]
    units += [TextUnit("t", f"clean-{i}", "text", t) for i, t in enumerate(clean)]
    hits = check_units(index, units)
    by_record = {}
    for h in hits:
        by_record.setdefault(h.record_id, set()).add((h.answer_id, h.detector))
    for rid, (_, target) in planted.items():
        assert (answers[target]["answer_id"], "ngram" if rid != "leak-edited" else "minhash") in by_record[rid], rid
    assert not [r for r in by_record if r.startswith("clean-")]
    edited = [h for h in hits if h.record_id == "leak-edited" and h.detector == "minhash"][0]
    assert config.minhash.threshold <= edited.score < 1.0
    embedded = [h for h in hits if h.record_id == "leak-embedded" and h.detector == "ngram"][0]
    assert embedded.score == 1.0 and embedded.shared == [" ".join(tokens(a[3]))]
    # every pair at or above a threshold is reported: the same set as an independent brute force
    unit_at = {u.record_id: i for i, u in enumerate(units)}
    answer_at = {m.answer_id: i for i, m in enumerate(index.answers)}
    got = {(unit_at[h.record_id], answer_at[h.answer_id], h.detector): h.score for h in hits}
    assert_matches_brute_force(got, brute_force_pairs(held, [u.text for u in units], config))


def test_long_answer_partly_copied_is_caught_by_shared_run_not_containment():
    config = default_config()
    answer = " ".join(f"w{i}" for i in range(120))  # a long held-out answer
    copied = " ".join(f"w{i}" for i in range(40, 64))  # 24 consecutive words of it (20% of the answer)
    index = HeldoutIndex.build([AnswerMeta("long")], [answer], config, FastHasher())
    hits = check_units(index, [TextUnit("t", "partial", "text", f"my own start {copied} my own end"),
                               TextUnit("t", "short", "text", " ".join(f"w{i}" for i in range(40, 55)))])
    ngram = [h for h in hits if h.detector == "ngram"]
    assert [(h.record_id, h.reason, h.longest_run) for h in ngram] == [("partial", "min_run", 24)]
    assert ngram[0].score == pytest.approx(20 / 116)  # 20 of the answer's 116 5-grams
    assert ngram[0].score < config.ngram.containment


def test_parallel_scan_equals_serial_scan(stage):
    answers = stage["answers"]
    held = [x["text"] for x in answers]
    index = HeldoutIndex.build([AnswerMeta(x["answer_id"]) for x in answers], held, default_config(), FastHasher())
    texts = [r["text"] for r in read_jsonl(stage["paths"]["train_dir"] / "reappraisals.jsonl")]
    texts += [held[0], word_edited(held[1]), "x " + held[2].lower()]
    serial = scan_texts(index, texts, workers=1, chunk_size=25)
    parallel = scan_texts(index, texts, workers=2, chunk_size=25)
    assert parallel == serial
    assert {h[0] for h in serial} == {len(texts) - 3, len(texts) - 2, len(texts) - 1}


def test_sharma_reframes_real_near_duplicates_are_found(sharma_csv):
    import pandas as pd

    frame = pd.read_csv(sharma_csv)
    held, train = frame.iloc[0::2].reframe.tolist(), frame.iloc[1::2].reframe.tolist()
    config = default_config()
    index = HeldoutIndex.build([AnswerMeta(f"h{i}") for i in range(len(held))], held, config, FastHasher())
    hits = check_units(index, [TextUnit("sharma", f"t{i}", "reframe", t) for i, t in enumerate(train)])
    found = {(int(h.record_id[1:]), int(h.answer_id[1:]), h.detector): h.score for h in hits}
    assert_matches_brute_force(found, brute_force_pairs(held, train, config))
    # the practitioners' near-identical pair for the same situation ("a small part of this company")
    company = [i for i, t in enumerate(train) if "small part of this company" in t]
    assert company and {(company[0], company[0], "ngram"), (company[0], company[0], "minhash")} <= set(found)
    # and the unrelated reframes of the other ~300 situations pass
    assert len({i for i, _, _ in found}) <= 5


# ----------------------------------------------------------------------------- stage, policies, certificate


def test_clean_sample_data_passes_with_identical_copies_and_matching_hashes(stage):
    outcome = run_stage(stage)
    cert = outcome.certificate
    assert outcome.passed and outcome.hits == [] and cert["counts"]["hits"] == 0
    assert cert["heldout"]["md5"] == dvc_md5(stage["paths"]["heldout"])
    assert cert["counts"]["texts_checked"] == sum(e["texts_checked"] for e in cert["training"]) > 0
    for entry in cert["training"]:
        assert entry["md5"] == dvc_md5(entry["path"]) == entry["guarded_md5"] == dvc_md5(entry["guarded_path"])
    names = sorted(p.name for p in stage["paths"]["guarded_dir"].iterdir())
    assert names == ["prompts.jsonl", "reappraisals.jsonl", "vignettes.jsonl"]
    assert cert["guarded_dir"]["md5"] == dvc_md5(stage["paths"]["guarded_dir"])
    lsh = cert["detectors"]["minhash"]["lsh"]
    assert lsh["fn_probability_at_threshold"] == pytest.approx((1 - 0.3**2) ** 32)
    assert set(cert["versions"]) >= {"datasketch", "numpy", "python"}
    # per view, the scripts it folds to Latin letters (measured: the text view and every decoding view)
    assert set(cert["views"]["scripts_folded"]) == {"text", *cert["decode_views"]}
    report = audit(stage["paths"]["certificate_path"], secret_dir=stage["paths"]["secret_dir"])
    assert report.ok and not any("scripts_folded" in n for n in report.notes)


def test_block_policy_fails_with_a_report_and_leaves_no_guarded_data(stage):
    leak = stage["answers"][2]
    run_stage(stage)  # a previous passing run left guarded copies
    add_reappraisals(stage, [{"reappraisal_id": "leak-1", "text": "Honestly: " + leak["text"].upper()}])
    outcome = run_stage(stage)
    assert not outcome.passed and outcome.certificate["result"] == "fail"
    assert not stage["paths"]["guarded_dir"].exists()
    assert {h.record_id for h in outcome.hits} == {"leak-1"}
    # (the sample's held-out answers share sentence frames, so the copy also resembles siblings)
    reported = read_jsonl(stage["paths"]["quarantine_path"])
    ngram = [r for r in reported if r["detector"] == "ngram" and r["answer_id"] == leak["answer_id"]][0]
    assert ngram["action"] == "blocked" and ngram["score"] == 1.0
    assert ngram["shared"] == [" ".join(tokens(leak["text"]))]
    # the certificate names the hit but carries no held-out text
    assert "shared" not in outcome.certificate["hits"][0]
    assert leak["text"] not in stage["paths"]["certificate_path"].read_text()
    report = audit(stage["paths"]["certificate_path"])
    assert not report.ok and any("did not pass" in p for p in report.problems)


def test_quarantine_policy_removes_hits_and_certifies_the_cleaned_set(stage):
    answers = stage["answers"]
    source = add_reappraisals(stage, [
        {"reappraisal_id": "leak-a", "text": answers[0]["text"]},
        {"reappraisal_id": "leak-b", "text": word_edited(answers[5]["text"])},
    ])
    before = read_jsonl(source)
    outcome = run_stage(stage, policy="quarantine")
    cert = outcome.certificate
    assert outcome.passed and cert["policy"] == "quarantine"
    entry = [e for e in cert["training"] if e["path"] == str(source)][0]
    assert entry["removed_ids"] == ["leak-a", "leak-b"] and entry["guarded_records"] == len(before) - 2
    guarded = read_jsonl(entry["guarded_path"])
    assert [r["reappraisal_id"] for r in guarded] == [r["reappraisal_id"] for r in before if not r["reappraisal_id"].startswith("leak-")]
    assert {r["record_id"] for r in read_jsonl(stage["paths"]["quarantine_path"])} == {"leak-a", "leak-b"}
    assert all(r["action"] == "removed" for r in read_jsonl(stage["paths"]["quarantine_path"]))
    others = [e for e in cert["training"] if e["path"] != str(source)]
    assert all(e["guarded_md5"] == e["md5"] for e in others)  # untouched sources stay byte-identical
    assert audit(stage["paths"]["certificate_path"], secret_dir=stage["paths"]["secret_dir"]).ok


@pytest.mark.parametrize("policy", ["block", "quarantine"])
def test_a_source_rewritten_during_the_scan_is_refused_never_copied(stage, monkeypatch, policy):
    """The guarded copies are made from the file after the scan (on Ray the records never reach
    this process), so the file must still be the bytes that were scanned: a record slipped in
    after the scan would otherwise reach the guarded copy unchecked. Clean (block) or with a
    record to remove (quarantine)."""
    import reappreg.guard.run as guard_run

    answers = stage["answers"]
    if policy == "quarantine":
        add_reappraisals(stage, [{"reappraisal_id": "leak-a", "text": answers[0]["text"]}])
    source = stage["paths"]["train_dir"] / "reappraisals.jsonl"
    scan_local = guard_run._scan_local

    def scan_then_rewrite(*args, **kwargs):
        scanned = scan_local(*args, **kwargs)
        rows = read_jsonl(source)
        write_jsonl(source, [*rows, {**rows[0], "reappraisal_id": "late", "text": answers[1]["text"]}])
        return scanned

    monkeypatch.setattr(guard_run, "_scan_local", scan_then_rewrite)
    with pytest.raises(InputError, match=r"reappraisals.jsonl changed while the guard scanned it"):
        run_stage(stage, policy=policy)
    assert not stage["paths"]["guarded_dir"].exists() and not stage["paths"]["certificate_path"].exists()
    monkeypatch.undo()
    write_jsonl(source, read_jsonl(source)[:-1])  # the bytes that were scanned: the user's rerun passes
    assert run_stage(stage, policy=policy).passed


def test_empty_heldout_or_training_set_is_an_error_not_a_pass(stage):
    p = stage["paths"]
    write_jsonl(p["heldout"], [])
    with pytest.raises(InputError, match="held-out set is empty"):
        run_stage(stage)
    assert not p["certificate_path"].exists()
    write_jsonl(p["heldout"], stage["answers"])
    write_jsonl(p["train_dir"] / "reappraisals.jsonl", [])
    with pytest.raises(InputError, match=r"reappraisals.jsonl: training source is empty"):
        run_stage(stage)
    with pytest.raises(InputError, match="no training sources"):
        run_stage(stage, specs=[])
    with pytest.raises(InputError, match="held-out answer 'blank' has no words"):
        HeldoutIndex.build([AnswerMeta("blank")], [" ... "], default_config(), FastHasher())


def test_a_training_source_the_guarded_copies_cannot_hold_is_refused_before_any_is_read(stage, tmp_path, monkeypatch):
    """The guarded copies are JSONL: a CSV source is refused by its suffix, on either engine,
    before any source is parsed (a Ray run must not scan a corpus to then refuse it)."""
    import reappreg.guard.run as guard_run
    import reappreg.guard.text as guard_text

    table = tmp_path / "extra.csv"
    table.write_text("id,text\n1,fine\n")
    specs = [SourceSpec.parse(f"{table}:id:text")]
    read = []
    real = guard_text.read_source
    for module in (guard_text, guard_run):
        monkeypatch.setattr(module, "read_source", lambda spec: (read.append(spec.path.name), real(spec))[1])
    with pytest.raises(InputError, match=r"extra.csv: the guard stage takes JSONL training sources"):
        run_stage(stage, specs=[*stage["specs"], *specs])
    assert read == ["answers.jsonl"], "a training source was parsed before the refusal"  # the held-out set only
    assert not stage["paths"]["certificate_path"].exists()


def test_bad_sources_are_named(stage, tmp_path):
    bad = tmp_path / "bad.jsonl"
    write_jsonl(bad, [{"id": "1", "text": "fine"}, {"id": "1", "text": "again"}])
    with pytest.raises(InputError, match=r"bad.jsonl: record 2 repeats id '1'"):
        run_stage(stage, specs=[SourceSpec.parse(f"{bad}:id:text")])
    write_jsonl(bad, [{"id": "1", "body": "no text field"}])
    with pytest.raises(InputError, match=r"bad.jsonl: record 1 \(id '1'\) has no text field 'text'"):
        run_stage(stage, specs=[SourceSpec.parse(f"{bad}:id:text")])
    spec = SourceSpec.parse("prompts.jsonl=data/prompts/grpo.jsonl:prompt_id:prompt")
    assert (spec.guarded_name, str(spec.path), spec.id_field, spec.text_fields) == (
        "prompts.jsonl", "data/prompts/grpo.jsonl", "prompt_id", ("prompt",))
    other = tmp_path / "other" / "reappraisals.jsonl"
    write_jsonl(other, [{"id": "o1", "text": "other words"}])
    with pytest.raises(InputError, match="distinct guarded file names"):
        run_stage(stage, specs=[stage["specs"][1], SourceSpec.parse(f"{other}:id:text")])
    with pytest.raises(InputError, match="expected \\[NAME=\\]PATH:ID_FIELD:TEXT_FIELD"):
        SourceSpec.parse("missing.jsonl:only_one_field")


# ----------------------------------------------------------------------------- audit


def test_audit_catches_tampered_artifacts_and_a_doctored_certificate(stage):
    p = stage["paths"]
    run_stage(stage)
    cert_path, secret = p["certificate_path"], p["secret_dir"]
    assert audit(cert_path, secret_dir=secret).ok
    pristine = cert_path.read_text()

    guarded = p["guarded_dir"] / "reappraisals.jsonl"
    original = guarded.read_bytes()
    leak = stage["answers"][1]
    guarded.write_text(guarded.read_text() + json.dumps({"reappraisal_id": "sneaky", "text": leak["text"]}) + "\n")
    report = audit(cert_path, secret_dir=secret)
    assert any("guarded copy" in x and "changed since certified" in x for x in report.problems)
    assert any("record 'sneaky'" in x and leak["answer_id"] in x for x in report.problems)

    # Re-hashing the certificate to match does not help: the re-run check still finds the leak.
    cert = json.loads(pristine)
    for entry in cert["training"]:
        if entry["guarded_path"] == str(guarded):
            entry["guarded_md5"] = dvc_md5(guarded)
    cert_path.write_text(json.dumps(cert))
    report = audit(cert_path, secret_dir=secret)
    assert [x for x in report.problems if "changed since certified" in x] == []
    assert any("record 'sneaky'" in x for x in report.problems)

    guarded.write_bytes(original)
    cert_path.write_text(pristine)
    heldout = p["heldout"]
    heldout.write_text(heldout.read_text().replace(stage["answers"][0]["text"], "A different answer entirely."))
    report = audit(cert_path, secret_dir=secret)
    assert any(x.startswith("held-out set:") for x in report.problems)
    assert any("sketch" in x for x in report.problems)  # the sketch no longer derives from this held-out set


def test_audit_refuses_detector_settings_that_are_incomplete_edited_or_of_another_version(stage):
    p = stage["paths"]
    run_stage(stage)
    cert_path, secret = p["certificate_path"], p["secret_dir"]
    pristine = json.loads(cert_path.read_text())
    assert audit(cert_path, secret_dir=secret).ok

    def audited(change):
        cert = json.loads(json.dumps(pristine))
        change(cert["detectors"])
        cert_path.write_text(json.dumps(cert))
        return audit(cert_path, secret_dir=secret)

    with pytest.raises(InputError, match=r"incomplete: 'detectors.ngram' lacks \['min_run'\]"):
        audited(lambda d: d["ngram"].pop("min_run"))
    with pytest.raises(InputError, match=r"incomplete: 'detectors.fragments' is missing"):
        audited(lambda d: d.pop("fragments"))
    with pytest.raises(InputError, match="edits detector version 'v0' is not this version's"):
        audited(lambda d: d["edits"].update(version="v0"))
    with pytest.raises(InputError, match="minhash scheme 'affine64'"):
        audited(lambda d: d["minhash"].update(scheme="affine64"))
    report = audited(lambda d: d.update(normalisation="reappreg-guard-normalise/v0"))
    assert any("normalisation" in x and "cannot re-check" in x for x in report.problems)
    report = audited(lambda d: d["minhash"]["lsh"].update(fn_integral=0.0))  # derived numbers edited
    assert any("do not round-trip" in x for x in report.problems)


def test_audit_rederives_the_sketch_and_catches_a_swapped_one(stage):
    p = stage["paths"]
    run_stage(stage)
    sketch = read_json(p["sketch_path"])
    sketch["answers"] = sketch["answers"][1:]
    p["sketch_path"].write_text(json.dumps(sketch))
    report = audit(p["certificate_path"], secret_dir=p["secret_dir"])
    assert any(x.startswith("sketch:") for x in report.problems)
    no_secret = audit(p["certificate_path"], secret_dir=p["secret_dir"] / "absent")
    assert any("master secret is not available" in n for n in no_secret.notes)


# ----------------------------------------------------------------------------- sketch


def test_sketch_contains_no_heldout_text(stage):
    p = stage["paths"]
    run_stage(stage)
    raw = p["sketch_path"].read_text()
    answers = stage["answers"]
    sketch_tokens = tokens(raw)
    sketch_vocab = set(sketch_tokens)
    sketch_bigrams = set(zip(sketch_tokens, sketch_tokens[1:]))
    # words the sketch may contain: its own field names and settings, and the answers' ids and sources
    structural = set(tokens(json.dumps({k: v for k, v in read_json(p["sketch_path"]).items() if k != "answers"})))
    structural |= set(tokens(" ".join(f"{a['answer_id']} {a['source']} {a['vignette_id']}" for a in answers)))
    structural |= {"answer", "id", "source", "vignette", "words", "ngrams", "shingles", "minhash"}
    for a in answers:
        toks = tokens(a["text"])
        assert a["text"] not in raw
        assert not sketch_bigrams & set(zip(toks, toks[1:])), a["answer_id"]
        leaked = {w for w in toks if w in sketch_vocab and not w.isdigit()} - structural
        assert not leaked, (a["answer_id"], leaked)
    # hashes are keyed: the unkeyed pipeline hashes of the answers' n-grams do not appear either
    fast = FastHasher()
    for a in answers[:5]:
        toks = tokens(a["text"])
        assert f"{fast.gram_key(toks[:5], 5, 'ng'):016x}" not in raw


def test_sketch_check_finds_what_the_heldout_check_finds(stage):
    p = stage["paths"]
    run_stage(stage)
    answers = stage["answers"]
    units = [
        TextUnit("theirs", "copy", "text", "We wrote: " + answers[4]["text"]),
        TextUnit("theirs", "edit", "text", word_edited(answers[6]["text"])),
        TextUnit("theirs", "own", "text", "Our own entirely separate words about a dinner that went badly."),
    ]
    index = index_from_sketch(load_sketch(p["sketch_path"]), read_key(p["sketch_key_path"]))
    assert isinstance(index.hasher, KeyedHasher)
    via_sketch = {(h.record_id, h.answer_id, h.detector, round(h.score, 9)) for h in check_units(index, units)}
    # as the stage reads the answers: with their scenarios (the stock weights count scenarios)
    held = HeldoutIndex.build([AnswerMeta(a["answer_id"], a["source"], a["vignette_id"]) for a in answers],
                              [a["text"] for a in answers], default_config(), FastHasher())
    via_heldout = {(h.record_id, h.answer_id, h.detector, round(h.score, 9)) for h in check_units(held, units)}
    # The exact n-gram detector must agree hit for hit. MinHash candidates come from LSH over
    # different (keyed vs unkeyed) hash functions, so a pair just above the Jaccard threshold
    # may be a candidate under one and not the other (miss probability 0.049 at J = 0.30,
    # 1e-4 at 0.5): compare minhash hits only where a miss is negligible.
    def certain(hits):
        return {h for h in hits if h[2] == "ngram" or h[3] >= 0.5}

    assert certain(via_sketch) == certain(via_heldout)
    assert {r for r, *_ in via_sketch} == {"copy", "edit"}
    with pytest.raises(InputError, match="key does not belong"):
        index_from_sketch(load_sketch(p["sketch_path"]), bytes(32))


def test_secret_is_created_once_and_the_key_follows_the_heldout_version(stage):
    p = stage["paths"]
    run_stage(stage)
    secret, key = (p["secret_dir"] / "secret.key").read_text(), p["sketch_key_path"].read_text()
    sketch_md5 = dvc_md5(p["sketch_path"])
    run_stage(stage)
    assert (p["secret_dir"] / "secret.key").read_text() == secret and p["sketch_key_path"].read_text() == key
    assert dvc_md5(p["sketch_path"]) == sketch_md5  # deterministic given secret + held-out set
    write_jsonl(p["heldout"], stage["answers"][1:])
    run_stage(stage)
    assert (p["secret_dir"] / "secret.key").read_text() == secret and p["sketch_key_path"].read_text() != key


# ----------------------------------------------------------------------------- CLI


def test_check_cli_reads_jsonl_csv_and_text_and_exits_1_on_hits(stage, tmp_path):
    from typer.testing import CliRunner

    from reappreg.commands.guard import app

    p = stage["paths"]
    run_stage(stage)
    answer = stage["answers"][3]["text"]
    import csv

    with open(tmp_path / "theirs.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["id", "body"], ["c1", answer], ["c2", "nothing to see"]])
    (tmp_path / "theirs.txt").write_text("Harmless first paragraph.\n\n" + answer[:40] + "\n" + answer[40:] + "\n")
    write_jsonl(tmp_path / "clean.jsonl", [{"text": "Only our own words here."}])
    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    runner = CliRunner()
    args = ["check", "--sketch", str(p["sketch_path"]), "--key", str(p["sketch_key_path"]), "--params", str(params)]
    result = runner.invoke(app, [*args, f"{tmp_path / 'theirs.csv'}:id:body", str(tmp_path / "theirs.txt"),
                                 "--report", str(tmp_path / "hits.jsonl")])
    assert result.exit_code == 1 and (tmp_path / "hits.jsonl").exists(), (result.output, result.exception)
    hits = read_jsonl(tmp_path / "hits.jsonl")
    copied = stage["answers"][3]["answer_id"]
    assert {h["record_id"] for h in hits} == {"c1", "line:3"}
    assert {("c1", copied), ("line:3", copied)} <= {(h["record_id"], h["answer_id"]) for h in hits if h["detector"] == "ngram"}
    # Sibling answers (same scenario, sharing sentences with the copied one) may be over a
    # threshold too; every hit names the copied answer among those its matched text is closest to.
    assert all(copied in h["closest"] for h in hits)
    clean = runner.invoke(app, ["check", "--heldout", str(p["heldout"]), "--params", str(params), str(tmp_path / "clean.jsonl")])
    assert clean.exit_code == 0 and "0 hit(s)" in clean.output
    # Like `guard run`, `check --heldout` sees texts through the profile's tokenizers unasked
    # (the RM encoder's and the base policy's) and through every decoding view.
    assert "tokenizer views: rm-encoder, policy; decoding views: escapes, html, markup" in " ".join(clean.output.split())
    words = answer.split()
    spliced = " ".join(w + (" [MASK]" if i % 2 else " [PAD]") for i, w in enumerate(words))
    write_jsonl(tmp_path / "spliced.jsonl", [{"text": spliced}])
    caught = runner.invoke(app, ["check", "--heldout", str(p["heldout"]), "--params", str(params),
                                 str(tmp_path / "spliced.jsonl"), "--report", str(tmp_path / "spliced_hits.jsonl")])
    assert caught.exit_code == 1, caught.output
    spliced_hits = read_jsonl(tmp_path / "spliced_hits.jsonl")
    assert (stage["answers"][3]["answer_id"], "ngram") in {(h["answer_id"], h["detector"]) for h in spliced_hits}
    # Without the profile's tokenizers the special tokens are still removed, by the markup view.
    bare = runner.invoke(app, ["check", "--heldout", str(p["heldout"]), "--params", str(params), "--no-profile-views",
                               str(tmp_path / "spliced.jsonl"), "--report", str(tmp_path / "bare_hits.jsonl")])
    assert bare.exit_code == 1 and "tokenizer views: none;" in " ".join(bare.output.split()), bare.output
    assert {h["view"] for h in read_jsonl(tmp_path / "bare_hits.jsonl")} <= {"markup", "decoded"}


@pytest.mark.slow
def test_run_and_audit_commands_end_to_end(stage, tmp_path, tracking_uri, tiny_lm):
    """The DVC stage command: exit 2 with a named report on a leak, audit exit codes."""
    p = stage["paths"]
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    train = [f"--train={s.describe()}" for s in stage["specs"]]
    cmd = [sys.executable, "-m", "reappreg", "guard", "run", "--params", str(tmp_path / "params.yaml"),
           "--heldout", f"{p['heldout']}:answer_id:text", *train, "--out-dir", str(p["guarded_dir"]),
           "--certificate", str(p["certificate_path"]), "--quarantine", str(p["quarantine_path"]),
           "--sketch", str(p["sketch_path"]), "--secret-dir", str(p["secret_dir"]), "--sketch-key", str(p["sketch_key_path"]),
           "--tokenizer", f"policy={tiny_lm}"]
    ok = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    # the RM encoder's tokenizer comes from rm.encoder.path of the active profile, unasked
    certified = json.loads(p["certificate_path"].read_text())["tokenizers"]
    assert [t["name"] for t in certified] == ["rm-encoder", "policy"]
    assert certified[0]["spec"] == load_params(tmp_path / "params.yaml").rm.encoder.path
    audit_cmd = [sys.executable, "-m", "reappreg", "guard", "audit", str(p["certificate_path"]), "--secret-dir", str(p["secret_dir"])]
    assert subprocess.run(audit_cmd, capture_output=True, text=True, env=env, cwd=tmp_path).returncode == 0
    leak = stage["answers"][0]
    add_reappraisals(stage, [{"reappraisal_id": "planted-7", "text": leak["text"]}])
    failed = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert failed.returncode == 2
    for expected in ("planted-7", leak["answer_id"], "ngram", "1.000", " ".join(tokens(leak["text"]))[:30]):
        assert expected in failed.stderr.replace("\n", " "), expected
    bad_audit = subprocess.run(audit_cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert bad_audit.returncode == 2 and "did not pass" in bad_audit.stderr


def test_the_training_source_format_the_stage_names_is_the_one_help_states():
    from reappreg.commands.guard import TRAIN_SPEC_HELP
    from reappreg.guard.stage import TRAIN_SPEC

    assert TRAIN_SPEC == TRAIN_SPEC_HELP


def test_guard_defaults_equal_params_yaml():
    import yaml

    raw = yaml.safe_load((REPO / "params.yaml").read_text())["guard"]
    assert GuardSettings.model_validate(raw) == GuardSettings()


def test_vectorised_token_keys_equal_the_scalar_key_of_every_string():
    """``token_keys`` (one numpy pass) is ``token_key`` of each string: any code point, the
    empty string, astral planes, repeated and very long strings."""
    import random

    from reappreg.guard.hashing import token_key, token_keys

    rng = random.Random(3)
    strings = ["", "a", "ab", "ba", "\U0001d400x", "é", "e\u0301", "x" * 5000]
    strings += ["".join(chr(rng.choice([rng.randrange(0x20, 0xD800), rng.randrange(0xE000, 0x110000)]))
                        for _ in range(rng.randrange(0, 25))) for _ in range(2000)]
    strings += strings[:50]  # the same string twice gets the same key
    assert token_keys(strings).tolist() == [token_key(s) for s in strings]
    assert token_keys([]).tolist() == []
