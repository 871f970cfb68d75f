"""The ensemble as an MLflow pyfunc model: ``predict`` on a DataFrame (scenario, answer) -> reward.

The stored model is data and configuration only: the ensemble folder (``data/<folder>``)
and an ``MLmodel`` whose ``loader_module`` names this module. MLflow imports the loader from
the installed reappreg package (a pinned requirement of the model), so nothing in the
store is code: no pickled ``python_model.pkl``, no copied source. A writer of the store
can change data, which the registry's signatures catch, but cannot make a load run code
of their choosing through a pickle. ``mlflow.pyfunc.load_model(uri).predict(frame)``
returns the same rewards as ``reappreg.rm.load_ensemble(folder).score(...)``.
"""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import pandas as pd

LOADER_MODULE = __name__
INPUT_EXAMPLE = {"scenario": ["A friend forgot your birthday."], "answer": ["Maybe she was overwhelmed."]}


class RewardEnsemblePyfunc:
    """What ``_load_pyfunc`` returns: MLflow calls ``predict(frame, params=...)``."""

    def __init__(self, ensemble) -> None:
        self.ensemble = ensemble

    def predict(self, model_input: pd.DataFrame, params=None):
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        return self.ensemble.predict_frame(frame)


def _load_pyfunc(data_path: str) -> RewardEnsemblePyfunc:
    """MLflow's loader-module entry point: ``data_path`` is the stored ensemble folder."""
    from reappreg.rm.ensemble import load_ensemble

    return RewardEnsemblePyfunc(load_ensemble(data_path))


def requirements(*names: str) -> list[str]:
    """Pinned requirements of a stored model: reappreg itself (it holds the loader) and ``names``."""
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in ("reappreg", "mlflow", *names)]


def _model_kwargs(ensemble_dir: str | Path) -> dict:
    """What ``log_pyfunc`` and ``save_pyfunc`` share: loader module, data, requirements, signature, example."""
    from mlflow.models import infer_signature

    example = pd.DataFrame(INPUT_EXAMPLE)
    return dict(
        loader_module=LOADER_MODULE,
        data_path=str(ensemble_dir),
        pip_requirements=requirements("torch", "transformers", "safetensors", "pysbd", "numpy", "pandas", "scipy", "pydantic"),
        signature=infer_signature(example, pd.Series([0.0], name="reward").to_numpy()),
        input_example=example,
    )


def log_pyfunc(ensemble_dir: str | Path, name: str = "reward_ensemble"):
    """Log the ensemble folder as a pyfunc model in the active run; returns mlflow's ModelInfo."""
    return mlflow.pyfunc.log_model(name=name, **_model_kwargs(ensemble_dir))


def save_pyfunc(ensemble_dir: str | Path, path: str | Path) -> Path:
    """The same MLflow Model written to a local folder (the registry signs it before uploading)."""
    mlflow.pyfunc.save_model(path=str(path), **_model_kwargs(ensemble_dir))
    return Path(path)
