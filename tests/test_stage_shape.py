"""Every DVC stage has one shape: a thin command over one stage function (README "Pipeline").

* Its command line fits its command: every option dvc.yaml's ``cmd:`` gives exists, every
  required option is given, and a path the ``cmd:`` passes has no default of its own (one place
  states the pipeline's paths: dvc.yaml; only ``--params`` and optional inputs keep theirs).
* Its command function lives in ``reappreg/commands/``, starts no MLflow run and logs nothing
  (no ``stage_run``, no ``mlflow.``, in it or the module helpers it uses), and calls exactly one
  function imported from a ``reappreg.<package>.stage`` module: the stage function, which owns
  the run, the checks and the logging.
* The stage modules used are the ones the README names, and each commands module calls into
  one package.

The source is read with ``ast``; the checker is tested on planted bad commands below.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from reappreg import cli
from stage_commands import REPO, cmd_argv, stage_cmds

STAGE_MODULE = re.compile(r"^reappreg\.(\w+)\.stage(\.\w+)?$")
STAGES = stage_cmds()


def _resolve(argv: list[str]):
    """(command path, click command, its arguments) that ``reappreg ARGV`` runs."""
    command, path, rest = cli.command_tree(), [], list(argv)
    while rest and hasattr(command, "commands") and rest[0] in command.commands:
        command = command.commands[rest[0]]
        path.append(rest.pop(0))
    return path, command, rest


def _given_options(command, rest: list[str]):
    """The options the arguments give, in order (``--name value`` and ``--name=value``)."""
    by_flag = {opt: p for p in command.params for opt in p.opts if opt.startswith("--")}
    given, i = [], 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("--"):
            flag, has_value, _ = word.partition("=")
            param = by_flag.get(flag)
            given.append((flag, param))
            i += 1 if (has_value or param is None or param.is_flag) else 2
        else:
            i += 1
    return given


def cmd_problems(cmd: str) -> list[str]:
    """Why a stage's ``cmd`` does not fit its command: an option the command lacks, a required
    one it does not pass, a passed path the command also defaults, or what click refuses."""
    path, command, rest = _resolve(cmd_argv(cmd))
    if hasattr(command, "commands"):
        return [f"`reappreg {' '.join(path)}` is a group, not a command"]
    given = _given_options(command, rest)
    problems = [f"no option {flag}" for flag, param in given if param is None]
    names = {param.name for _, param in given if param is not None}
    problems += [f"does not pass the required {p.opts[0]}" for p in command.params
                 if p.required and p.param_type_name == "option" and p.name not in names]
    # dvc.yaml states the pipeline's paths; a default beside it could only drift from it.
    problems += [f"{flag} has a default ({param.default}) the cmd passes anyway" for flag, param in given
                 if param is not None and "--params" not in param.opts and not param.multiple and not param.is_flag
                 and param.default not in (None, ())]
    if not problems:
        try:
            command.make_context(" ".join(["reappreg", *path]), list(rest))  # click's own parse: types, arguments
        except Exception as exc:  # a click usage error, whatever its class
            problems.append(f"click refuses it: {exc}")
    return problems


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_the_stage_command_line_fits_its_command(stage):
    assert cmd_problems(STAGES[stage]) == [], STAGES[stage]


def test_the_command_line_check_names_each_kind_of_misfit():
    rm_train = STAGES["rm_train"]
    assert cmd_problems(rm_train.replace("--vignettes data/guarded/vignettes.jsonl", "")) == [
        "does not pass the required --vignettes"]
    assert cmd_problems(rm_train + " --bogus 1") == ["no option --bogus"]
    assert cmd_problems(STAGES["results"] + " --ood-dir data/eval/ood") == [
        "--ood-dir has a default (data/eval/ood) the cmd passes anyway"]
    assert cmd_problems(rm_train.replace("--seed ${item.seed}", "--seed twelve"))[0].startswith("click refuses it")


# ----------------------------------------------------------------------------- the command's body


def _imports(nodes) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(local name -> (module, attribute)) of ``from M import A [as B]``, (local name -> module)
    of ``import M [as B]``, among ``nodes``."""
    names, modules = {}, {}
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.update({a.asname or a.name: (node.module, a.name) for a in node.names})
        elif isinstance(node, ast.Import):
            modules.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                            for a in node.names})
    return names, modules


def _reached(function: ast.FunctionDef, helpers: dict[str, ast.AST]) -> list[ast.AST]:
    """The function and every module-level helper it names, transitively."""
    seen, todo, out = set(), [function], []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        todo += [helpers[n.id] for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in helpers]
    return out


def _is_function(module: str, name: str) -> bool:
    return inspect.isfunction(getattr(importlib.import_module(module), name, None))


def shape_problems(source: str, function: str, is_function: Callable[[str, str], bool] = _is_function) -> list[str]:
    """Why the command ``function`` of the commands module ``source`` is not a thin command."""
    tree = ast.parse(source)
    helpers = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    command = helpers[function]
    problems = []
    for part in _reached(command, helpers):
        for node in ast.walk(part):
            if (isinstance(node, ast.Name) and node.id == "stage_run") or (
                    isinstance(node, ast.Attribute) and node.attr == "stage_run"):
                problems.append(f"line {node.lineno}: stage_run in the command (the stage function owns the run)")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "mlflow":
                problems.append(f"line {node.lineno}: mlflow.{node.attr} in the command (the stage function logs)")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(m == "mlflow" or m.startswith("mlflow.") for m in modules):
                    problems.append(f"line {node.lineno}: imports mlflow (the stage function logs)")
    names, modules = _imports([*tree.body, *ast.walk(command)])
    stage_calls = []
    for node in ast.walk(command):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in names:
            module, name = names[func.id]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in modules:
            module, name = modules[func.value.id], func.attr
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in names:
            module, name = ".".join(names[func.value.id]), func.attr  # from reappreg.x import stage; stage.f()
        else:
            continue
        if STAGE_MODULE.match(module) and is_function(module, name):
            stage_calls.append(f"{module}.{name}")
    if len(stage_calls) != 1:
        problems.append(f"calls {len(stage_calls)} stage functions {stage_calls}, not exactly one")
    return problems


def _stage_commands() -> dict[tuple[str, ...], Callable]:
    """Command path -> the Python function, for every command a DVC stage runs."""
    out = {}
    for cmd in STAGES.values():
        path, command, _ = _resolve(cmd_argv(cmd))
        out[tuple(path)] = inspect.unwrap(command.callback)
    return out


COMMANDS = _stage_commands()


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=[" ".join(p) for p in sorted(COMMANDS)])
def test_a_stage_command_is_thin_over_one_stage_function(path):
    function = COMMANDS[path]
    assert function.__module__.startswith("reappreg.commands."), function.__module__
    source = Path(inspect.getsourcefile(function)).read_text(encoding="utf-8")
    assert shape_problems(source, function.__name__) == []


def _stage_modules(function) -> set[str]:
    source = Path(inspect.getsourcefile(function)).read_text(encoding="utf-8")
    command = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == function.__name__)
    names, _ = _imports(ast.walk(command))
    return {module for module, _ in names.values() if STAGE_MODULE.match(module)}


def test_each_commands_module_calls_into_one_package_and_the_readme_names_it():
    packages: dict[str, set[str]] = {}
    used = set()
    for function in COMMANDS.values():
        modules = _stage_modules(function)
        used |= modules
        packages.setdefault(function.__module__, set()).update(STAGE_MODULE.match(m).group(1) for m in modules)
    assert {m: p for m, p in packages.items() if len(p) != 1} == {}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sentence = readme[readme.index("Every stage is a thin"):]
    sentence = sentence[:re.search(r"\.\s", sentence).start()]
    named = set(re.findall(r"`(reappreg\.\w+\.stage)(?:\.\*)?`", sentence))
    assert named == {m.rsplit(".", 1)[0] if m.count(".") == 3 else m for m in used}, sentence


# ----------------------------------------------------------------------------- the checker itself


PLANTED = textwrap.dedent('''
    import mlflow
    import typer

    from reappreg.rm.stage import EnsembleFiles, ensemble
    from reappreg.tracking import stage_run

    app = typer.Typer()


    def _log(result):
        mlflow.log_metrics(result)


    @app.command()
    def thin(params):
        from reappreg.settings import load_params

        typer.echo(ensemble(load_params(params), EnsembleFiles(members=1, out=2, metrics=3, plots=4, model_info=5)))


    @app.command()
    def runs_its_stage(params):
        with stage_run("rm_ensemble", tracking=None):
            ensemble(params, None)


    @app.command()
    def logs_in_a_helper(params):
        _log(ensemble(params, None))


    @app.command()
    def calls_two(params):
        from reappreg.data import stage as data_stage
        from reappreg.judge.stage import judge

        judge(params, None)
        data_stage.ingest(params, out=None)


    @app.command()
    def calls_none(params):
        from reappreg.rm.ensemble import build_ensemble

        build_ensemble([], None)
''')


def _planted_is_function(module: str, name: str) -> bool:
    return name[:1].islower()


def test_the_checker_passes_a_thin_command_and_names_what_is_wrong_with_the_others():
    def problems(function):
        return shape_problems(PLANTED, function, _planted_is_function)

    assert problems("thin") == []
    assert any("stage_run in the command" in p for p in problems("runs_its_stage"))
    assert any("mlflow.log_metrics" in p for p in problems("logs_in_a_helper"))
    assert problems("calls_two") == ["calls 2 stage functions ['reappreg.judge.stage.judge', "
                                     "'reappreg.data.stage.ingest'], not exactly one"]
    assert problems("calls_none") == ["calls 0 stage functions [], not exactly one"]
