from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reappreg.errors import InputError
from reappreg.settings import load_params, parse_params

REPO = Path(__file__).resolve().parents[1]


def test_repo_params_load_and_defaults_match_the_file():
    params = load_params(REPO / "params.yaml")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params.profile == "cpu"
    # every section present in params.yaml equals the schema's view of it (no silently ignored keys)
    for section, values in raw.items():
        if section in {"profile", "profiles"}:
            continue
        model = getattr(params, "validate_" if section == "validate" else section)
        dumped = model.model_dump()
        for key, value in (values or {}).items():
            assert dumped[key] == value or (isinstance(value, dict)), (section, key)


def test_full_profile_overlays_the_cpu_values():
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["profile"] = "full"
    full = parse_params(raw)
    assert full.profile == "full"


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
