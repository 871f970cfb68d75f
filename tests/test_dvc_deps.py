"""Every DVC stage depends on the code its command runs (reappreg.dvcdeps)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reappreg.dvcdeps import (
    SourceTree,
    command_closure,
    differences,
    expand,
    expected_code_deps,
    listed_code_deps,
    rewrite_text,
)
from reappreg.errors import InputError
from reappreg.io import read_yaml

REPO = Path(__file__).resolve().parents[1]
REGENERATE = "regenerate with `python -m reappreg.dvcdeps --write`"


@pytest.fixture(scope="module")
def expected():
    return expected_code_deps(REPO)


def test_dvc_yaml_lists_every_module_each_stage_imports(expected):
    diff = differences(REPO, expected)
    assert not diff, f"dvc.yaml code deps are stale ({REGENERATE}):\n" + "\n".join(diff)


def _fake_repo(tmp_path: Path, dvc_text: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "src").symlink_to(REPO / "src")
    (repo / "dvc.yaml").write_text(dvc_text)
    return repo


def test_dropping_any_code_dep_of_any_stage_is_caught(tmp_path, expected):
    text = (REPO / "dvc.yaml").read_text()
    listed = listed_code_deps(REPO)
    repo = _fake_repo(tmp_path, text)
    for stage, deps in listed.items():
        victim = deps[len(deps) // 2]
        (repo / "dvc.yaml").write_text(rewrite_text(text, {stage: [d for d in deps if d != victim]}))
        diff = differences(repo, expected)
        assert len(diff) == 1 and diff[0].startswith(f"{stage}: missing "), diff
        assert sorted(expand([victim], REPO))[0] in diff[0]


def test_the_old_hand_written_deps_fail(tmp_path, expected):
    """The deps as they were written by hand: judge listed only its own module, split lacked
    data.py, policy_train lacked rm and guard."""
    text = (REPO / "dvc.yaml").read_text()
    listed = listed_code_deps(REPO)
    old = {
        "judge": [d for d in listed["judge"] if d.startswith("src/reappreg/judge")],
        "split": ["src/reappreg/data/split.py"],
        "policy_train": [d for d in listed["policy_train"] if d.startswith("src/reappreg/policy")],
    }
    repo = _fake_repo(tmp_path, rewrite_text(text, old))
    diff = {line.split(":")[0]: line for line in differences(repo, expected)}
    assert set(diff) == set(old)
    assert "src/reappreg/data/canonical.py" in diff["split"]
    assert "src/reappreg/rm/" in diff["policy_train"] and "src/reappreg/guard/" in diff["policy_train"]
    assert "src/reappreg/settings/" in diff["judge"]


# ----------------------------------------------------------------------------- the closure rules


def _package(tmp_path: Path, files: dict[str, str]) -> SourceTree:
    root = tmp_path / "src"
    for name, body in {"reappreg/__init__.py": "", "reappreg/cli.py": "SUBCOMMANDS = ('x',)\nCOMMANDS = [('top', 'top', 'top')]\n",
                       "reappreg/__main__.py": "from reappreg.cli import main\n",
                       "reappreg/commands/__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
    return SourceTree(root)


def _names(closure: set[str]) -> set[str]:
    return {m for m in closure if m not in {"reappreg", "reappreg.cli", "reappreg.__main__", "reappreg.commands"}}


def test_lazy_imports_helpers_and_subprocess_commands_are_followed(tmp_path):
    tree = _package(tmp_path, {
        "reappreg/commands/x.py": """
            import typer
            app = typer.Typer()

            def _helper():
                from reappreg.lazy import thing  # lazy, in a helper the command calls
                return thing

            @app.command("go")
            def go():
                from reappreg import lib
                _helper()

            @app.command()
            def other_cmd():
                from reappreg.unrelated import nothing

            @app.command("launch")
            def launch():
                import subprocess
                subprocess.run(["python", "-m", "reappreg", "x", "worker"])

            @app.command("worker")
            def worker():
                from reappreg.pkg.deep import work
        """,
        "reappreg/lib.py": "def f():\n    from .sub.mod import g  # relative, inside a function\n",
        "reappreg/sub/__init__.py": "",
        "reappreg/sub/mod.py": "",
        "reappreg/lazy.py": "",
        "reappreg/unrelated.py": "",
        "reappreg/pkg/__init__.py": "",
        "reappreg/pkg/deep.py": "",
    })
    go = _names(command_closure(tree, "x", "go"))
    assert go == {"reappreg.commands.x", "reappreg.lib", "reappreg.lazy", "reappreg.sub", "reappreg.sub.mod"}
    assert "reappreg.unrelated" in command_closure(tree, "x", "other-cmd")
    launch = _names(command_closure(tree, "x", "launch"))
    assert {"reappreg.pkg", "reappreg.pkg.deep"} <= launch


def test_dynamic_imports_cover_the_package_or_fail(tmp_path):
    tree = _package(tmp_path, {
        "reappreg/commands/top.py": "def top():\n    from reappreg.plugins import load\n",
        "reappreg/plugins/__init__.py": "import importlib\n\ndef load(n):\n    return importlib.import_module(f'{__name__}.{n}')\n",
        "reappreg/plugins/a.py": "",
        "reappreg/plugins/b.py": "from reappreg.helper import x\n",
        "reappreg/helper.py": "",
    })
    closure = command_closure(tree, "top", None)
    assert {"reappreg.plugins.a", "reappreg.plugins.b", "reappreg.helper"} <= closure
    (tmp_path / "src/reappreg/plugins/__init__.py").write_text("import importlib\nname = 'x'\nimportlib.import_module(name)\n")
    with pytest.raises(InputError, match=r"plugins/__init__.py: line 3: dynamic import the deps generator cannot resolve"):
        command_closure(tree, "top", None)


_LAZY_CLI = ("import importlib\nSUBCOMMANDS = ('a', 'b')\nCOMMANDS = []\n\n"
             "def load(name):\n    return importlib.import_module(f'reappreg.commands.{name}')\n")
_COMMANDS_A_B = {
    "reappreg/commands/a.py": "import typer\napp = typer.Typer()\n\n@app.command('run')\ndef run():\n    pass\n",
    "reappreg/commands/b.py": "from reappreg import shared\n\ndef cmd():\n    from reappreg import only_b\n",
    "reappreg/shared.py": "",
    "reappreg/only_b.py": "",
}


def test_a_lazily_registered_concern_is_the_only_commands_module_in_the_closure(tmp_path):
    tree = _package(tmp_path, {"reappreg/cli.py": _LAZY_CLI, **_COMMANDS_A_B})
    closure = command_closure(tree, "a", "run")
    assert "reappreg.commands.a" in closure
    assert not {"reappreg.commands.b", "reappreg.shared", "reappreg.only_b"} & closure


def test_a_commands_module_the_cli_imports_by_name_runs_its_top_level_for_every_stage(tmp_path):
    eager = _LAZY_CLI + "from reappreg.commands import b\n"
    tree = _package(tmp_path, {"reappreg/cli.py": eager, **_COMMANDS_A_B})
    closure = command_closure(tree, "a", "run")
    assert {"reappreg.commands.b", "reappreg.shared"} <= closure and "reappreg.only_b" not in closure


def test_a_concern_the_cli_does_not_list_is_no_command(tmp_path):
    tree = _package(tmp_path, {"reappreg/cli.py": _LAZY_CLI.replace("('a', 'b')", "('b',)"), **_COMMANDS_A_B})
    with pytest.raises(InputError, match="`reappreg a run`: no such command"):
        command_closure(tree, "a", "run")


def test_the_real_stages_depend_only_on_their_own_concern(expected):
    """The guard stage runs no reward-model training code and no other concern's commands;
    rm_train runs no policy, judge or registry code."""
    guard = expand(expected["guard"], REPO)
    assert "src/reappreg/commands/guard.py" in guard
    assert not {f for f in guard if f.startswith("src/reappreg/commands/") and f.endswith(".py")} - {
        "src/reappreg/commands/guard.py", "src/reappreg/commands/__init__.py"}
    assert not {"src/reappreg/rm/ensemble.py", "src/reappreg/rm/member.py", "src/reappreg/rm/objectives/bt.py"} & guard
    rm_train = expand(expected["rm_train"], REPO)
    assert {"src/reappreg/rm/member.py", "src/reappreg/rm/objectives/bt.py"} <= rm_train
    assert not {f for f in rm_train if f.startswith(("src/reappreg/judge/", "src/reappreg/registry/",
                                                      "src/reappreg/policy/train"))}


def test_a_lazy_package_export_reaches_only_the_module_that_defines_it(tmp_path):
    """A package whose ``__init__`` resolves names lazily (a literal ``_LAZY`` table and a
    module-level ``__getattr__``): ``from pkg import name`` reaches the module of that name,
    importing another submodule of it reaches neither, ``import pkg`` reaches every one."""
    lazy_init = """
        import importlib
        _LAZY = {"heavy_thing": "heavy", "light_thing": "light"}

        def __getattr__(name):
            return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    """
    tree = _package(tmp_path, {
        "reappreg/commands/top.py": "def top():\n    from reappreg.pkg.reader import read\n",
        "reappreg/commands/x.py": ("import typer\napp = typer.Typer()\n\n@app.command('uses')\ndef uses():\n"
                                   "    from reappreg.pkg import light_thing\n\n@app.command('all')\ndef every():\n"
                                   "    import reappreg.pkg\n"),
        "reappreg/pkg/__init__.py": lazy_init,
        "reappreg/pkg/reader.py": "",
        "reappreg/pkg/light.py": "",
        "reappreg/pkg/heavy.py": "from reappreg.deep import x\n",
        "reappreg/deep.py": "",
    })
    assert _names(command_closure(tree, "top", None)) == {"reappreg.commands.top", "reappreg.pkg", "reappreg.pkg.reader"}
    assert _names(command_closure(tree, "x", "uses")) == {"reappreg.commands.x", "reappreg.pkg", "reappreg.pkg.light"}
    assert {"reappreg.pkg.light", "reappreg.pkg.heavy", "reappreg.deep"} <= command_closure(tree, "x", "all")
    (tmp_path / "src/reappreg/pkg/__init__.py").write_text(textwrap.dedent(lazy_init).replace('"heavy"', '"absent"'))
    with pytest.raises(InputError, match="_LAZY names modules that do not exist"):
        command_closure(tree, "x", "uses")


# The stages that train on guarded text: they read the certificate (``guard.certified``), never
# run a detector, and must not re-run when a detector changes and the guarded texts do not.
TRAINING_STAGES = ("rm_train", "rm_baseline", "rm_ensemble", "policy_train")
DETECTOR_MODULE = "src/reappreg/guard/ngram.py"


def test_a_detector_module_is_a_code_dep_of_the_guard_stage_and_not_of_rm_or_grpo(expected):
    """The training stages import the certificate reader only (``reappreg.guard.certified``,
    through the guard package's lazy ``__init__``): every detector module, the scan and the
    normalisation are code deps of the guard stage and of what scans text with the detectors
    (the leak scan, the report's self-check, the reference and OOD checks), never of them."""
    from reappreg.guard.registry import REGISTERED

    closures = {stage: expand(deps, REPO) for stage, deps in expected.items()}
    detector_modules = {f"src/reappreg/guard/{type(d).__module__.rsplit('.', 1)[-1]}.py" for d in REGISTERED}
    detector_modules |= {f"src/reappreg/guard/{m}.py" for m in ("detect", "normalise", "decode", "registry", "index")}
    for stage in TRAINING_STAGES:
        guard_files = {f for f in closures[stage] if f.startswith("src/reappreg/guard/")}
        assert guard_files == {"src/reappreg/guard/__init__.py", "src/reappreg/guard/certified.py"}, stage
    for module in sorted(detector_modules):
        reached = {stage for stage, files in closures.items() if module in files}
        assert "guard" in reached and not reached & set(TRAINING_STAGES), (module, sorted(reached))
    assert {"guard", "leakscan", "report"} <= {s for s, files in closures.items() if DETECTOR_MODULE in files}


# ----------------------------------------------------------------------------- end to end with DVC


def _dvc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    dvc = Path(sys.executable).with_name("dvc")
    return subprocess.run([str(dvc), *args], cwd=cwd, capture_output=True, text=True, check=True)


@pytest.mark.slow
def test_touching_a_module_makes_dvc_status_list_exactly_its_stages(tmp_path):
    """A copy with every stage's listed code deps (cmd `true`), locked by `dvc repro`: touching
    a module must make `dvc status` list exactly the stages whose import closure holds it."""
    repo = tmp_path / "copy"
    shutil.copytree(REPO / "src" / "reappreg", repo / "src" / "reappreg", ignore=shutil.ignore_patterns("__pycache__"))
    listed = listed_code_deps(REPO)
    stages = {stage: {"cmd": "true", "deps": deps} for stage, deps in listed.items()}
    (repo / "dvc.yaml").write_text(json.dumps({"stages": stages}, indent=1))  # JSON is YAML
    _dvc("init", "--no-scm", "-q", cwd=repo)
    _dvc("repro", "-q", cwd=repo)
    assert json.loads(_dvc("status", "--json", cwd=repo).stdout or "{}") == {}
    closures = {stage: expand(deps, REPO) for stage, deps in listed.items()}
    every = sorted(set().union(*closures.values()))
    # one module of each distinct stage set, plus the ones the old hand-written deps missed
    probes: dict[frozenset, str] = {}
    for module in every:
        probes.setdefault(frozenset(s for s, c in closures.items() if module in c), module)
    picked = set(probes.values()) | {m for m in ("src/reappreg/data/canonical.py", "src/reappreg/eval/generate.py",
                                                 "src/reappreg/rm/ensemble.py", DETECTOR_MODULE) if m in every}
    assert read_yaml(repo / "dvc.yaml")["stages"].keys() == listed.keys()
    from dvc.repo import Repo

    for module in sorted(picked):
        path = repo / module
        original = path.read_bytes()
        path.write_bytes(original + b"\n# touched\n")
        try:
            # DVC's own API, in this process (what `dvc status --json` prints): one process per
            # probe would be most of this test's time.
            with Repo(str(repo)) as dvc_repo:
                changed = {key.rsplit(":", 1)[-1] for key in dvc_repo.status()}  # "<dvc.yaml path>:<stage>" off-cwd
        finally:
            path.write_bytes(original)
        expected = {s for s, c in closures.items() if module in c}
        assert changed == expected, (module, sorted(changed ^ expected))
        if module == DETECTOR_MODULE:
            # a detector changed: the guard stage re-runs, no RM seed and no GRPO run does
            assert "guard" in changed and not changed & set(TRAINING_STAGES), sorted(changed)


# --------------------------------------------------------------------------- data deps: what a command reads


def _named(entries) -> list[str]:
    return [next(iter(e)) if isinstance(e, dict) else str(e) for e in entries or []]


def _command_paths(cmd: str) -> list[str]:
    """Every path option of a stage's command as it runs: the ones its ``cmd`` passes and the
    defaults it does not (a default is read as surely as a passed path), repo-relative."""
    from reappreg.cli import command_tree
    from stage_commands import cmd_argv

    argv = cmd_argv(cmd)
    command, i = command_tree(), 0
    while i < len(argv) and argv[i] in getattr(command, "commands", {}):
        command, i = command.commands[argv[i]], i + 1
    ctx = command.make_context(argv[i - 1] if i else "reappreg", list(argv[i:]), resilient_parsing=True)
    out = []
    for value in ctx.params.values():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, Path) and str(v) not in ("", "-", "."):
                out.append(v.as_posix())
    return out


def test_every_path_a_stage_command_is_given_is_a_dep_or_an_out():
    """A file a command reads must be a dependency (or something it writes, an out): else `dvc repro`
    does not rerun the stage when it changes and nothing orders the stage after its writer. Paths
    that do not exist in the repository (interpolated ones, outputs of stages not yet run) are
    checked only when the stage's ``deps``/``outs`` would have to name them."""
    stages = read_yaml(REPO / "dvc.yaml")["stages"]
    missing = {}
    for name, spec in stages.items():
        cmd = spec["cmd"] if isinstance(spec["cmd"], str) else " ".join(spec["cmd"])
        declared = set(_named(spec.get("deps"))) | set(_named(spec.get("outs"))) | set(_named(spec.get("metrics"))) \
            | set(_named(spec.get("plots")))
        if spec.get("params") is not None:
            declared.add("params.yaml")
        for path in _command_paths(cmd):
            # dvc.lock is DVC's own record (written by dvc repro): no stage can declare it. work/ is each
            # stage's scratch and this clone's keys and locks (gitignored; present only after a local run).
            if "${" in path or path == "dvc.lock" or path.startswith("work/") or not (REPO / path).exists():
                continue
            covered = any(path == d or path.startswith(d.rstrip("/") + "/") or d.startswith(path.rstrip("/") + "/")
                          for d in declared)
            if not covered:
                missing.setdefault(name, []).append(path)
    assert not missing, f"stage command paths that dvc.yaml does not declare (add them to deps or outs): {missing}"


def test_every_tracked_pipeline_output_is_written_by_a_stage():
    """A file committed under an output folder (metrics/, plots/, reports/) that no stage of dvc.yaml,
    as DVC expands it with params.yaml, writes any more is a leftover of an older pipeline: `register`
    refuses it as written beside the pipeline, so a fresh clone's `dvc repro` would stop there."""
    from dvc.repo import Repo

    with Repo(str(REPO)) as repo:
        outs = {Path(str(o.fs_path)).resolve().relative_to(REPO).as_posix() for stage in repo.index.stages
                for o in stage.outs}
    tracked = subprocess.run(["git", "ls-files", "metrics", "plots", "reports"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    stale = [t for t in tracked if not t.endswith(".gitignore")
             and not any(t == o or t.startswith(o.rstrip("/") + "/") for o in outs)]
    assert not stale, f"tracked outputs no stage of dvc.yaml writes (git rm them): {stale}"
