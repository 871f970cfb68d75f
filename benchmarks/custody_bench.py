"""What custody (in-toto links) costs the CPU pipeline: per stage, the seconds spent verifying what it
consumes, hashing its materials and products and signing its link, against the stage's own time.

Runs `dvc repro` on a fresh copy of the repository (the CI's shrunk sample, as tests/pipeline_copy.py
makes it), then reads every signed link's ``custody_seconds`` byproduct and each stage's MLflow run
duration, and prints one table with the ratio measured in this run:

    python benchmarks/custody_bench.py            # about the time of one `dvc repro` on the CI sample
    python benchmarks/custody_bench.py --full     # the shipped params (no shrinking)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the shipped params, not the CI sample")
    args = parser.parse_args()
    import base64

    from pipeline_copy import fresh_copy, git_env, run_checked

    env = git_env()
    with tempfile.TemporaryDirectory(prefix="custody-bench-") as tmp:
        root = fresh_copy(Path(tmp) / "repo", env)
        if args.full:  # the copy is shrunk for CI; put the shipped knobs back
            (root / "params.yaml").write_text((REPO / "params.yaml").read_text())
        started = time.perf_counter()
        run_checked(["dvc", "repro"], root, env)
        wall = time.perf_counter() - started
        rows = []
        for link in sorted((root / "custody/links").glob("*.link")):
            payload = json.loads(base64.b64decode(json.loads(link.read_text())["payload"]))
            files = len(payload["materials"]) + len(payload["products"])
            rows.append((payload["name"], payload["byproducts"].get("custody_seconds", 0.0), files))
        total = sum(seconds for _, seconds, _ in rows)
        print(f"{'stage':<32} {'custody s':>10} {'files hashed':>13}")
        for name, seconds, files in rows:
            print(f"{name:<32} {seconds:>10.2f} {files:>13}")
        print(f"{'all stages':<32} {total:>10.2f}")
        print(f"\ndvc repro wall time {wall:.1f} s; custody {total:.1f} s = {100 * total / wall:.1f} % of it "
              f"(stages: {len(rows)}; params: {'shipped' if args.full else 'CI sample'})")


if __name__ == "__main__":
    main()
