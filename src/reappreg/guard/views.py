"""Tokenizer views: a text as the consuming model sees it, ``decode(encode(text))``.

The guard checks every training text a second time through each tokenizer the pipeline
trains with (the RM encoder's and the policy's), and the held-out answers through the same
tokenizer, whenever the round trip changes a text's words. Whatever a tokenizer normalises
away (controls, accents, case, characters it cannot represent) then cannot hide a leak.

A tokenizer is named ``NAME=SPEC``: SPEC is a local model folder, a ``.gguf`` file or
``pkg:<package>/<subfolder>``, resolved with the RM encoder's resolver
(``reappreg.lm.resolve_model``) and loaded from local files only. It is identified
in the certificate by the sha256 of its tokenizer files (``files_sha256``), which the audit
recomputes before it re-runs the check.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.hashing import sha256_file

# The files that define what a Hugging Face tokenizer does (weights and model config do not).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json")
TOKENIZER_SUFFIXES = (".model", ".tiktoken")
_BATCH = 512


@dataclass(frozen=True)
class TokenizerSpec:
    name: str
    spec: str

    @classmethod
    def parse(cls, text: str) -> "TokenizerSpec":
        name, sep, spec = text.partition("=")
        if not sep or not name.strip() or not spec.strip() or "+" in name:
            raise InputError(f"tokenizer '{text}': expected NAME=SPEC (SPEC: a model folder, a .gguf file or "
                             "pkg:<package>/<subfolder>; NAME without '+')")
        return cls(name.strip(), spec.strip())


def tokenizer_files(folder: Path, gguf_file: str | None) -> dict[str, str]:
    """{file name: sha256} of the files that define the tokenizer at ``folder``."""
    if gguf_file:
        names = [gguf_file]  # a GGUF checkpoint carries its tokenizer inside
    else:
        names = sorted(p.name for p in folder.iterdir() if p.is_file()
                       and (p.name in TOKENIZER_FILES or p.suffix in TOKENIZER_SUFFIXES))
    if not names:
        raise InputError(f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES)}) found")
    if not gguf_file and (folder / "config.json").is_file():
        # AutoTokenizer reads the model config to pick the tokenizer class when
        # tokenizer_config.json does not name it, and the folder loads only with it: it is part
        # of what the certificate identifies, and of what an auditor has to fetch.
        names.append("config.json")
    return {name: sha256_file(folder / name) for name in sorted(names)}


def files_digest(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in sorted(files.items())).encode()).hexdigest()


class TokenizerView:
    """One tokenizer, loaded offline, and its round trip."""

    def __init__(self, spec: TokenizerSpec, base: str | Path | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        from reappreg.lm import resolve_model

        hf_logging.set_verbosity_error()  # long texts exceed model_max_length; we never feed a model
        self.name, self.spec = spec.name, spec.spec
        location = resolve_model(spec.spec, f"guard tokenizer '{spec.name}'", kind="tokenizer", base=base)
        kwargs: dict[str, Any] = {"local_files_only": True}
        if location.gguf_file:
            kwargs["gguf_file"] = location.gguf_file
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(location.folder), **kwargs)
        except (OSError, ValueError) as exc:
            raise InputError(f"guard tokenizer '{spec.name}': cannot load a tokenizer from {location.path}: {exc}") from exc
        self.location = location
        self.files = tokenizer_files(location.folder, location.gguf_file)
        self.files_sha256 = files_digest(self.files)
        self._backend, self._cleans_up = _backend_of(self.tokenizer)
        spec = json.loads(self._backend.to_str()) if self._backend is not None else None
        self._added = _lossless_added_tokens(spec, self._cleans_up, self.roundtrip_transformers)
        self._chunks = None if self._added is not None else _ChunkCache.for_backend(self._backend, spec)
        if self._chunks is not None and self._cleaned(self._chunks.decode(list(_CHUNK_PROBES))) != \
                self.roundtrip_transformers(list(_CHUNK_PROBES)):
            self._chunks = None  # the structure says space-separated chunks are independent; the probes disagree

    def roundtrip_transformers(self, texts: Sequence[str]) -> list[str]:
        """``decode(encode(text))`` of each text through transformers, special tokens dropped:
        the definition ``roundtrip`` computes faster (tests hold the two equal)."""
        out: list[str] = []
        for start in range(0, len(texts), _BATCH):
            batch = [_encodable(t) for t in texts[start : start + _BATCH]]
            ids = self.tokenizer(batch, add_special_tokens=False)["input_ids"]
            out.extend(self.tokenizer.batch_decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True))
        return out

    def roundtrip(self, texts: Sequence[str]) -> list[str]:
        """``decode(encode(text))`` of each text, special tokens dropped (``roundtrip_transformers``).

        The Rust tokenizer directly: transformers' batch encoding and decoding wrap the same
        calls in Python objects per text, which cost as much as the tokenizing itself
        (``benchmarks/guard_bench.py``: 0.64 s against 0.41 s to encode 5,530 texts with the
        RM encoder's tokenizer, 0.46 s against 0.18 s to decode them).
        """
        if self._backend is None:
            return self.roundtrip_transformers(texts)
        if self._added is not None:
            # lossless: a text comes back as it went in unless an added token occurs in it
            out = [_encodable(t) for t in texts]
            pending = [i for i, t in enumerate(out) if self._added.search(t)]
            for i, text in zip(pending, self._computed([out[i] for i in pending])):
                out[i] = text
            return out
        if self._chunks is not None:
            return self._cleaned(self._chunks.decode([_encodable(t) for t in texts]))
        return self._computed(texts)

    def _cleaned(self, decoded: list[str]) -> list[str]:
        return list(map(self.tokenizer.clean_up_tokenization, decoded)) if self._cleans_up else decoded

    def _computed(self, texts: Sequence[str]) -> list[str]:
        out: list[str] = []
        for start in range(0, len(texts), _BATCH):
            batch = [_encodable(t) for t in texts[start : start + _BATCH]]
            ids = [e.ids for e in self._backend.encode_batch(batch, add_special_tokens=False)]
            out.extend(self._cleaned(self._backend.decode_batch(ids, skip_special_tokens=True)))
        return out

    def describe(self) -> dict[str, Any]:
        if self._added is not None:
            round_trip = ("identity unless an added token or a byte outside its vocabulary occurs (lossless byte-level "
                          "BPE, checked on load)")
        elif self._chunks is not None:
            round_trip = "decode of the tokens of each space-separated chunk, cached per chunk (checked on load)"
        else:
            round_trip = "decode(encode(text))"
        return {"name": self.name, "spec": self.spec, "class": type(self.tokenizer).__name__,
                "vocab_size": len(self.tokenizer), "files": self.files, "files_sha256": self.files_sha256,
                "round_trip": round_trip}


def _encodable(text: str) -> str:
    # Lone surrogates cannot cross into the Rust tokenizer; the guard drops them anyway (Cs).
    return text if text.isascii() else text.encode("utf-8", "ignore").decode("utf-8")


# Spaces before punctuation and contractions: what transformers' clean-up removes, where it
# applies it (a WordPiece tokenizer; never a BPE one, in transformers 5).
_CLEAN_UP_PROBE = "a . b , c ! d ? e n't f 's g 've h 're i 'm"


def _backend_of(tokenizer: Any) -> tuple[Any | None, bool]:
    """(the Rust tokenizer without the truncation and padding its file may configure, whether
    transformers' decode cleans up its output). transformers switches both off per call when
    asked for neither; which tokenizers it cleans up after depends on its version, so that
    is read from what its decode does to a probe rather than restated here."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    ids = backend.encode(_CLEAN_UP_PROBE, add_special_tokens=False).ids
    plain = backend.decode(ids, skip_special_tokens=True)
    cleaned = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True)
    if tokenizer.clean_up_tokenization(plain) == plain:
        return None, False  # this decoding tells nothing: transformers' own path computes the view
    if cleaned not in (plain, tokenizer.clean_up_tokenization(plain)):
        raise InputError(f"guard tokenizer: transformers decodes the probe {_CLEAN_UP_PROBE!r} to {cleaned!r}, neither the "
                         f"tokenizer's own decoding {plain!r} nor that cleaned up: its round trip cannot be computed directly")
    return backend, cleaned != plain


# Texts a lossless tokenizer must give back unchanged (checked on load): every printable ASCII
# character, runs of spaces and line breaks, and letters from several blocks and planes.
_LOSSLESS_PROBES = ("".join(map(chr, range(0x20, 0x7F))), "  two  spaces\tand\ttabs\r\nand\n\nlines ", "\x00\x1f\x7f",
                    "naïve café ÀÉÎÕÜ ß ﬁ ½ Ⅻ", "中文 日本語 한국어 עברית العربية हिन्दी", "👩‍👩‍👧 🇫🇷 𝐁𝐨𝐥𝐝 \U0010fffd",
                    "\u200b\u200d\u202e\u2028\ufeff", " lead", "trail ")


def _lossless_added_tokens(spec: dict | None, cleans_up: bool, computed: Any) -> re.Pattern | None:
    """For a tokenizer whose round trip gives back every text that holds none of its added
    tokens and no character it cannot encode: a pattern that finds those (the texts whose
    round trip is computed); for any other tokenizer None.

    That holds for a byte-level BPE tokenizer (GPT-2's design, SmolLM2's) read from its file:
    no normaliser, a byte-level pre-tokenizer that adds no prefix space (after splits that
    keep what they split), BPE without dropout, a byte-level decoder, and no clean-up of
    spaces by transformers. Every byte of the text is then one symbol of some token and
    decoding maps the symbols back to the bytes, except the bytes missing from its vocabulary
    (SmolLM2 lacks six control characters and two UTF-8 lead bytes; BPE without an unknown
    token drops them): the characters whose UTF-8 holds one are in the pattern (which matches
    nothing when there are none). It is also checked on ``_LOSSLESS_PROBES`` against
    transformers' ``decode(encode)``. ``spec``: the tokenizer file's contents.
    """

    if spec is None or cleans_up:
        return None
    pre, model, decoder = spec.get("pre_tokenizer") or {}, spec.get("model") or {}, spec.get("decoder") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    splits_keep = all(p.get("type") == "Split" and p.get("behavior") != "Removed" for p in steps[:-1])
    byte_level = bool(steps) and steps[-1].get("type") == "ByteLevel" and not steps[-1].get("add_prefix_space")
    if not (spec.get("normalizer") is None and splits_keep and byte_level and model.get("type") == "BPE"
            and model.get("dropout") is None and decoder.get("type") == "ByteLevel"):
        return None
    vocab = model.get("vocab") or {}
    missing = [b for b, symbol in enumerate(_byte_symbols()) if symbol not in vocab]
    added = sorted((re.escape(a["content"]) for a in spec.get("added_tokens", []) if a["content"]), key=len, reverse=True)
    unencodable = _characters_with_bytes(missing)
    pattern = re.compile("|".join([*added, *([unencodable] if unencodable else [])]) or r"(?!)")
    probes = [p for p in _LOSSLESS_PROBES if not pattern.search(p)]
    if computed(probes) != probes:
        return None
    return pattern


# Texts whose chunked round trip must equal the whole one (checked on load): contractions and
# punctuation the clean-up joins across chunks, special tokens, long and unknown words,
# accents, CJK, controls and every kind of space.
_CHUNK_PROBES = ("don 't , it 's . they 're ! you 've ? I 'm do not", "a [PAD] b [MASK]c [UNK] [CLS]x[SEP]",
                 "x" * 120 + " short " + "y" * 100, "Café NAÏVE ÀÉÎÕÜ ß ﬁ ½ Ⅻ 𝐁𝐨𝐥𝐝 Σίσυφος ΣΑΣ", "中文字 日本語 한국어 عربى",
                 "tab\there\nnew  line   spaces \u00a0nbsp\u2003em\u3000ideo", "\x00ctrl\x01\x7f\u200b\ufeff end",
                 " lead", "trail ", "e\u0301 \u0301mark", "##hash ##", "a.b,c!d?e", "")


class _ChunkCache:
    """A round trip computed per space-separated chunk and cached, for tokenizers whose
    encoding of a text is the encodings of its chunks in a row: a normaliser that maps each
    character on its own (BERT's, case and Unicode forms), a pre-tokenizer that splits at
    every space (BERT's, whitespace), a model applied per pre-token without randomness, and
    added tokens that hold no space and strip none. A WordPiece decoder decodes token by
    token (a token's text depends only on itself and on whether it is the first), so each
    chunk's decoding is cached too, as the text's first and as a later chunk; any other
    decoder decodes the whole text's token list in one call. Ordinary text repeats its
    words, so most chunks are found in the cache: ``benchmarks/guard_bench.py`` measures
    MiniLM's round trip both ways."""

    _NORMALISERS = {"BertNormalizer", "Lowercase", "NFD", "NFKD", "NFC", "NFKC", "StripAccents"}
    _PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
    _PER_TOKEN_DECODERS = {"WordPiece"}
    _LIMIT = 500_000  # chunks kept; the cache starts over past it
    _OTHER = "a"  # a token put before a chunk's to decode it as a later chunk

    def __init__(self, backend: Any, per_token: bool) -> None:
        self.backend, self.per_token = backend, per_token
        self.special = frozenset(t.content for t in backend.get_added_tokens_decoder().values() if t.special)
        self.cache: dict[str, tuple[str, str] | tuple[str, ...]] = {}

    @classmethod
    def for_backend(cls, backend: Any, spec: dict | None) -> "_ChunkCache | None":
        """The cache for ``backend`` (its file's contents: ``spec``) if its structure allows it."""
        if backend is None:
            return None
        normaliser, pre, model = spec.get("normalizer"), spec.get("pre_tokenizer") or {}, spec.get("model") or {}
        steps = [] if normaliser is None else normaliser.get("normalizers", []) if normaliser["type"] == "Sequence" else [normaliser]
        pres = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
        added = spec.get("added_tokens", [])
        if (all(step.get("type") in cls._NORMALISERS for step in steps)
                and len(pres) == 1 and pres[0].get("type") in cls._PRE_TOKENIZERS
                and model.get("dropout") is None
                and not any(a["lstrip"] or a["rstrip"] or any(ch.isspace() for ch in a["content"]) for a in added)):
            return cls(backend, (spec.get("decoder") or {}).get("type") in cls._PER_TOKEN_DECODERS)
        return None

    def _fill(self, chunks: list[str]) -> None:
        decoder = self.backend.decoder
        other = decoder.decode([self._OTHER]) if self.per_token else ""
        for start in range(0, len(chunks), _BATCH * 8):
            batch = chunks[start : start + _BATCH * 8]
            for chunk, encoding in zip(batch, self.backend.encode_batch(batch, add_special_tokens=False)):
                tokens = tuple(t for t in encoding.tokens if t not in self.special)
                if not self.per_token:
                    self.cache[chunk] = tokens
                elif not tokens:
                    self.cache[chunk] = ("", "")
                else:
                    # as the first chunk, and as a later one (after another token, whose text is cut off)
                    self.cache[chunk] = (decoder.decode(list(tokens)), decoder.decode([self._OTHER, *tokens])[len(other):])

    def decode(self, texts: Sequence[str]) -> list[str]:
        """The decoding of each text's tokens, special tokens dropped (no transformers clean-up)."""
        chunked = [t.split(" ") for t in texts]
        missing = list(dict.fromkeys(c for chunks in chunked for c in chunks if c not in self.cache))
        if len(self.cache) + len(missing) > self._LIMIT:
            self.cache.clear()
            missing = list(dict.fromkeys(c for chunks in chunked for c in chunks))
        self._fill(missing)
        cache, out = self.cache, []
        if not self.per_token:
            decoder = self.backend.decoder
            for chunks in chunked:
                tokens = [t for c in chunks for t in cache[c]]
                out.append(decoder.decode(tokens) if decoder is not None else " ".join(tokens))
            return out
        for chunks in chunked:
            later = [cache[c][1] for c in chunks]
            # the first chunk with tokens decodes as the text's first, the rest as later ones
            k = next((k for k, text in enumerate(later) if text), None)
            out.append("" if k is None else cache[chunks[k]][0] + "".join(later[k + 1 :]))
        return out


def _byte_symbols() -> list[str]:
    """The byte-level alphabet's symbol of each byte 0..255 (GPT-2's bytes_to_unicode: the
    printable Latin-1 bytes stand for themselves, the others take 256 + their rank)."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = set(ByteLevel.alphabet())
    kept = [b for b in range(256) if chr(b) in alphabet and chr(b).isprintable() and b != 0x20 and b != 0xAD]
    shifted = iter(range(256, 512))
    symbols = [chr(b) if b in kept else chr(next(shifted)) for b in range(256)]
    if set(symbols) != alphabet:
        raise RuntimeError("guard tokenizer views: the tokenizers byte-level alphabet is not GPT-2's bytes_to_unicode")
    return symbols


def _characters_with_bytes(missing: Sequence[int]) -> str:
    """A regex character class of the characters whose UTF-8 encoding holds one of ``missing``
    (bytes that never occur in UTF-8 are skipped; a missing continuation byte: every non-ASCII
    character); "" when there are none."""
    ranges: list[tuple[int, int]] = []
    for b in missing:
        if b < 0x80:
            ranges.append((b, b))
        elif b < 0xC0:
            ranges.append((0x80, 0x10FFFF))
        elif 0xC2 <= b <= 0xDF:
            ranges.append(((b & 0x1F) << 6, ((b & 0x1F) << 6) + 0x3F))
        elif 0xE0 <= b <= 0xEF:
            ranges.append(((b & 0x0F) << 12, ((b & 0x0F) << 12) + 0xFFF))
        elif 0xF0 <= b <= 0xF4:
            ranges.append(((b & 0x07) << 18, min(((b & 0x07) << 18) + 0x3FFFF, 0x10FFFF)))
    if not ranges:
        return ""
    return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges) + "]"


def load_views(specs: Sequence[TokenizerSpec], base: str | Path | None = None) -> list[TokenizerView]:
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"guard tokenizers need distinct names (got {names})")
    return [TokenizerView(s, base) for s in specs]
