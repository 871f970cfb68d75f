from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reappreg.errors import InputError
from reappreg.settings import load_params, parse_params

REPO = Path(__file__).resolve().parents[2]


def _plain(value):
    """YAML's view of a dumped value: tuples are lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def assert_same_values(written, parsed, where: str) -> None:
    """Every key written in params.yaml is in the parsed settings with the same value, at every depth."""
    if isinstance(written, dict):
        assert isinstance(parsed, dict), f"{where}: params.yaml has a mapping, the settings have {parsed!r}"
        for key, value in written.items():
            assert key in parsed, f"{where}.{key}: in params.yaml but not in the parsed settings"
            assert_same_values(value, parsed[key], f"{where}.{key}")
    else:
        assert _plain(parsed) == _plain(written), f"{where}: params.yaml says {written!r}, the settings {parsed!r}"


def test_repo_params_load_and_every_value_matches_the_file():
    params = load_params(REPO / "params.yaml")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params.profile == "cpu"
    dumped = params.model_dump(by_alias=True)
    for section, values in raw.items():
        if section in {"profile", "profiles"}:
            continue
        assert_same_values(values, dumped[section], section)


def test_assert_same_values_sees_a_difference_deep_inside_a_section():
    with pytest.raises(AssertionError, match="guard.detectors.ngram.n"):
        assert_same_values({"detectors": {"ngram": {"n": 5}}}, {"detectors": {"ngram": {"n": 6}}}, "guard")
    with pytest.raises(AssertionError, match="not in the parsed settings"):
        assert_same_values({"a": {"b": 1}}, {"a": {}}, "x")


@pytest.mark.parametrize("profile", sorted((yaml.safe_load((REPO / "params.yaml").read_text()).get("profiles") or {})))
def test_each_profile_overlays_its_values_and_keeps_the_rest(profile):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    overlay = raw["profiles"][profile] or {}
    base = parse_params(raw).model_dump(by_alias=True)
    chosen = parse_params({**raw, "profile": profile}).model_dump(by_alias=True)
    assert chosen["profile"] == profile
    for section, values in overlay.items():
        assert_same_values(values, chosen[section], f"profiles.{profile}.{section}")

    def untouched(base_node, chosen_node, overlay_node, where):
        for key, value in base_node.items():
            if isinstance(overlay_node, dict) and key in overlay_node:
                if isinstance(value, dict) and isinstance(overlay_node[key], dict):
                    untouched(value, chosen_node[key], overlay_node[key], f"{where}.{key}")
                continue
            assert _plain(chosen_node[key]) == _plain(value), f"{where}.{key} changed without being in the overlay"

    for section, values in base.items():
        if section != "profile" and isinstance(values, dict):
            untouched(values, chosen[section], overlay.get(section), section)


def test_unknown_key_is_named():
    with pytest.raises(InputError, match="unknown key 'validate.min_rater'"):
        parse_params({"validate": {"min_rater": 3}})


def test_wrong_type_is_named():
    with pytest.raises(InputError, match="'data.sample.seed'"):
        parse_params({"data": {"sample": {"seed": "thirteen"}}})


def test_unknown_profile():
    with pytest.raises(InputError, match="profile 'gpu' is not defined"):
        parse_params({"profile": "gpu"})


def test_typo_in_full_profile_fails_on_cpu_too():
    with pytest.raises(InputError, match=r"(?s)profiles.full.*unknown key 'data.sorce'"):
        parse_params({"profiles": {"full": {"data": {"sorce": "x"}}}})


def test_params_file_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "params.yaml"
    with pytest.raises(InputError, match="params file not found"):
        load_params(path)
    path.write_text("data:\n  source: sample\n    seed: 3\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"params.yaml: invalid YAML at line 3"):
        load_params(path)
    path.write_text("split:\n  train_sources: [human]\nsplit:\n  train_sources: [gpt]\n", encoding="utf-8")
    with pytest.raises(InputError, match="split"):  # a repeated key is refused, not silently last-one-wins
        load_params(path)


@pytest.mark.parametrize("counts, message", [
    ({}, "sentence_counts is empty"),
    ({0: 0.5, 2: 0.5}, r"a count must be a whole number of sentences >= 1 \(got 0\)"),
    ({2: 0.5, 3: 0.4}, r"the shares must sum to 1 \(they sum to 0.9\)"),
    ({2: 1.5, 3: -0.5}, r"the share of 3 sentence\(s\) must be a positive number \(got -0.5\)"),
    ({2: 0.0, 3: 1.0}, r"the share of 2 sentence\(s\) must be a positive number \(got 0.0\)"),
    ({"two": 1.0}, r"'data.sample.sentence_counts"),
])
def test_bad_sentence_counts_are_named(counts, message):
    with pytest.raises(InputError, match=message):
        parse_params({"data": {"sample": {"sentence_counts": counts}}})


def test_sentence_counts_accept_a_distribution_or_null():
    from reappreg.settings.data import SENTENCE_COUNTS

    assert parse_params({}).data.sample.sentence_counts == SENTENCE_COUNTS
    assert parse_params({"data": {"sample": {"sentence_counts": None}}}).data.sample.sentence_counts is None
    # YAML keys may come as strings; shares within rounding of 1 pass
    chosen = parse_params({"data": {"sample": {"sentence_counts": {"3": 1 / 3, 2: 1 / 3, 1: 1 / 3}}}})
    assert list(chosen.data.sample.sentence_counts) == [1, 2, 3]
