"""One loader for the prompt files under pipelines/prompts/ (reappreg.prompt_file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reappreg.errors import InputError
from reappreg.judge.prompt import PLACEHOLDERS, load_judge_prompt
from reappreg.policy.prompts import SCENARIO_PLACEHOLDER, load_prompt_template
from reappreg.prompt_file import read_prompt_file

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "pipelines" / "prompts"


def test_both_prompts_live_beside_each_other_and_load_through_the_one_loader():
    judge = read_prompt_file(PROMPTS / "judge_prompt.yaml", "judge prompt", PLACEHOLDERS)
    grpo = read_prompt_file(PROMPTS / "grpo_prompt.yaml", "prompt", (SCENARIO_PLACEHOLDER,))
    loaded_judge = load_judge_prompt(PROMPTS / "judge_prompt.yaml")
    assert (loaded_judge.system, loaded_judge.user_template, loaded_judge.version) == (
        judge["system"], judge["user_template"], judge["version"])  # the judge's texts are used verbatim
    template = load_prompt_template(PROMPTS / "grpo_prompt.yaml")
    assert (template.system, template.user_template) == (grpo["system"].strip(), grpo["user_template"].strip())


@pytest.mark.parametrize("body,problem", [
    ("- a list\n", r"top level must be a mapping with keys version, system, user_template"),
    ("version: 1\nsystem: s\n", r"missing key\(s\) user_template"),
    ("version: 1\nsystem: s\nuser_template: '{x}'\nnotes: n\n", r"unknown key\(s\) notes"),
    ("version: 1\nsystem: '  '\nuser_template: '{x}'\n", r"'system' must be a non-empty string"),
    ("version: one\nsystem: s\nuser_template: '{x}'\n", r"'version' must be an integer \(got 'one'\)"),
    ("version: true\nsystem: s\nuser_template: '{x}'\n", r"'version' must be an integer \(got True\)"),
    ("version: 1\nsystem: s\nsystem: t\nuser_template: '{x}'\n", r"invalid YAML at line 3 .*duplicate key 'system'"),
    ("version: 1\nsystem: s\nuser_template: '{x} {x}'\n", r"'user_template' must contain \{x\} exactly once \(found 2\)"),
])
def test_a_bad_prompt_file_names_its_problem(tmp_path, body, problem):
    path = tmp_path / "p.yaml"
    path.write_text(body)
    with pytest.raises(InputError, match=rf"p\.yaml: {problem}"):
        read_prompt_file(path, "prompt", ("{x}",))


def test_several_placeholders_name_the_wrong_ones_and_a_missing_file_names_the_prompt(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nsystem: s\nuser_template: '{a} {b} {b}'\n")
    with pytest.raises(InputError, match=r"each of \{a\}, \{b\}, \{c\} exactly once \(wrong: \{b\}, \{c\}\)"):
        read_prompt_file(path, "prompt", ("{a}", "{b}", "{c}"))
    with pytest.raises(InputError, match=r"missing\.yaml: judge prompt file not found"):
        read_prompt_file(tmp_path / "missing.yaml", "judge prompt", ("{a}",))
