"""Reference-answer conditions and off-distribution sets (reappreg.eval.conditions): the guard blocks overlaps."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from reappreg.eval.conditions import (
    check_fresh_scenarios,
    load_situation_csv,
    read_reference_answers,
    reference_generations,
)
from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl, write_jsonl
from reappreg.judge import build_contests
from reappreg.settings import load_params
from reappreg.settings.guard import GuardSettings

REPO = Path(__file__).resolve().parents[2]
GUARD = GuardSettings()
VIGNETTES = [
    {"vignette_id": "v1", "title": "Missed promotion",
     "scenario": "You were passed over for a promotion you had worked toward for two years."},
    {"vignette_id": "v2", "title": "Cancelled trip",
     "scenario": "Your friend cancelled the trip you had planned together the night before leaving."},
]
REAPPRAISALS = [
    {"reappraisal_id": "r1", "vignette_id": "v1",
     "text": "This setback shows me which skills to build next, and my manager now knows how much I want to grow."},
    {"reappraisal_id": "r2", "vignette_id": "v2",
     "text": "My friend may be dealing with something I do not know about, and we can plan another trip later."},
]
CLEAN = [
    {"vignette_id": "v1", "source": "frontier-x",
     "text": "Being overlooked hurts, yet it gives a clear signal to ask for concrete feedback and a timeline."},
    {"vignette_id": "v2", "source": "frontier-x",
     "text": "A free weekend appeared unexpectedly; I can rest, and talk with my friend once emotions settle."},
]


@pytest.fixture
def training(tmp_path: Path) -> list[str]:
    write_jsonl(tmp_path / "vignettes.jsonl", VIGNETTES)
    write_jsonl(tmp_path / "reappraisals.jsonl", REAPPRAISALS)
    return [f"{tmp_path / 'vignettes.jsonl'}:vignette_id:title,scenario",
            f"{tmp_path / 'reappraisals.jsonl'}:reappraisal_id:text"]


def test_clean_reference_answers_become_judgeable_generations(training):
    rows, summary = reference_generations("frontier-x", CLEAN, VIGNETTES, training_specs=training, guard=GUARD)
    assert summary["hits"] == 0 and summary["checked_texts"] == 2
    assert [r["answer"] for r in rows] == [a["text"] for a in CLEAN]
    assert len({r["sampling_seed"] for r in rows}) == 2 and all(r["selected"] for r in rows)
    answers = [{"answer_id": f"g-{v['vignette_id']}", "vignette_id": v["vignette_id"], "source": "gpt-4-0314",
                "text": "GPT-4's answer."} for v in VIGNETTES]
    contests = build_contests(rows, answers, ["gpt-4-0314"], 1)
    assert [c.policy_answer for c in contests] == [a["text"] for a in CLEAN]


@pytest.mark.parametrize("disguise", [
    lambda t: t,                                                     # verbatim
    lambda t: t.upper().replace(" ", "  "),                          # case and spacing
    lambda t: "Some preamble words here. " + t + " And a closing remark.",  # embedded
    lambda t: t.replace("skills", "abilities").replace("next", "soon"),     # light paraphrase
])
def test_reference_answer_sharing_text_with_training_is_blocked(training, disguise):
    leaked = [CLEAN[0], {"vignette_id": "v1", "source": "frontier-x", "text": disguise(REAPPRAISALS[0]["text"])}]
    with pytest.raises(InputError, match="blocked by the separation guard") as err:
        reference_generations("frontier-x", leaked, VIGNETTES, training_specs=training, guard=GUARD)
    assert "r1" in str(err.value)


def test_reference_answer_copying_a_scenario_is_blocked(training):
    leaked = [{"vignette_id": "v2", "source": "frontier-x", "text": VIGNETTES[1]["scenario"]}]
    with pytest.raises(InputError, match="blocked"):
        reference_generations("frontier-x", leaked, VIGNETTES, training_specs=training, guard=GUARD)


def test_reference_answers_need_known_vignettes_and_fields(tmp_path, training):
    with pytest.raises(InputError, match="not in the eval set"):
        reference_generations("x", [{**CLEAN[0], "vignette_id": "v9"}], VIGNETTES, training_specs=training,
                              guard=GUARD)
    write_jsonl(tmp_path / "bad.jsonl", [CLEAN[0], {"vignette_id": "v1", "text": "  "}])
    with pytest.raises(InputError, match="row 2: text, source"):
        read_reference_answers(tmp_path / "bad.jsonl")
    with pytest.raises(InputError, match="no training sources"):
        reference_generations("x", CLEAN, VIGNETTES, training_specs=[], guard=GUARD)


def _params_with_reference(tmp_path: Path, answers: Path) -> Path:
    text = (REPO / "params.yaml").read_text()
    marker = "  reference_conditions: []"
    assert marker in text
    params = tmp_path / "params.yaml"
    params.write_text(text.replace(marker, f"  reference_conditions:\n    - {{name: frontier-x, answers: {answers}, "
                                           "source: frontier-x}"))
    return params


def _exit_code(args: list[str]) -> int:
    from reappreg.cli import main

    with pytest.raises(SystemExit) as done:
        main(args)
    return int(done.value.code or 0)


def test_cli_blocks_a_leaking_reference_condition(tmp_path, training, capsys):
    leaked = tmp_path / "leaked.jsonl"
    write_jsonl(leaked, [CLEAN[0], {"vignette_id": "v1", "source": "frontier-x", "text": REAPPRAISALS[0]["text"]}])
    params = _params_with_reference(tmp_path, leaked)
    out = tmp_path / "out" / "generations.jsonl"
    args = ["generate", "reference", "--name", "frontier-x", "--vignettes", str(tmp_path / "vignettes.jsonl"),
            *[a for spec in training for a in ("--train", spec)], "--out", str(out),
            "--guard-report", str(tmp_path / "out" / "guard.json"), "--params", str(params)]
    code = _exit_code(args)
    assert code == 2 and not out.exists()
    assert "blocked by the separation guard" in capsys.readouterr().err
    clean = tmp_path / "clean.jsonl"
    write_jsonl(clean, CLEAN)
    params = _params_with_reference(tmp_path, clean)
    assert _exit_code([*args[:-1], str(params)]) == 0
    assert len(read_jsonl(out)) == 2 and read_json(tmp_path / "out" / "guard.json")["hits"] == 0


def test_default_pipeline_has_no_off_distribution_set_and_no_shared_data_dep():
    params = load_params(REPO / "params.yaml")
    assert params.stats.ood_sets == []
    assert "sharma" not in (REPO / "dvc.yaml").read_text().lower()


def test_sharma_situations_are_fresh_scenarios_with_human_reframes(sharma_csv, training):
    vignettes, answers = load_situation_csv(sharma_csv, scenario_field="situation", answer_field="reframe",
                                            set_name="sharma2023", opponent="sharma2023-human", max_scenarios=12)
    assert len(vignettes) == 12 and all(v["ood"] for v in vignettes)
    assert {a["vignette_id"] for a in answers} == {v["vignette_id"] for v in vignettes}
    assert len(answers) > len(vignettes)          # several human reframes per situation
    summary = check_fresh_scenarios("sharma2023", vignettes, training_specs=training, guard=GUARD)
    assert summary["ood"] is True and summary["hits"] == 0


def test_sharma_situation_inside_training_text_is_blocked(sharma_csv, tmp_path, training):
    vignettes, _ = load_situation_csv(sharma_csv, scenario_field="situation", answer_field="reframe",
                                      set_name="sharma2023", opponent="sharma2023-human", max_scenarios=12)
    long_one = max(vignettes, key=lambda v: len(v["scenario"]))
    write_jsonl(tmp_path / "prompts.jsonl", [{"prompt_id": "p1", "prompt": "Reappraise: " + long_one["scenario"]}])
    with pytest.raises(InputError, match="off-distribution set 'sharma2023'.*blocked"):
        check_fresh_scenarios("sharma2023", vignettes, guard=GUARD,
                              training_specs=[*training, f"{tmp_path / 'prompts.jsonl'}:prompt_id:prompt"])


def test_situation_csv_errors_name_the_columns(tmp_path):
    path = tmp_path / "s.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([["situation", "thought"], ["a", "b"]])
    with pytest.raises(InputError, match="reframe"):
        load_situation_csv(path, scenario_field="situation", answer_field="reframe", set_name="s", opponent="h")
