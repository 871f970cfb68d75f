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
import os
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

    def roundtrip(self, texts: Sequence[str]) -> list[str]:
        """``decode(encode(text))`` of each text, special tokens dropped."""
        out: list[str] = []
        for start in range(0, len(texts), _BATCH):
            # Lone surrogates cannot cross into the Rust tokenizer; the guard drops them anyway (Cs).
            batch = [t.encode("utf-8", "ignore").decode("utf-8") for t in texts[start : start + _BATCH]]
            ids = self.tokenizer(batch, add_special_tokens=False)["input_ids"]
            out.extend(self.tokenizer.batch_decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True))
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "spec": self.spec, "class": type(self.tokenizer).__name__,
                "vocab_size": len(self.tokenizer), "files": self.files, "files_sha256": self.files_sha256}


def load_views(specs: Sequence[TokenizerSpec], base: str | Path | None = None) -> list[TokenizerView]:
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"guard tokenizers need distinct names (got {names})")
    return [TokenizerView(s, base) for s in specs]
