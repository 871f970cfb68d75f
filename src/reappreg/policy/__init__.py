"""Policy training: the GRPO prompt, the base policy, the RM reward, GRPO with TRL.

Light helpers are importable from here without torch; the training code (``train``,
``base``) imports torch/transformers/TRL inside its functions.

- :func:`load_prompt_template`, :func:`render_prompt`: the single GRPO prompt file,
  rendered with a tokenizer's chat template (used by training and generation alike).
- :func:`split_thinking`: ``(thinking, answer, has_close_tag)`` of a completion.

The stages themselves (base, prompts, train), given the settings: :mod:`reappreg.policy.stage`.
"""

from reappreg.policy.prompts import PromptTemplate, load_prompt_template, render_prompt, render_prompt_records
from reappreg.policy.thinking import split_thinking

__all__ = ["PromptTemplate", "load_prompt_template", "render_prompt", "render_prompt_records", "split_thinking"]
