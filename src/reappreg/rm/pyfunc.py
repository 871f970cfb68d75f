"""The ensemble as an MLflow pyfunc model: ``predict`` on a DataFrame (scenario, answer) -> reward.

The ensemble folder travels as the model's artifact and this package as its code, so a
fresh process (or ``mlflow models serve``) needs only the pinned requirements:
``mlflow.pyfunc.load_model(uri).predict(frame)`` returns the same rewards as
``reappreg.rm.load_ensemble(folder).score(...)``.
"""

from __future__ import annotations

import tempfile
import warnings
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


def log_pyfunc(ensemble_dir: str | Path, name: str = "reward_ensemble"):
    """Log the ensemble folder as a pyfunc model in the active run; returns mlflow's ModelInfo."""
    from mlflow.models import infer_signature

    example = pd.DataFrame({"scenario": ["A friend forgot your birthday."], "answer": ["Maybe she was overwhelmed."]})
    signature = infer_signature(example, pd.Series([0.0], name="reward").to_numpy())
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        # The signature is given explicitly; mlflow's hint about input examples does not apply.
        warnings.filterwarnings("ignore", message=".*input example was not provided.*")
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=RewardEnsembleModel(),
            artifacts={ARTIFACT_KEY: str(ensemble_dir)},
            code_paths=[str(model_code_copy(Path(tmp)))],
            pip_requirements=_requirements(),
            signature=signature,
        )


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
