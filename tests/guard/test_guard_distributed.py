"""The scan on Ray Data (``guard.engine: ray``): on a local two-worker cluster it finds the same
hits and writes the same certificate as the local scan, over JSONL and Parquet shards."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile

import pytest

from guard_support.disguise import word_filler
from guard_support.splits import split_answer

from reappreg.guard import (AnswerMeta, FastHasher, GuardPaths, HeldoutIndex, SourceSpec, check_units, fragment_groups,
                            read_source, run_guard)
from reappreg.io import read_jsonl, write_jsonl
from reappreg.settings.guard import GuardSettings

ray = pytest.importorskip("ray")

# Starting a local Ray cluster and two actors that each load the index takes most of a minute on a
# shared 2-core machine (about 110 s for the module there): slow, still run in CI.
pytestmark = pytest.mark.slow

WORKERS = 2


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster with two worker CPUs for the module (nothing reachable from outside)."""
    from conftest import SYSTEM_TMP

    from reappreg.guard.distributed import ensure_ray

    # Ray puts its sockets under RAY_TMPDIR (else TMPDIR); conftest moves TMPDIR into pytest's deep tmp
    # tree, past the 107-byte AF_UNIX limit. A short folder in the system tmp, as a user's default is.
    short = tempfile.mkdtemp(prefix="ray", dir=SYSTEM_TMP)
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = short
    try:
        started = ensure_ray(WORKERS)
        yield
        if started:
            ray.shutdown()
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        shutil.rmtree(short, ignore_errors=True)


def plant(train_dir, heldout) -> None:
    """Leaks of several kinds among the sample's reappraisals: a verbatim answer, one in a
    decoding view, an answer split over three adjacent records, one over an author's records."""
    answers = read_jsonl(heldout)
    rows = read_jsonl(train_dir / "reappraisals.jsonl")
    rng = random.Random(8)
    filler = word_filler([r["text"] for r in rows], rng)
    base = {"vignette_id": rows[0]["vignette_id"], "source": "human"}
    planted = [{"reappraisal_id": "copy", "author_id": "x1", "text": answers[0]["text"]},
               {"reappraisal_id": "escaped", "author_id": "x2", "text": answers[1]["text"].replace(" ", "=20")}]
    for k, (answer, placement) in enumerate(((answers[2], "adjacent"), (answers[3], "author"))):
        split = split_answer(rng, k, answer["text"], 3, 30, placement, filler)
        planted += [{"reappraisal_id": f"split{k}-{i}", "author_id": "x3" if placement == "author" else f"y{k}{i}",
                     "text": t} for i, t in enumerate(split.texts)]
    rows = rows[:40] + planted[:4] + rows[40:80] + planted[4:] + rows[80:]
    write_jsonl(train_dir / "reappraisals.jsonl", [{**base, **r} if "vignette_id" not in r else r for r in rows])


def test_ray_data_finds_the_same_hits_and_writes_the_same_certificate_as_the_local_scan(split_data, tmp_path, cluster):
    train_dir, heldout = split_data
    plant(train_dir, heldout)
    out = tmp_path / "out"
    paths = GuardPaths(guarded_dir=out / "guarded", certificate_path=out / "certificate.json",
                       quarantine_path=out / "quarantine.jsonl", sketch_path=out / "sketch.json",
                       secret_dir=out / "secret", sketch_key_path=out / "sketch.key")
    specs = [SourceSpec.parse(f"{train_dir / 'vignettes.jsonl'}:vignette_id:title,scenario"),
             SourceSpec.parse(f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text")]
    runs = {}
    for engine in ("local", "ray"):
        settings = GuardSettings.model_validate({"semantic": {"enabled": False}, "policy": "quarantine",
                                                 "engine": engine, "workers": WORKERS})
        outcome = run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)), train=specs, settings=settings, paths=paths)
        cert = {k: v for k, v in outcome.certificate.items() if k not in ("created_at", "seconds")}
        runs[engine] = ([h.to_record() for h in outcome.hits], json.loads(json.dumps(cert)))
    local_hits, local_cert = runs["local"]
    ray_hits, ray_cert = runs["ray"]
    assert ray_hits == local_hits
    assert ray_cert == local_cert
    flagged = set(local_cert["training"][1]["flagged_ids"])
    assert {"copy", "escaped", "split0-0", "split0-1", "split1-0"} <= flagged
    assert {h["detector"] for h in local_hits} >= {"ngram", "fragments"}


def test_parquet_shards_on_ray_give_the_local_scan_of_each_shard(split_data, tmp_path, cluster):
    """Shards as Parquet files: the Ray scan's hits are those of the local scan of the same
    files (their fragment groups are per file on both engines)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reappreg.guard.distributed import check_shards

    train_dir, heldout = split_data
    plant(train_dir, heldout)
    rows = read_jsonl(train_dir / "reappraisals.jsonl")
    specs = []
    for k in range(3):
        path = tmp_path / f"shard-{k}.parquet"
        pq.write_table(pa.Table.from_pylist(rows[k::3]), path)
        specs.append(SourceSpec(path, "reappraisal_id", ("text",)))
    answers = read_jsonl(heldout)
    settings = GuardSettings(semantic={"enabled": False})
    index = HeldoutIndex.build([AnswerMeta(a["answer_id"], a["source"], a["vignette_id"]) for a in answers],
                               [a["text"] for a in answers], settings, FastHasher())
    sources = [read_source(s) for s in specs]
    local = check_units(index, [u for s in sources for u in s.units], groups=fragment_groups(sources, settings))
    distributed = check_shards(index, specs, settings=settings, workers=WORKERS)
    assert [h.to_record() for h in distributed] == [h.to_record() for h in local]
    assert {h.record_id for h in local} >= {"copy", "escaped"}
