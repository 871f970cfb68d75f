"""The README is the front door and the manual in docs/ is a site that builds.

* ``mkdocs build --strict`` builds docs/ (mkdocs.yml: material theme, every link and anchor
  validated, a warning fails the build); a planted broken link and anchor do fail it.
* README.md stays short (<= 250 lines) and its first screen says what a newcomer must know:
  the default data is synthetic, CPU win-rates are not meaningful, what the tests need, how
  long the two commands take, and what to open after ``dvc repro`` (the report path is read
  from dvc.yaml, the MLflow store from params.yaml).
* The README's two commands are the ones CI runs (``.ci/run``), and docs/index.md repeats them.
* Every fenced ``yaml`` example in README.md and docs/*.md that shows params (a mapping under
  one of params.yaml's top-level keys) agrees with the shipped params.yaml, key path by key
  path, unless the line before its fence is ``<!-- example: not the shipped values -->``.
  Gate examples agree with registry/models.yaml the same way.
* The pipeline tables name exactly dvc.yaml's stages.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stage_commands import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 250
FIRST_SCREEN = 40
ILLUSTRATIVE = re.compile(r"^\s*<!--\s*example:\s*not the shipped values\s*-->\s*$")
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)\s*$")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _mkdocs(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None,
    reason='mkdocs is not installed: pip install -e ".[dev]" (the dev extra has mkdocs and mkdocs-material)')


# ----------------------------------------------------------------------------- the site


def test_mkdocs_config_is_strict_and_validates_links_and_anchors():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True
    assert config["theme"]["name"] == "material"
    assert config["validation"]["links"] == {"not_found": "warn", "anchors": "warn",
                                             "absolute_links": "warn", "unrecognized_links": "warn"}
    assert config["validation"]["nav"]["omitted_files"] == "warn"
    listed = {next(iter(entry.values())) if isinstance(entry, dict) else entry for entry in config["nav"]}
    assert listed == {p.name for p in DOCS.glob("*.md")}


@needs_mkdocs
def test_the_manual_builds_with_strict_link_checking(tmp_path):
    built = _mkdocs("build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site"))
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "index.html").exists()


@needs_mkdocs
def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    page = tmp_path / "docs" / "reliability.md"
    page.write_text(page.read_text(encoding="utf-8")
                    + "\nSee [the guard](guard.md#no-such-anchor) and [nothing](no-such-page.md).\n",
                    encoding="utf-8")
    built = _mkdocs("build", "--strict", "-d", str(tmp_path / "site"), cwd=tmp_path)
    out = built.stdout + built.stderr
    assert built.returncode != 0, out
    assert "#no-such-anchor" in out and "no-such-page.md" in out, out


# ----------------------------------------------------------------------------- the front door


def _report_outputs() -> list[str]:
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in dvc["stages"]["report"]["outs"]]
    return [o for o in outs if re.fullmatch(r"reports/[\w.-]+\.(html|md)", o)]


def test_the_readme_is_a_short_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the manual goes in docs/"
    head = "\n".join(lines[:FIRST_SCREEN])
    assert re.search(r"\bsynthetic\b", head, re.I), "the first screen must say the default data is synthetic"
    assert re.search(r"Li et al\. \(2025\)", head) and re.search(r"not\s+shipped", head)
    assert re.search(r"CPU win-rates are not meaningful", head), \
        "the first screen must say CPU win-rates are not meaningful"
    assert "SmolLM2-135M" in head
    for needed in ("Chromium", "chromedriver", "PostgreSQL", "20 GiB"):
        assert needed in head, f"the first screen must say the tests need {needed}"
    assert re.search(r"`dvc repro` takes about \d+ minutes", head)
    assert re.search(r"the tests \d+–\d+", head)
    reports = _report_outputs()
    assert reports and all(r in head for r in reports), reports
    tracking = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))["tracking"]["uri"]
    assert f"mlflow ui --backend-store-uri {tracking}" in head


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def _bash_fences(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_the_readmes_two_commands_are_the_ones_ci_runs():
    readme = README.read_text(encoding="utf-8")
    two = _section(readme, "Two commands")
    assert _bash_fences(two) == ["bash pipelines/setup.sh && . .venv/bin/activate && dvc repro",
                                 ". .venv/bin/activate && pytest"]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "bash pipelines/setup.sh" in ci
    assert _bash_fences(two)[1] in ci, "CI must run the README's test command"
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    assert _section(index, "Two commands").strip() == two.strip()


def test_the_readme_links_every_page_of_the_manual_and_nothing_missing():
    readme = README.read_text(encoding="utf-8")
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if not re.match(r"\w+:|#", t)}
    assert {t for t in targets if not (REPO / t).is_file()} == set()
    assert {f"docs/{p.name}" for p in DOCS.glob("*.md")} <= targets


def _stage_names(text: str) -> set[str]:
    names = set()
    for row in re.findall(r"^\| (`[^|]*) \|", text, re.M):
        names |= {n for n in re.findall(r"`([a-z_]+)(?:@[^`]*)?`", row)}
    return names


@pytest.mark.parametrize("page", ["README.md", "docs/pipeline.md"])
def test_the_pipeline_table_names_exactly_the_stages_of_dvc_yaml(page):
    stages = set(yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"])
    text = (REPO / page).read_text(encoding="utf-8")
    assert _stage_names(_section(text, "Pipeline") if page == "README.md" else text) == stages


# ----------------------------------------------------------------------------- examples vs shipped values


def yaml_fences(text: str) -> list[tuple[int, str, bool]]:
    """(line number, body, marked illustrative) of every fenced ``yaml``/``yml`` block."""
    fences, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opened = FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        ticks, indent = opened["ticks"], len(opened["indent"])
        info = opened["info"].split()[0].lower() if opened["info"].strip() else ""
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(ticks[0])}{{{len(ticks)},}}\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if info in ("yaml", "yml"):
            before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            fences.append((i + 1, "\n".join(body), bool(ILLUSTRATIVE.match(before))))
        i = j + 1
    return fences


def _same(example, shipped) -> bool:
    if isinstance(example, bool) or isinstance(shipped, bool):
        return example is shipped
    if isinstance(example, list) and isinstance(shipped, list):
        return len(example) == len(shipped) and all(_same(a, b) for a, b in zip(example, shipped))
    if isinstance(example, dict) and isinstance(shipped, dict):
        return example.keys() == shipped.keys() and all(_same(v, shipped[k]) for k, v in example.items())
    return type(example) is type(shipped) and example == shipped


def _differences(example, shipped, path: str):
    if isinstance(example, dict):
        if not isinstance(shipped, dict):
            yield f"{path}: a mapping in the example, {shipped!r} in the shipped file"
            return
        for key, value in example.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in shipped:
                yield f"{where}: not in the shipped file"
            else:
                yield from _differences(value, shipped[key], where)
    elif not _same(example, shipped):
        yield f"{path}: {example!r} in the example, {shipped!r} shipped"


def _gates(node) -> list[dict]:
    if isinstance(node, dict):
        own = [node] if {"name", "evidence"} <= node.keys() else []
        return own + [g for v in node.values() for g in _gates(v)]
    if isinstance(node, list):
        return [g for v in node for g in _gates(v)]
    return []


def example_problems(text: str, params: dict, models: dict) -> tuple[list[str], int]:
    """Problems of the yaml examples in ``text`` against the shipped files, and how many were checked."""
    problems, checked, gates = [], 0, _gates(models)
    for line, body, illustrative in yaml_fences(text):
        if illustrative:
            continue
        try:
            example = yaml.safe_load(body)
        except yaml.YAMLError as error:
            problems.append(f"line {line}: not YAML ({error.__class__.__name__}); fix it or mark it illustrative")
            continue
        if isinstance(example, dict) and set(example) & set(params):
            checked += 1
            problems += [f"line {line}: {d}" for d in _differences(example, params, "")]
        elif example and isinstance(example, list) and all(isinstance(g, dict) and "evidence" in g
                                                            for g in example):
            checked += 1
            problems += [f"line {line}: gate {g!r} is not in registry/models.yaml" for g in example
                         if not any(_same(g, shipped) for shipped in gates)]
    return problems, checked


@pytest.fixture(scope="module")
def shipped():
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    models = yaml.safe_load((REPO / "registry" / "models.yaml").read_text(encoding="utf-8"))
    return params, models


def test_every_params_example_in_the_readme_and_the_manual_is_the_shipped_value(shipped):
    problems, checked = [], 0
    for page in _pages():
        found, n = example_problems(page.read_text(encoding="utf-8"), *shipped)
        problems += [f"{page.relative_to(REPO)} {p}" for p in found]
        checked += n
    assert problems == []
    assert checked >= 2, "the GRPO settings and the gate examples are checked"


GRPO_EXAMPLE = """
Some prose.
{marker}
```yaml
policy:
  train:
    trl:
      loss_type: grpo
      scale_rewards: {scale}
{extra}```
"""


@pytest.mark.parametrize(("scale", "extra", "marker", "expected"), [
    ("group", "", "", []),
    ("batch", "", "", ["policy.train.trl.scale_rewards: 'batch' in the example, 'group' shipped"]),
    ("group", "      mask_truncated_completions: true\n", "",
     ["policy.train.trl.mask_truncated_completions: not in the shipped file"]),
    ("batch", "      mask_truncated_completions: true\n", "<!-- example: not the shipped values -->", []),
])
def test_the_example_checker_catches_a_value_that_is_not_shipped(shipped, scale, extra, marker, expected):
    text = GRPO_EXAMPLE.format(scale=scale, extra=extra, marker=marker)
    problems, checked = example_problems(text, *shipped)
    assert [p.split(": ", 1)[1] for p in problems] == expected
    assert checked == (0 if marker else 1)


def test_the_example_checker_reads_gates_and_leaves_other_yaml_alone(shipped):
    gate = '```yaml\n- {name: min_n, evidence: eval.bar.n, op: ">=", value: %s}\n```\n'
    assert example_problems(gate % 240, *shipped) == ([], 1)
    assert len(example_problems(gate % 120, *shipped)[0]) == 1
    assert example_problems("```yaml\nsite_name: elsewhere\n```\n", *shipped) == ([], 0)
    assert example_problems("```yaml\nguard: [unclosed\n```\n", *shipped)[0]
    assert example_problems("```yml\nprofile: full\n```\n", *shipped)[0] == [
        "line 1: profile: 'full' in the example, 'cpu' shipped"]
