"""Pairwise LLM judging of policy answers against held-out answers, and judge calibration.

One module per concern:

- :mod:`~reappreg.judge.prompt`: the judge prompt, read from ``pipelines/prompts/judge_prompt.yaml``
- :mod:`~reappreg.judge.parse`: judge results, label probabilities, free-text parsing (last resort)
- :mod:`~reappreg.judge.local`: transformers (next-token label probabilities) and vLLM (guided choice)
- :mod:`~reappreg.judge.http`: any OpenAI-compatible server (httpx + tenacity; key redaction)
- :mod:`~reappreg.judge.cache`: the disk cache every backend sits behind; :func:`build_judge`
- :mod:`~reappreg.judge.contests`: both-orders contests and the judgments file schema
- :mod:`~reappreg.judge.calibration`: human preference pairs and the trust gate

The verdict -> score mapping is :mod:`reappreg.verdicts` (shared with the statistics).
"""

from reappreg.judge.cache import CachedJudge, build_judge, cache_key, verdict_config
from reappreg.judge.calibration import PreferencePair, calibrate, calibration_metrics, human_preference_pairs
from reappreg.judge.contests import SELECTIONS, Contest, build_contests, contest_prompts, judge_contests, \
    summarise_judgments
from reappreg.judge.http import OpenAICompatibleJudge, Redactor, redact_url
from reappreg.judge.local import TransformersJudge, VllmJudge
from reappreg.judge.parse import JudgeBackendError, JudgeResult, parse_verdict
from reappreg.judge.prompt import JudgePrompt, load_judge_prompt, verdict_labels
from reappreg.verdicts import CONTEST_ORDERS as ORDERS
from reappreg.verdicts import VERDICTS

__all__ = [
    "CachedJudge", "Contest", "JudgeBackendError", "JudgePrompt", "JudgeResult", "ORDERS", "OpenAICompatibleJudge",
    "PreferencePair", "Redactor", "SELECTIONS", "TransformersJudge", "VERDICTS", "VllmJudge", "build_contests",
    "build_judge", "cache_key", "calibrate", "calibration_metrics", "contest_prompts", "human_preference_pairs",
    "judge_contests", "load_judge_prompt", "parse_verdict", "redact_url", "summarise_judgments", "verdict_config",
    "verdict_labels",
]
