"""Separating a thinking model's reasoning from its answer.

Qwen3-Thinking models emit ``<reasoning></think><answer>``; their chat template already
puts the opening ``<think>`` into the prompt, so a completion usually has only the
closing tag. Only the answer is ever scored or judged.
"""

from __future__ import annotations

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"


def split_thinking(text: str) -> tuple[str, str, bool]:
    """Return ``(thinking, answer, has_close_tag)``.

    With a ``</think>`` the answer is what follows its *last* occurrence (as Qwen's own
    parser does) and the thinking is what precedes it, minus an opening ``<think>``.
    Without one the text cannot be split: the whole text (minus a leading ``<think>``)
    is returned as the answer with ``has_close_tag=False``, and the caller decides
    whether to penalise it or score it whole.
    """
    if not isinstance(text, str):
        raise TypeError(f"split_thinking expects a string, got {type(text).__name__}")
    head, sep, tail = text.rpartition(CLOSE_TAG)
    if not sep:
        body = text.lstrip()
        if body.startswith(OPEN_TAG):
            body = body[len(OPEN_TAG):]
        return "", body.strip(), False
    thinking = head.lstrip()
    if thinking.startswith(OPEN_TAG):
        thinking = thinking[len(OPEN_TAG):]
    return thinking.strip(), tail.strip(), True
