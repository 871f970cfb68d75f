"""The ensemble as an MLflow pyfunc model: ``predict`` on a DataFrame (scenario, answer) -> reward.

The ensemble folder travels as the model's artifact and this package as its code, so a
fresh process (or ``mlflow models serve``) needs only the pinned requirements:
``mlflow.pyfunc.load_model(uri).predict(frame)`` returns the same rewards as
``reappreg.rm.load_ensemble(folder).score(...)``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import mlflow.pyfunc
import pandas as pd

ARTIFACT_KEY = "ensemble"


class RewardEnsembleModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        from reappreg.rm.ensemble import load_ensemble

        self.ensemble = load_ensemble(context.artifacts[ARTIFACT_KEY])

    # The DataFrame hint tells mlflow the input kind; the schema (two string columns) is
    # the explicit signature given at logging.
    def predict(self, context, model_input: pd.DataFrame, params=None):
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        return self.ensemble.predict_frame(frame)


def _requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in
            ("mlflow", "torch", "transformers", "safetensors", "pysbd", "numpy", "pandas", "scipy", "pydantic")]


INPUT_EXAMPLE = {"scenario": ["A friend forgot your birthday."], "answer": ["Maybe she was overwhelmed."]}


def _model_kwargs(ensemble_dir: str | Path, code_dir: Path) -> dict:
    """What ``log_pyfunc`` and ``save_pyfunc`` share: the model, its artifact, code, requirements, signature, example."""
    from mlflow.models import infer_signature

    example = pd.DataFrame(INPUT_EXAMPLE)
    return dict(
        python_model=RewardEnsembleModel(),
        artifacts={ARTIFACT_KEY: str(ensemble_dir)},
        code_paths=[str(model_code_copy(code_dir))],
        pip_requirements=_requirements(),
        signature=infer_signature(example, pd.Series([0.0], name="reward").to_numpy()),
        input_example=example,
    )


def log_pyfunc(ensemble_dir: str | Path, name: str = "reward_ensemble"):
    """Log the ensemble folder as a pyfunc model in the active run; returns mlflow's ModelInfo."""
    with tempfile.TemporaryDirectory() as tmp:
        return mlflow.pyfunc.log_model(name=name, **_model_kwargs(ensemble_dir, Path(tmp)))


def save_pyfunc(ensemble_dir: str | Path, path: str | Path) -> Path:
    """The same MLflow Model written to a local folder (the registry signs it before uploading)."""
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.pyfunc.save_model(path=str(path), **_model_kwargs(ensemble_dir, Path(tmp)))
    return Path(path)


# The sample-data phrase banks include the held-out answers' wording; a reward model needs
# none of it, and shipping it inside the model would be a leak the leak scan (rightly) flags.
EXCLUDED_FROM_MODEL_CODE = ("vignettes.py", "__pycache__")


def model_code_copy(dest: Path) -> Path:
    """A copy of the reappreg package without the sample generator's phrase banks."""
    import shutil

    import reappreg

    target = dest / "reappreg"
    shutil.copytree(Path(reappreg.__file__).parent, target, ignore=shutil.ignore_patterns(*EXCLUDED_FROM_MODEL_CODE))
    return target
