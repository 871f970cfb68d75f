"""Bit-for-bit CPU training of one reward-model stage: the same seed in two separate
processes, one of them under heavy machine load, gives byte-identical model folders (the
two-part recipe's cross-fitting rows included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reappreg.hashing import dvc_md5
from reappreg.io import read_json, write_json

SCRIPT = """
import json, sys
from pathlib import Path
from reappreg.rm.member import MemberPaths, train_member
from reappreg.settings.rm import RmSettings

spec = json.loads(Path(sys.argv[1]).read_text())
out = Path(sys.argv[2])
settings = RmSettings.model_validate(spec["settings"])
train_member(objective=settings.ensemble.objective, seed=0, settings=settings,
             paths=MemberPaths(vignettes=spec["vignettes"], reappraisals=spec["reappraisals"], ratings=spec["ratings"],
                               certificate=spec["certificate"], meta=spec["meta"], out_dir=out / "model",
                               metrics_path=out / "metrics.json", plots_dir=out / "plots", work_dir=out / "work"))
"""

# Two busy processes: the machine's cores are oversubscribed while the second run trains.
LOAD = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    sum(i * i for i in range(10000))\n"


@pytest.mark.slow
def test_rm_train_is_bit_for_bit_across_processes_and_machine_load(tmp_path: Path) -> None:
    from reappreg.data.canonical import write_canonical
    from reappreg.guard.certified import CERTIFICATE_SCHEMA
    from reappreg.data.sample import generate_sample
    from reappreg.data.split import split

    train, _ = split(generate_sample(seed=11, reappraisals_per_vignette=8, gpt4_answers_per_vignette=1,
                                     opponent_answers_per_vignette=1), ["human"])
    write_canonical(train, tmp_path / "train")
    files = {n: str(tmp_path / "train" / f"{n}.jsonl") for n in ("vignettes", "reappraisals", "ratings")}
    cert = tmp_path / "certificate.json"
    write_json(cert, {"schema": CERTIFICATE_SCHEMA, "result": "pass",
                      "training": [{"path": files[n], "md5": dvc_md5(files[n]), "guarded_path": files[n],
                                    "guarded_md5": dvc_md5(files[n])} for n in ("vignettes", "reappraisals")]})
    # Small but complete: the default recipe's member (length_residual, cross-fitted for the two-part
    # weight), a hidden layer with dropout, several epochs, holdout + LOVO + final refit.
    settings = {"seeds": [0], "baselines": [], "train": {"epochs": 4, "batch_size": 8, "hidden": 16},
                "encoder": {"max_length": 96}}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**files, "certificate": str(cert), "meta": str(tmp_path / "train" / "meta.json"),
                                "settings": settings}))

    def run(out: Path) -> None:
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(spec), str(out)], capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]

    run(tmp_path / "quiet")
    load = [subprocess.Popen([sys.executable, "-c", LOAD]) for _ in range(2)]
    try:
        run(tmp_path / "loaded")
    finally:
        for process in load:
            process.kill()
            process.wait()

    quiet, loaded = tmp_path / "quiet" / "model", tmp_path / "loaded" / "model"
    for name in sorted(p.name for p in quiet.iterdir()):
        assert (quiet / name).read_bytes() == (loaded / name).read_bytes(), name
    assert dvc_md5(quiet) == dvc_md5(loaded)
    # The metrics agree too, except the timings (wall and CPU seconds differ under load).
    a, b = read_json(tmp_path / "quiet" / "metrics.json"), read_json(tmp_path / "loaded" / "metrics.json")
    a.pop("timing"), b.pop("timing")
    assert a == b
