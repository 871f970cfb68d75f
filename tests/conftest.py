"""Shared fixtures: small generated canonical data, split into train / held-out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARMA_DIR = REPO_ROOT.parent / "shared" / "data" / "sharma2023"


@pytest.fixture
def sample_data(tmp_path: Path) -> Path:
    """A small seeded canonical dataset (6 vignettes x 20 human reappraisals, 3 raters each)."""
    from reappreg.data import generate_sample, write_canonical

    folder = tmp_path / "canonical"
    write_canonical(
        generate_sample(seed=7, reappraisals_per_vignette=20, gpt4_answers_per_vignette=4, opponent_answers_per_vignette=3),
        folder,
    )
    return folder


@pytest.fixture
def split_data(sample_data: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(train_dir, heldout_answers_path) from ``sample_data``."""
    from reappreg.data import load_canonical
    from reappreg.split import split, write_split

    train, answers = split(load_canonical(sample_data), ["human"])
    train_dir, heldout = tmp_path / "train", tmp_path / "heldout" / "answers.jsonl"
    write_split(train, answers, train_dir, heldout)
    return train_dir, heldout


@pytest.fixture
def tracking_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point MLflow at a throwaway sqlite store for the test."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture
def sharma_csv() -> Path:
    path = SHARMA_DIR / "reframing_dataset.csv"
    if not path.exists():
        pytest.skip(f"Sharma et al. reframing dataset not present next to the repo ({path})")
    return path
