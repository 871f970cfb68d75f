"""The ``policy_prompts`` stage: the GRPO prompts rendered with the policy's chat template."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from reappreg.errors import InputError

if TYPE_CHECKING:
    from reappreg.settings import Params


def prompts_stage(p: Params, *, vignettes: Path, base_model: Path, out: Path, prompt_out: Path) -> int:
    """Render one GRPO prompt per vignette (prompt file ``policy.prompt.file``) with the chat template
    of ``base_model`` into ``out``, copy the prompt file to ``prompt_out``; returns the prompt count."""
    import mlflow
    from transformers import AutoTokenizer

    from reappreg.io import read_jsonl, write_jsonl, write_text
    from reappreg.policy.prompts import load_prompt_template, render_prompt_records
    from reappreg.tracking import stage_run

    prompt_file = Path(p.policy.prompt.file)
    template = load_prompt_template(prompt_file)
    if not (base_model / "tokenizer_config.json").is_file():
        raise InputError(f"{base_model}: no tokenizer_config.json; run `reappreg policy base` first")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with stage_run(
        "policy_prompts", tracking=p.tracking, params={"prompt_file": str(prompt_file), "prompt_version": template.version},
        tags={"policy.prompt.sha256": template.sha256},
        inputs={"vignettes": vignettes, "prompt_file": prompt_file, "base_model": base_model},
    ):
        tokenizer = AutoTokenizer.from_pretrained(base_model, local_files_only=True)
        records = render_prompt_records(read_jsonl(vignettes), tokenizer, template, source=str(vignettes))
        write_jsonl(out, records)
        # The same bytes, behind one comment line naming the source (the wording hash is unchanged).
        write_text(prompt_out, f"# Copied by `reappreg policy prompts` from {prompt_file} (policy.prompt.file).\n"
                   + prompt_file.read_text(encoding="utf-8"))
        mlflow.log_metric("n_prompts", len(records))
        mlflow.log_artifact(str(out))
    return len(records)
