"""The policy stages, given the validated settings: one module each, so a stage's DVC code deps
(``reappreg.dvcdeps``) hold only its own code.

The commands (``reappreg.commands.policy``) parse their options, call one function and print the
outcome; the checks, the MLflow run and the order of the steps live here.

* :func:`reappreg.policy.stage.base.base_stage`: materialise the base policy once (safetensors +
  tokenizer) and its report.
* :func:`reappreg.policy.stage.prompts.prompts_stage`: render one GRPO prompt per vignette with
  the policy's chat template, and copy the prompt file beside them.
* :func:`reappreg.policy.stage.train.train_stage`: refuse uncertified or mismatched inputs and
  impossible batch geometry before anything starts, then train in-process or through an
  ``accelerate launch`` of ``reappreg policy train-worker``, resuming from the work dir's
  checkpoints of the same run, and publish the model folder, the kept checkpoints and the summary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

# ``status(text)``: a context shown while a long step runs (e.g. a console spinner).
Status = Callable[[str], AbstractContextManager]


def no_status(_text: str) -> AbstractContextManager:
    return contextlib.nullcontext()
