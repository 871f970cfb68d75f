"""The ``card`` stage: one model card per declared model and kept checkpoint, tracked in MLflow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from reappreg.card.evidence import EvidencePaths
from reappreg.settings import Params


def build_cards(settings: Params, *, models: Path, template: Path, evidence_paths: EvidencePaths, out_dir: Path,
                allow_dirty: bool, on_card: Callable[[Path, int], None] | None = None) -> list[Path]:
    """Write ``<name>.md`` per declared model (and ``<name>.step-<n>.md`` per kept checkpoint of a
    policy) under ``out_dir``; returns the paths. ``on_card(path, chars)`` is told of each card."""
    import mlflow

    from reappreg.card.build import (
        CardBuild,
        card_inputs_for,
        checkpoint_card_name,
        kept_checkpoints,
        render_card,
        source_revision,
    )
    from reappreg.errors import InputError
    from reappreg.evidence.declarations import load_declarations
    from reappreg.io import write_text
    from reappreg.tracking import stage_run

    decl = load_declarations(models)
    if not template.exists():
        raise InputError(f"{template}: card template not found")
    template_text = template.read_text(encoding="utf-8")
    evidence = evidence_paths.load()
    inputs = {"models": models, "template": template, **dict(evidence.sources.items())}
    build = CardBuild(decl=decl, evidence=evidence, revision={**source_revision(), "dirty_allowed": allow_dirty},
                      stage="register")
    written = []
    with stage_run("card", tracking=settings.tracking, params={**settings.registry.model_dump(),
                                                               "card": settings.card.model_dump()}, inputs=inputs):
        for name, model in decl.models.items():
            # A policy's kept checkpoints (policy.train.checkpoint_steps) are versions of their own:
            # one card each (<name>.step-<n>.md), then the final model's (<name>.md).
            versions = [(checkpoint_card_name(name, c["step"]), c)
                        for c in kept_checkpoints(model, evidence, settings.policy.train.checkpoint_steps)]
            for stem, checkpoint in [*versions, (name, None)]:
                card_inputs = card_inputs_for(settings, build, name, checkpoint=checkpoint)
                text = render_card(template_text, str(template), card_inputs, evidence)
                out = out_dir / f"{stem}.md"
                write_text(out, text)
                mlflow.log_artifact(str(out), artifact_path="cards")
                mlflow.log_metric(f"card/{stem}/chars", len(text))
                written.append(out)
                if on_card is not None:
                    on_card(out, len(text))
    return written


__all__ = ["build_cards"]
