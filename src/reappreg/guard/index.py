"""The held-out index: what the scan needs to know about the held-out answers, and no text.

``HeldoutIndex`` holds, per answer (and per tokenizer-view variant of it), its word and
letter counts and, per registered detector, the part of the index that detector built
(``Detector.build``: e.g. ``ngram`` the keys of its word n-grams, ``minhash`` its shingle keys
and MinHash signature, ``chars`` its letter windows, ``edits`` its content-word keys) and
what each derives from that part when the index is loaded (``Detector.derive``: gram tables
with their stock weights, datasketch's LSH index, ...). Built from held-out texts (``build``)
or from a keyed sketch (``sketch.index_from_sketch``); ``grams.GramTable`` is the exact-join
table. ``reference`` holds what the honest reference corpus says of the held-out grams
(``stock.Reference``: document counts of the grams it shares with them), read once here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.detector import AnswerMeta
from reappreg.guard.normalise import text_views
from reappreg.guard.stock import Reference, document_counts, read_reference
from reappreg.settings.guard import GuardSettings


class TextView(Protocol):
    """A way a consuming model sees text (``views.TokenizerView``)."""

    name: str

    def roundtrip(self, texts: Sequence[str]) -> list[str]: ...


def reference_of(settings: GuardSettings, hasher: Any, parts: dict[str, dict[str, Any]],
                 specs: Sequence[tuple[int, int]]) -> Reference | None:
    """The reference corpus (``stock.reference``) hashed like the answers: per detector that
    weighs grams, the documents holding each of the answers' grams; None without a corpus."""
    from reappreg.guard.registry import REGISTERED

    texts, md5, path = read_reference(settings.stock)
    if not texts:
        return None
    both = [text_views(t) for t in texts]
    corpus = AnswerTexts(settings, hasher, [b[0] for b in both], [b[1] for b in both], specs)
    counts = {d.name: document_counts(*d.gram_keys(corpus), parts[d.name][d.stock_part])
              for d in REGISTERED if d.stock_part}
    return Reference(len(texts), md5, path, counts)


class AnswerTexts:
    """The held-out answers (and variants) as the detectors' ``build`` reads them: their word
    tokens and letter views, and the word-gram keys every registered detector asked for (one
    hashing pass), under the index's hasher."""

    def __init__(self, settings: GuardSettings, hasher: Any, token_lists: list[list[str]], letter_views: list[str],
                 word_specs: Sequence[tuple[int, int]]) -> None:
        self.settings, self.hasher = settings, hasher
        self.token_lists, self.letter_views = token_lists, letter_views
        specs = list(dict.fromkeys(word_specs))
        self._word_grams = dict(zip(specs, hasher.grams_many(token_lists, specs))) if specs else {}

    def __len__(self) -> int:
        return len(self.token_lists)

    def word_grams(self, n: int, domain: int) -> tuple[np.ndarray, np.ndarray]:
        return self._word_grams[(n, domain)]

    @cached_property
    def letter_grams(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets) of the windows of ``chars.n`` letters of each letter view."""
        return self.hasher.letter_grams(self.letter_views, self.settings.chars.n)

    def sets(self, keys: np.ndarray, offsets: np.ndarray) -> list[frozenset[int]]:
        """Per answer, its keys as a set."""
        return [frozenset(keys[offsets[i] : offsets[i + 1]].tolist()) for i in range(len(self))]


@dataclass(eq=False)
class HeldoutIndex:
    """What the scan needs about the held-out answers: per detector its part, no text.

    ``parts`` maps each registered detector's name to what its ``build`` stored (per-answer
    lists, in ``answers`` order); those values, and what ``derive`` adds, read as attributes
    (``index.ngram_sets``, ``index.letters``, ...). ``answers`` may hold several variants of
    one answer (its tokenizer views).
    """

    settings: GuardSettings  # the detector settings (``guard.*`` params, or a certificate / sketch)
    hasher: Any
    answers: list[AnswerMeta]
    token_counts: list[int]
    letter_counts: list[int]
    view_names: tuple[str, ...] = ()  # tokenizer views the answers were expanded with
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    reference: Reference | None = None  # the reference corpus's counts of held-out grams (``stock``)

    def __post_init__(self) -> None:
        from reappreg.guard.registry import REGISTERED

        if not self.answers:
            raise InputError("held-out set is empty: there is nothing to guard against")
        for detector in REGISTERED:
            part = self.parts.get(detector.name)
            if part is None:
                raise InputError(f"held-out index: no part for the '{detector.name}' detector")
            for name, values in part.items():
                if len(values) != len(self.answers):
                    raise InputError(f"held-out index: {len(values)} {detector.name} entries ({name}) for "
                                     f"{len(self.answers)} answers")
        self._derive()

    def _derive(self) -> None:
        from reappreg.guard.registry import REGISTERED

        self.stock_tables = {}  # detector name -> its weighted gram table (``Detector.weigh``)
        for detector in REGISTERED:
            detector.derive(self)

    def __getattr__(self, name: str) -> Any:
        # a detector's stored values (``parts``) by name; derived values are plain attributes
        for part in self.__dict__.get("parts", {}).values():
            if name in part:
                return part[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict:
        return {k: self.__dict__[k] for k in ("settings", "hasher", "answers", "token_counts", "letter_counts",
                                              "view_names", "parts", "reference")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._derive()

    @property
    def answer_ids(self) -> list[str]:
        """Distinct answer ids (variants of one answer counted once), in order."""
        return list(dict.fromkeys(a.answer_id for a in self.answers))

    @classmethod
    def build(cls, answers: Sequence[AnswerMeta], texts: Sequence[str], settings: GuardSettings, hasher: Any,
              views: Sequence[TextView] = ()) -> "HeldoutIndex":
        from reappreg.guard.registry import REGISTERED

        if not answers:
            raise InputError("held-out set is empty: there is nothing to guard against")
        both = [text_views(t) for t in texts]
        token_lists, views_text = [b[0] for b in both], [b[1] for b in both]
        for meta, toks in zip(answers, token_lists):
            if not toks:
                raise InputError(f"held-out answer '{meta.answer_id}' has no words after normalisation")
        metas = list(answers)
        # Tokenizer views only: the decoding views (``decode``) undo what was done to a copy,
        # and are compared with the answers as written.
        for view in views:
            for meta, toks, decoded in zip(answers, token_lists[: len(answers)], view.roundtrip(list(texts))):
                view_tokens, view_letters = text_views(decoded)
                if view_tokens and view_tokens != toks:
                    metas.append(AnswerMeta(meta.answer_id, meta.source, meta.vignette_id, view.name))
                    token_lists.append(view_tokens)
                    views_text.append(view_letters)
        specs = [spec for d in REGISTERED for spec in d.word_grams(settings)]
        texts_of = AnswerTexts(settings, hasher, token_lists, views_text, specs)
        parts = {d.name: d.build(texts_of) for d in REGISTERED}
        return cls(settings, hasher, metas, [len(t) for t in token_lists], [len(v) for v in views_text],
                   tuple(v.name for v in views), parts, reference_of(settings, hasher, parts, specs))
