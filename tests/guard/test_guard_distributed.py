"""The scan on Ray Data (``guard.engine: ray``): on a local two-worker cluster it finds the same
hits and writes the same certificate as the local scan, over JSONL and Parquet shards."""

from __future__ import annotations

import json
import os
from pathlib import Path
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


def _paths(out):
    return GuardPaths(guarded_dir=out / "guarded", certificate_path=out / "certificate.json",
                      quarantine_path=out / "quarantine.jsonl", sketch_path=out / "sketch.json",
                      secret_dir=out / "secret", sketch_key_path=out / "sketch.key")


def _specs(train_dir):
    return [SourceSpec.parse(f"{train_dir / 'vignettes.jsonl'}:vignette_id:title,scenario"),
            SourceSpec.parse(f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text")]


def _semantic_keys(pairs):
    return [(p["source"], p["record_id"], p["field"], p["answer_id"]) for p in pairs]


def test_ray_data_finds_the_same_hits_and_writes_the_same_certificate_as_the_local_scan(split_data, tmp_path, cluster,
                                                                                       monkeypatch):
    """The same certificate, the semantic report included (each actor scores its own shards),
    and the driver parses no training shard but the one whose records quarantine removes."""
    import reappreg.guard.run as guard_run
    import reappreg.guard.text as guard_text

    train_dir, heldout = split_data
    plant(train_dir, heldout)
    specs = _specs(train_dir)
    runs, parsed = {}, {}
    for engine in ("local", "ray"):
        read_here = []

        def recording(spec, seen=read_here, real=guard_text.read_source):
            seen.append(spec.path.name)
            return real(spec)

        monkeypatch.setattr(guard_text, "read_source", recording)  # read_training's reads
        monkeypatch.setattr(guard_run, "read_source", recording)   # the held-out set's
        monkeypatch.setattr(guard_run, "read_jsonl", lambda path, seen=read_here, real=guard_run.read_jsonl:
                            (seen.append(Path(path).name), real(path))[1])  # the quarantine rewrite's
        settings = GuardSettings.model_validate({"semantic": {"enabled": True, "threshold": 0.8}, "policy": "quarantine",
                                                 "engine": engine, "workers": WORKERS})
        outcome = run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)), train=specs, settings=settings,
                            paths=_paths(tmp_path / "out"))  # one secret: the same sketch key
        cert = json.loads(json.dumps({k: v for k, v in outcome.certificate.items() if k not in ("created_at", "seconds")}))
        monkeypatch.undo()
        runs[engine] = ([h.to_record() for h in outcome.hits], cert)
        parsed[engine] = read_here
    local_hits, local_cert = runs["local"]
    ray_hits, ray_cert = runs["ray"]
    assert ray_hits == local_hits
    local_semantic, ray_semantic = local_cert.pop("semantic"), ray_cert.pop("semantic")
    assert ray_cert == local_cert
    # Embeddings of other batches may differ in the last float bits: the same pairs, scores within 1e-4.
    assert local_semantic["pairs_above_threshold"] > 0, "the planted copies score above 0.8"
    assert _semantic_keys(ray_semantic["pairs"]) == _semantic_keys(local_semantic["pairs"])
    assert [p["score"] for p in ray_semantic["pairs"]] == pytest.approx([p["score"] for p in local_semantic["pairs"]], abs=1e-4)
    assert {k: v for k, v in ray_semantic.items() if k != "pairs"} == {k: v for k, v in local_semantic.items() if k != "pairs"}
    flagged = set(local_cert["training"][1]["flagged_ids"])
    assert {"copy", "escaped", "split0-0", "split0-1", "split1-0"} <= flagged
    assert {h["detector"] for h in local_hits} >= {"ngram", "fragments"}
    # Locally every training source is parsed here; on Ray only the quarantined one, to rewrite it
    # (the held-out answers are read here on both: the index is built once, here).
    assert parsed["local"] == ["answers.jsonl", "vignettes.jsonl", "reappraisals.jsonl", "reappraisals.jsonl"]
    assert parsed["ray"] == ["answers.jsonl", "reappraisals.jsonl"]


def test_a_shard_an_actor_refuses_is_refused_by_name_and_nothing_is_written(split_data, tmp_path, cluster):
    """An empty shard and one with a text over the size limit: the actor's own check, sent back
    as the stage's error (the first shard in the order given), and no certificate is written."""
    from reappreg.errors import InputError

    train_dir, heldout = split_data
    specs = _specs(train_dir)
    settings = GuardSettings.model_validate({"semantic": {"enabled": False}, "engine": "ray", "workers": WORKERS,
                                             "max_text_chars": 200})
    paths = _paths(tmp_path / "out")
    with pytest.raises(InputError, match=r"guard: \d+ text\(s\) longer than guard.max_text_chars=200: .*vignettes.jsonl record"):
        run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)), train=specs, settings=settings, paths=paths)
    (train_dir / "reappraisals.jsonl").write_text("")
    settings = settings.model_copy(update={"max_text_chars": 100_000})
    with pytest.raises(InputError, match=r"reappraisals.jsonl: training source is empty"):
        run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)), train=specs, settings=settings, paths=paths)
    assert not (tmp_path / "out" / "certificate.json").exists()


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
