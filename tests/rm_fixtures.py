"""RM helpers shared by the RM and registry test modules: a guard certificate for given files, the
seeded sample pool as the guard leaves it, and one reward-model member trained on a pool with the
rm package's own API."""

from __future__ import annotations

from pathlib import Path

from reappreg.hashing import dvc_md5
from reappreg.io import write_json
from reappreg.settings.rm import RmSettings


def certify(path: Path, files: list[Path], result: str = "pass") -> Path:
    """A guard certificate (the fields of ``reappreg.guard``'s schema that training reads)."""
    from reappreg.guard.certified import CERTIFICATE_SCHEMA

    write_json(path, {
        "schema": CERTIFICATE_SCHEMA,
        "result": result,
        "heldout": {"path": "heldout/answers.jsonl", "md5": "0" * 32},
        "training": [{"path": f"train/{f.name}", "md5": dvc_md5(f), "guarded_path": f"guarded/{f.name}",
                      "guarded_md5": dvc_md5(f)} for f in files],
    })
    return path


def train_on_pool(pool: dict[str, Path], objective: str, seed: int, settings: RmSettings, name: str,
                  out: Path | None = None):
    """One member trained on ``pool``; its folder, metrics, plots and work under ``out`` (default: the pool's root) / ``name``."""
    from reappreg.rm.member import MemberPaths, train_member

    root = (out or pool["root"]) / name
    return train_member(objective=objective, seed=seed, settings=settings, paths=MemberPaths(
        vignettes=pool["vignettes"], reappraisals=pool["reappraisals"], ratings=pool["ratings"],
        certificate=pool["certificate"], out_dir=root / "model", metrics_path=root / "metrics.json",
        plots_dir=root / "plots", work_dir=root / "work", meta=pool["root"] / "train" / "meta.json",
    )), root


def sample_pool(root: Path, *, seed: int = 7, per_vignette: int = 20) -> dict[str, Path]:
    """The generated sample (6 vignettes x ``per_vignette`` human reappraisals, 3 raters) split and
    certified as the guard leaves it: the files ``train_on_pool`` reads."""
    from reappreg.data.sample import generate_sample
    from reappreg.data.split import split, write_split

    train, answers = split(generate_sample(seed=seed, reappraisals_per_vignette=per_vignette, gpt4_answers_per_vignette=4,
                                           opponent_answers_per_vignette=3), ["human"])
    write_split(train, answers, root / "train", root / "heldout" / "answers.jsonl")
    files = {name: root / "train" / f"{name}.jsonl" for name in ("vignettes", "reappraisals", "ratings")}
    files["certificate"] = certify(root / "certificate.json", [files["vignettes"], files["reappraisals"]])
    files["root"] = root
    return files
