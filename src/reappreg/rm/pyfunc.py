"""The ensemble as an MLflow pyfunc model: ``predict`` on a DataFrame (scenario, answer) -> reward.

``predict(frame)`` returns the reward (what GRPO reads: the residual part behind the format gate
for a two-part model); ``predict(frame, params={"output": "parts"})`` returns every part as a
DataFrame (``reward``, ``ranking``, ``length_prior``, ``residual``; see
``RewardEnsemble.parts``), so the logged model carries both parts of the two-part recipe and
the weight that joins them, not the reward alone. :func:`check_round_trip` is the stage's proof.

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
# predict's params (their defaults): output "reward" (an array) or "parts" (a DataFrame of every part).
PARAMS = {"output": "reward"}
# What the round trip compares: a gated, an empty and a scored answer.
PROBE = {
    "scenario": ["Your colleague presented your chart as his own."] * 3,
    "answer": ["He was nervous and spoke loosely; you can mention your part next time.", "", "One. Two. Three."],
}


class RewardEnsemblePyfunc:
    """What ``_load_pyfunc`` returns: MLflow calls ``predict(frame, params=...)``."""

    def __init__(self, ensemble) -> None:
        self.ensemble = ensemble

    def predict(self, model_input: pd.DataFrame, params=None):
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        output = (params or {}).get("output", "reward")
        if output == "parts":
            return self.ensemble.predict_parts(frame)
        if output != "reward":
            from reappreg.errors import InputError

            raise InputError(f"rm pyfunc: params output must be 'reward' or 'parts', got {output!r}")
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
        signature=infer_signature(example, pd.Series([0.0], name="reward").to_numpy(), params=dict(PARAMS)),
        input_example=example,
    )


def log_pyfunc(ensemble_dir: str | Path, name: str = "reward_ensemble"):
    """Log the ensemble folder as a pyfunc model in the active run; returns mlflow's ModelInfo."""
    return mlflow.pyfunc.log_model(name=name, **_model_kwargs(ensemble_dir))


def save_pyfunc(ensemble_dir: str | Path, path: str | Path) -> Path:
    """The same MLflow Model written to a local folder (the registry signs it before uploading)."""
    mlflow.pyfunc.save_model(path=str(path), **_model_kwargs(ensemble_dir))
    return Path(path)


def check_round_trip(ensemble_dir: str | Path, model_uri: str) -> None:
    """The logged model must give what the folder gives: the reward, and every part (both parts of a
    two-part model, and the ranking that joins them with its weight). Raises ReappregError otherwise."""
    import numpy as np

    from reappreg.errors import ReappregError
    from reappreg.rm.ensemble import load_ensemble

    probe = pd.DataFrame(PROBE)
    folder = load_ensemble(ensemble_dir)
    logged = mlflow.pyfunc.load_model(model_uri)
    direct, served = folder.predict_frame(probe), np.asarray(logged.predict(probe), dtype=np.float64)
    if not np.allclose(direct, served, atol=1e-9, rtol=0):
        raise ReappregError(f"logged pyfunc model gives {list(served)}, the folder {list(direct)}")
    parts, served_parts = folder.predict_parts(probe), logged.predict(probe, params={"output": "parts"})
    if list(served_parts.columns) != list(parts.columns) or not np.allclose(
            served_parts.to_numpy(dtype=np.float64), parts.to_numpy(dtype=np.float64), atol=1e-9, rtol=0, equal_nan=True):
        raise ReappregError(f"logged pyfunc model gives parts {served_parts.to_dict('list')}, the folder {parts.to_dict('list')}")
