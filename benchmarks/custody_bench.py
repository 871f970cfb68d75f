"""What custody (in-toto links) costs the CPU pipeline: per stage, the seconds spent verifying what it
consumes, hashing its materials and products and signing its link, against the stage's own time.

Runs `dvc repro` on a fresh copy of the repository (the CI's shrunk sample, as tests/pipeline_copy.py
makes it), then reads every signed link's ``custody_seconds`` byproduct and each stage's MLflow run
duration, and prints one table with the ratio measured in this run:

    python benchmarks/custody_bench.py            # about the time of one `dvc repro` on the CI sample
    python benchmarks/custody_bench.py --full     # the shipped params (no shrinking)
    python benchmarks/custody_bench.py --links . --wall 640   # a run you timed yourself (`time dvc repro`)
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
    parser.add_argument("--links", type=Path, help="read the links of a run already made in this repository root")
    parser.add_argument("--wall", type=float, help="with --links: that run's `dvc repro` wall time in seconds")
    args = parser.parse_args()
    if args.links is not None:
        if args.wall is None:
            parser.error("--links needs --wall (the run's measured wall time)")
        table(args.links, args.wall, "shipped (a run timed by hand)")
        return
    from pipeline_copy import fresh_copy, git_env, run_checked

    env = git_env()
    with tempfile.TemporaryDirectory(prefix="custody-bench-") as tmp:
        root = fresh_copy(Path(tmp) / "repo", env)
        if args.full:  # the copy is shrunk for CI; put the shipped knobs back
            (root / "params.yaml").write_text((REPO / "params.yaml").read_text())
        started = time.perf_counter()
        run_checked(["dvc", "repro"], root, env)
        table(root, time.perf_counter() - started, "shipped" if args.full else "CI sample")


def table(root: Path, wall: float, params: str) -> None:
    """One row per signed link: what custody cost that stage, and the sum against the run's wall time."""
    import base64

    rows = []
    for link in sorted((root / "custody/links").glob("*.link")):
        payload = json.loads(base64.b64decode(json.loads(link.read_text())["payload"]))
        files = len(payload["materials"]) + len(payload["products"])
        # canonical JSON has no floats: the link holds custody_seconds as its decimal string
        rows.append((payload["name"], float(payload["byproducts"].get("custody_seconds", 0.0)), files))
    total = sum(seconds for _, seconds, _ in rows)
    print(f"{'stage':<32} {'custody s':>10} {'files hashed':>13}")
    for name, seconds, files in rows:
        print(f"{name:<32} {seconds:>10.2f} {files:>13}")
    print(f"{'all stages':<32} {total:>10.2f}")
    print(f"\ndvc repro wall time {wall:.1f} s; custody {total:.1f} s = {100 * total / wall:.1f} % of it "
          f"(stages: {len(rows)}; params: {params})")


if __name__ == "__main__":
    main()
