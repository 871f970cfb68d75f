"""The disk cache every backend sits behind, and :func:`build_judge` from the judge settings."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reappreg.errors import InputError
from reappreg.io import read_json, write_json
from reappreg.judge.parse import JudgeBackendError, JudgeResult
from reappreg.judge.prompt import Messages, verdict_labels
from reappreg.settings.judge import JudgeSettings

ProgressFn = Callable[[int], None]


class JudgeBackend(Protocol):
    backend: str
    model: str
    labels: tuple[str, ...]

    def fingerprint(self) -> str: ...

    def complete(self, prompts: Sequence[Messages]) -> list[JudgeResult]: ...


def verdict_config(settings: JudgeSettings) -> dict[str, Any]:
    """Every setting that can change a verdict for a given prompt (part of the cache key): the fields
    of ``JudgeSettings`` marked ``Verdict`` that apply to its backend, under their key names."""
    return {marker.key or name: getattr(settings, name) for name, marker in JudgeSettings.verdict_fields().items()
            if marker.backends is None or settings.backend in marker.backends}


def cache_key(backend: str, model: str, fingerprint: str, prompt: Messages, config: dict[str, Any]) -> str:
    blob = json.dumps({"backend": backend, "model": model, "fingerprint": fingerprint, "prompt": prompt,
                       "config": config}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class CachedJudge:
    """Disk cache in front of a backend: one small JSON file per (backend, model, fingerprint, prompt, config).

    Entries are written atomically as soon as each batch returns, so a killed stage resumes
    where it stopped. ``cache_dir=None`` disables the cache.
    """

    inner: Any
    config: dict[str, Any]
    cache_dir: Path | None
    batch_size: int = 8
    hits: int = 0
    misses: int = 0
    _fingerprint: str | None = field(default=None, repr=False)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def backend(self) -> str:
        return self.inner.backend

    @property
    def labels(self) -> tuple[str, ...]:
        return self.inner.labels

    @property
    def fingerprint(self) -> str:
        """The judge's identity: DVC md5 of a local model, or what the server reports about the model."""
        if self._fingerprint is None:
            self._fingerprint = self.inner.fingerprint()
        return self._fingerprint

    def _path(self, key: str) -> Path:
        assert self.cache_dir is not None
        return Path(self.cache_dir) / key[:2] / f"{key}.json"

    def complete(self, prompts: Sequence[Messages], progress: ProgressFn | None = None) -> list[JudgeResult]:
        keys = [cache_key(self.backend, self.model, self.fingerprint, list(p), self.config) for p in prompts]
        results: list[JudgeResult | None] = [None] * len(prompts)
        missing: list[int] = []
        for i, key in enumerate(keys):
            path = self._path(key) if self.cache_dir is not None else None
            if path is not None and path.exists():
                results[i] = JudgeResult(**read_json(path)["result"])
                self.hits += 1
            else:
                missing.append(i)
        if progress and len(prompts) - len(missing):
            progress(len(prompts) - len(missing))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            outputs = self.inner.complete([prompts[i] for i in chunk])
            if len(outputs) != len(chunk):
                raise JudgeBackendError(f"judge backend returned {len(outputs)} results for {len(chunk)} prompts")
            for i, result in zip(chunk, outputs):
                results[i] = result
                self.misses += 1
                if self.cache_dir is not None:
                    write_json(self._path(keys[i]), {"backend": self.backend, "model": self.model,
                                                     "fingerprint": self.fingerprint, "config": self.config,
                                                     "result": result.as_dict()})
            if progress:
                progress(len(chunk))
        return [r for r in results if r is not None]


def build_judge(settings: JudgeSettings, *, model: str | None = None) -> CachedJudge:
    """The configured backend behind the disk cache; ``model`` overrides ``settings.model``."""
    from reappreg.judge.http import OpenAICompatibleJudge
    from reappreg.judge.local import TransformersJudge, VllmJudge

    name = model or settings.model
    labels = verdict_labels(settings.allow_tie)
    if settings.backend == "transformers":
        inner: Any = TransformersJudge(settings, name, labels)
    elif settings.backend == "vllm":
        inner = VllmJudge(settings, name, labels)
    elif settings.backend == "openai":
        inner = OpenAICompatibleJudge(settings, name, labels)
    else:  # pragma: no cover - the settings schema allows only the three
        raise InputError(f"unknown judge backend {settings.backend!r} (transformers, vllm, openai)")
    # The openai backend batches by concurrency; local backends by batch_size.
    batch = settings.batch_size if settings.backend != "openai" else max(settings.batch_size, settings.concurrency)
    return CachedJudge(inner=inner, config=verdict_config(settings),
                       cache_dir=Path(settings.cache_dir) if settings.cache_dir else None, batch_size=batch)
