"""The ``policy_base`` stage: the base policy materialised once (see :mod:`reappreg.policy.base`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.policy.stage import Status, no_status

if TYPE_CHECKING:
    from reappreg.settings import Params


def base_stage(p: Params, *, out: Path, report: Path, status: Status = no_status) -> dict[str, Any]:
    """Materialise the base policy (``policy.base``) into ``out``; write and return its report."""
    import mlflow

    from reappreg.io import write_json
    from reappreg.policy.base import materialise_base, resolve_base_source
    from reappreg.tracking import stage_run

    settings = p.policy.base
    source = resolve_base_source(settings)  # fail before the run starts when the model is missing
    with stage_run(
        "policy_base", tracking=p.tracking, params=settings.model_dump(),
        tags={"policy.base_model": settings.model_name, "policy.base_source": source.description},
    ):
        with status(f"materialising {settings.model_name} from {source.description} ..."):
            result = materialise_base(settings, out)
        result["model_name"] = settings.model_name
        write_json(report, result)
        mlflow.set_tags({"model.md5": result["md5"], "source.md5": result["source_md5"]})
        if "n_parameters" in result:
            mlflow.log_metric("n_parameters", result["n_parameters"])
        mlflow.log_artifact(str(report))
    return result
