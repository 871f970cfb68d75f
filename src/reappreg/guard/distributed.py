"""The scan on Ray Data, for corpora beyond one machine (params ``guard.engine: ray``).

The local scan (``detect.check_units``, worker processes on one machine) stays the default.
On Ray the unit of work is one shard: a training file (JSONL, CSV, Parquet or text) as
``text.read_source`` reads it. A Ray Data pipeline maps the shards over a pool of actors, each
holding the held-out index (and the tokenizer views), which the driver builds once and puts in
the object store (``ray.put``): every actor reads the same bytes once, nothing is rebuilt from
the held-out texts. An actor runs ``check_units`` on its shard, with the shard's fragment
groups (``fragments.fragment_groups`` of that file: its records' fields, the groups its input
declares, its adjacent records), exactly what the local scan runs for that file: the local
scan forms no group across files either. The actor also reads and refuses its shard (empty,
unreadable, a text over ``max_text_chars``), summarises it for the certificate (records,
texts, md5, groups) and, when the report-only semantic list is on, scores it with its own copy
of the encoder. Only hits, summaries and the highest semantic pairs come back: the driver never
parses a shard, except to rewrite one whose records ``quarantine`` removes, and its memory
holds hits, not the corpus. (It still copies the clean shards byte for byte into the guarded
folder, which is the stage's output.)

The hits (and with them the certificate ``run.run_guard`` writes) are the same as the local
scan's (tested on a local two-worker cluster). What scales: shards are independent, so the
throughput is the actors' sum; what does not: one file is one task (split a large corpus
into many shards, as corpora at that size are), and a grouping the input declares is checked
within a shard (keep an author's or a conversation's records in one shard, as the local scan
keeps them in one file).

Ray is an optional dependency (the ``distributed`` extra): imported here only, lazily.
"""

from __future__ import annotations

import logging
from collections import Counter
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.guard.detector import Hit
from reappreg.guard.text import SourceSpec


def _ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the distributed extra is not installed
        raise InputError("guard.engine 'ray' needs Ray Data: pip install 'reappreg[distributed]'") from exc
    return ray


def ensure_ray(workers: int, address: str | None = None) -> bool:
    """Connect to the Ray cluster at ``address``, or start a local one with ``workers`` CPUs (no
    dashboard, nothing reachable from outside the machine). Returns whether it started one (the
    caller shuts it down). Ray's workers import this package from where the driver does."""
    ray = _ray()
    if ray.is_initialized():
        return False
    package_root = str(Path(__file__).resolve().parents[2])
    python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": python_path, "TOKENIZERS_PARALLELISM": "false",
                                "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}}
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 runtime_env=runtime_env, _node_ip_address="127.0.0.1")
    return True


class _ShardChecker:
    """A Ray Data actor: the index, views and held-out answers from the object store, once
    (and the semantic scorer, when the report is on); then shards."""

    def __init__(self, payload: Any) -> None:
        ray = _ray()
        if isinstance(payload, ray.ObjectRef):
            payload = ray.get(payload)
        self.index, self.views, self.settings, self.max_shared, held = payload
        from reappreg.guard.scan import semantic_scorer

        self.scorer = semantic_scorer(held.answers, held.texts, self.settings.semantic) if held is not None else None

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        from reappreg.guard.detect import check_units
        from reappreg.guard.fragments import fragment_groups, group_counts
        from reappreg.guard.scan import summarise
        from reappreg.guard.text import read_training

        results = []
        for spec in (pickle.loads(item) for item in batch["spec"]):
            try:
                source = read_training(spec, self.settings.max_text_chars)
            except InputError as exc:
                # Sent back as a message: the driver raises it for the first shard in the order given.
                results.append(pickle.dumps({"error": str(exc)}))
                continue
            groups = fragment_groups([source], self.settings)
            hits = check_units(self.index, source.units, groups=groups, views=self.views,
                               workers=1, chunk_size=self.settings.chunk_size, max_shared=self.max_shared)
            semantic = self.settings.semantic
            scored = self.scorer.pairs(source.units, semantic.threshold, semantic.max_pairs) if self.scorer else None
            results.append(pickle.dumps({"hits": [h.to_record() for h in hits], "summary": summarise(source),
                                         "groups": group_counts(groups), "scored": scored}))
        return {"i": list(batch["i"]), "result": results}


def scan_shards(index: Any, specs: Sequence[SourceSpec], *, settings: Any, views: Sequence[Any] = (),
                workers: int = 2, max_shared: int = 10, address: str | None = None, heldout: Any = None):
    """Scan the texts of ``specs`` (one shard each) on Ray Data with ``workers`` actors that share
    one copy of ``index`` and ``views`` (``ray.put``): every hit, in every view and in each shard's
    fragment groups, each shard's summary (``scan.summarise``), and the semantic report when
    ``settings.semantic`` is on (``heldout``, the held-out answers, is then needed). Each actor
    reads its own shards; a shard it refuses (unreadable, empty, a text over the size limit) is
    refused here with its message, the first in the order of ``specs``."""
    from reappreg.guard.registry import DETECTORS
    from reappreg.guard.scan import Scan, semantic_certificate

    if workers < 1:
        raise InputError(f"guard: workers ({workers}) must be >= 1")
    if not specs:
        return Scan([], [], {}, semantic_certificate(0, [], None))
    semantic_on = settings.semantic is not None and settings.semantic.enabled
    if semantic_on and heldout is None:
        raise InputError("guard.semantic is on: scan_shards needs the held-out answers (heldout=)")
    ray = _ray()
    started = ensure_ray(workers, address)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # a stage's log, not a terminal
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        payload = ray.put((index, list(views), settings, max_shared, heldout if semantic_on else None))
        rows = [{"i": i, "spec": pickle.dumps(spec)} for i, spec in enumerate(specs)]
        data = ray.data.from_items(rows, override_num_blocks=len(rows))
        scanned = data.map_batches(_ShardChecker, fn_constructor_args=(payload,), batch_size=1, num_cpus=1,
                                   compute=ray.data.ActorPoolStrategy(size=min(workers, len(rows))),
                                   batch_format="default")
        by_shard = {int(row["i"]): pickle.loads(row["result"]) for row in scanned.iter_rows()}
    finally:
        if started:
            ray.shutdown()
    results = [by_shard[i] for i in range(len(specs))]
    for result in results:
        if "error" in result:
            raise InputError(result["error"])
    hits = [Hit(**record) for result in results for record in result["hits"]]
    hits.sort(key=lambda h: (h.source, h.record_id, h.field, h.answer_id, DETECTORS.index(h.detector)))
    answers = len(heldout.answers) if heldout is not None else 0
    semantic = semantic_certificate(answers, [r["scored"] for r in results], settings.semantic if semantic_on else None)
    groups = sum((Counter(r["groups"]) for r in results), Counter())
    return Scan(hits, [r["summary"] for r in results], dict(sorted(groups.items())), semantic)


def check_shards(index: Any, specs: Sequence[SourceSpec], *, settings: Any, views: Sequence[Any] = (),
                 workers: int = 2, max_shared: int = 10, address: str | None = None) -> list[Hit]:
    """Every hit of the texts of ``specs`` (one shard each), in every view and in each shard's
    fragment groups, scanned on Ray Data (``scan_shards``); the same hits as the local scan of
    those files (module docstring)."""
    plain = settings.model_copy(update={"semantic": settings.semantic.model_copy(update={"enabled": False})})
    return scan_shards(index, specs, settings=plain, views=views, workers=workers, max_shared=max_shared,
                       address=address).hits
