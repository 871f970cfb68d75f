"""The one entry point: usage errors, exit codes, --version and help, on every registered command.

The command tree is walked, so a command added later is covered without editing this file.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from reappreg import __version__, cli


def _walk(command, path):
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _walk(sub, [*path, name])


TREE = list(_walk(cli.command_tree(), []))
GROUPS = [path for path, command in TREE if hasattr(command, "commands")]
LEAVES = [(path, command) for path, command in TREE if not hasattr(command, "commands")]
LEAF_IDS = [" ".join(path) for path, _ in LEAVES]


def _value_options(command):
    return [p for p in command.params if p.param_type_name == "option" and not p.is_flag and p.opts]


def _numeric_options(command):
    return [p for p in _value_options(command) if p.type_descriptor.annotation in (int, float)]


def _required(command):
    return [p for p in command.params if p.required]


def run(argv, capsys):
    """(exit code, stdout, stderr) of ``reappreg ARGV`` run in this process."""
    with pytest.raises(SystemExit) as info:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def assert_usage_error(code, out, err, path, problem):
    """Exit 2; on stderr exactly the usage of the command, one ``error:`` line naming the problem, a hint."""
    assert code == 2, (path, code, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert "Traceback" not in err and "╭" not in err, err
    assert len(lines) == 3, err
    assert lines[0].startswith(f"Usage: {' '.join(['reappreg', *path])} "), err
    assert lines[1].startswith("error: ") and problem in lines[1], err
    assert lines[2] == f"Try '{' '.join(['reappreg', *path])} --help' for help.", err


def test_the_tree_has_every_concern_and_the_report():
    names = {path[0] for path, _ in TREE if path}
    assert set(cli.SUBCOMMANDS) | {"report"} <= names
    assert len(LEAVES) > len(GROUPS)  # groups have commands under them


def _commands_modules_after(argv):
    """The reappreg.commands modules a fresh interpreter has imported after ``reappreg ARGV``."""
    code = ("import sys\nfrom reappreg import cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('loaded:', *sorted(m for m in sys.modules if m.startswith('reappreg.commands.')), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    last = proc.stderr.strip().splitlines()[-1].split()
    assert last[0] == "loaded:", proc.stderr
    return set(last[1:])


@pytest.mark.parametrize("argv,loaded", [
    (["rm", "train", "--help"], {"reappreg.commands.rm"}),
    (["judge", "audti"], {"reappreg.commands.judge"}),
    (["report", "--help"], {"reappreg.commands.report"}),
    (["--version"], set()),
    (["nosuchconcern"], set()),
])
def test_a_command_imports_only_its_own_concern(argv, loaded):
    """The DVC stage of a command depends only on its concern's code (reappreg.dvcdeps relies on it)."""
    assert _commands_modules_after(argv) == loaded


def test_root_help_lists_every_concern_with_its_own_one_line_help(capsys):
    code, out, err = run(["--help"], capsys)
    assert code == 0
    lines = {line.split()[0]: " ".join(line.split()[1:]) for line in out.split("Commands:")[1].strip().splitlines()}
    assert list(lines) == [*cli.SUBCOMMANDS, *[name for _, _, name in cli.COMMANDS]]
    for name, summary in lines.items():
        command = dict((tuple(p), c) for p, c in TREE)[(name,)]
        assert summary == " ".join(command.help.split("\n\n")[0].split()), name


@pytest.mark.parametrize("path", GROUPS, ids=[" ".join(p) or "reappreg" for p in GROUPS])
def test_a_typo_in_a_subcommand_is_one_error_line(path, capsys):
    code, out, err = run([*path, "audti"], capsys)
    assert_usage_error(code, out, err, path, "No such command 'audti'")


@pytest.mark.parametrize("path", GROUPS, ids=[" ".join(p) or "reappreg" for p in GROUPS])
def test_a_bare_group_names_the_missing_command_and_lists_the_commands(path, capsys):
    code, out, err = run(path, capsys)
    assert code == 2
    assert err.startswith("error: missing command\n") and "Traceback" not in err
    command = dict((tuple(p), c) for p, c in TREE)[tuple(path)]
    for name in [n for n, c in command.commands.items() if not c.hidden]:
        assert f"\n  {name} " in err, (name, err)


@pytest.mark.parametrize("path", [[], *[p for p, _ in LEAVES]], ids=["reappreg", *LEAF_IDS])
def test_an_unknown_option_is_one_error_line(path, capsys):
    code, out, err = run([*path, "--bogus"], capsys)
    assert_usage_error(code, out, err, path, "No such option: --bogus")


@pytest.mark.parametrize("path,command", LEAVES, ids=LEAF_IDS)
def test_a_missing_required_value_is_one_error_line(path, command, capsys):
    required = _required(command)
    if not required:
        pytest.skip("every parameter has a default")
    code, out, err = run(path, capsys)
    first = required[0]
    what = f"Missing {'argument' if first.param_type_name == 'argument' else 'option'}"
    assert_usage_error(code, out, err, path, what)


@pytest.mark.parametrize("path,command", LEAVES, ids=LEAF_IDS)
def test_an_option_without_its_value_is_one_error_line(path, command, capsys):
    for option in _value_options(command):
        code, out, err = run([*path, option.opts[0]], capsys)
        assert_usage_error(code, out, err, path, f"Option '{option.opts[0]}' requires an argument")


NUMERIC = [(p, c) for p, c in LEAVES if _numeric_options(c)]


@pytest.mark.parametrize("path,command", NUMERIC, ids=[" ".join(p) for p, _ in NUMERIC])
def test_a_malformed_number_is_one_error_line(path, command, capsys):
    for option in _numeric_options(command):
        code, out, err = run([*path, option.opts[0], "twelve"], capsys)
        assert_usage_error(code, out, err, path, f"Invalid value for '{option.opts[0]}'")


def test_numeric_options_exist_so_the_malformed_number_test_runs():
    assert len(NUMERIC) >= 3


@pytest.mark.parametrize("path,command", TREE, ids=[" ".join(p) or "reappreg" for p, _ in TREE])
def test_help_is_plain_and_consistent(path, command, capsys):
    code, out, err = run([*path, "--help"], capsys)
    assert code == 0 and err == ""
    assert out.startswith(f"Usage: {' '.join(['reappreg', *path])}")
    for markup in ("``", "╭", "[bold", ":func:", ":class:", "::\n"):
        assert markup not in out, (markup, out)
    summary = " ".join((command.help or "").strip().split("\n\n")[0].split())  # the first paragraph
    assert summary[:1].isupper() and summary.endswith("."), f"help summary of {' '.join(path)!r}: {summary!r}"


# Concerns whose option help follows the house style: every concern and the report.
STYLED = {"card", "data", "generate", "guard", "judge", "leakscan", "policy", "registry", "report", "rm", "stats",
          "validate"}
STYLED_PARAMS = [(path, p) for path, c in TREE if not path or path[0] in STYLED
                 for p in getattr(c, "params", []) if getattr(p, "help", None)]


@pytest.mark.parametrize("path,param", STYLED_PARAMS,
                         ids=[f"{' '.join(p) or 'reappreg'} {q.opts[0] if q.opts else q.name}" for p, q in STYLED_PARAMS])
def test_option_help_is_sentence_case_without_a_trailing_period(path, param):
    text = param.help
    assert text == text.strip() and not text.endswith("."), text
    assert not text[0].islower(), text  # sentence case (a leading file name or `command` is fine)
    if param.opts and param.opts[0] == "--params":
        assert text == "Params file"  # one wording for one thing


def test_every_styled_concern_has_option_help_checked():
    assert {path[0] for path, _ in STYLED_PARAMS if path} == STYLED
    assert set(cli.SUBCOMMANDS) <= STYLED  # a new concern's help is checked too
    assert len(STYLED_PARAMS) > 40


def test_registry_help_lists_every_registry_command():
    registry = dict((tuple(p), c) for p, c in TREE)[("registry",)]
    summary = registry.help.split("\n\n")[0]
    listed = {name.strip(" .") for name in summary.split(":", 1)[1].split(",")}
    assert listed == {name for name, c in registry.commands.items() if not c.hidden}


def test_version(capsys):
    code, out, err = run(["--version"], capsys)
    assert code == 0 and out.strip() == f"reappreg {__version__}"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "reappreg", *args], capture_output=True, text=True)


@pytest.mark.parametrize("argv", [["guard", "audti"], ["--bogus"], ["registry", "promote"]])
def test_the_installed_entry_point_gives_one_error_line_and_exit_2(argv):
    proc = _cli(*argv)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "╭" not in proc.stderr
    assert sum(line.startswith("error: ") for line in proc.stderr.splitlines()) == 1
    assert len(proc.stderr.strip().splitlines()) == 3


def test_reappreg_error_exits_2_with_one_message(tmp_path, capsys):
    code, out, err = run(["data", "ingest", "--out", str(tmp_path / "x"), "--params", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2
    assert err == f"error: {tmp_path / 'missing.yaml'}: params file not found\n"


def test_typer_exit_code_is_propagated(monkeypatch):
    import typer

    probe = typer.Typer()

    @probe.command()
    def fail() -> None:
        raise typer.Exit(3)

    monkeypatch.setattr(cli, "app", probe)
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert info.value.code == 3


def _options(path):
    command = dict((tuple(p), c) for p, c in TREE)[tuple(path)]
    return [(p.name, tuple(p.opts), p.default, p.help) for p in command.params if p.param_type_name == "option"]


@pytest.mark.parametrize("group,commands", [
    (("certificate", "eval_metrics", "judge_calibration", "claims", "rm_metrics", "policy_metrics", "prompt", "results"),
     [["card", "build"], ["registry", "register"]]),
    (("params", "models", "keys", "local_keys"),
     [["registry", "promote"], ["registry", "verify"], ["registry", "watch"], ["registry", "pull"]]),
])
def test_an_option_group_reads_the_same_in_every_command_that_takes_it(group, commands):
    """Option groups declared once (reappreg.commands.options): same names, defaults and help, in order."""
    seen = []
    for path in commands:
        options = [o for o in _options(path) if o[0] in group]
        assert [o[0] for o in options] == list(group), path
        seen.append(options)
    assert all(s == seen[0] for s in seen)
