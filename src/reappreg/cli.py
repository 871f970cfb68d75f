"""The one command line entry point: reappreg CONCERN COMMAND.

Each concern's commands live in ``reappreg.commands.<concern>`` as a typer sub-app, and
that module is imported only when its concern is named (``reappreg rm train`` imports
``reappreg.commands.rm`` and nothing of the other concerns); ``reappreg --help`` imports
them all to list their one-line help. So a stage runs, and its DVC code deps list
(``reappreg.dvcdeps``), only the code of its own concern. A command parses its options
and calls one stage function (``reappreg.<package>.stage``), imported inside the command
with the heavy libraries behind it (torch, mlflow, GX), so help stays fast.

Errors are handled here, once, for every command: a usage error (unknown command or
option, missing or malformed value) prints its usage, one ``error:`` line and a hint,
and exits 2; a ``ReappregError`` (bad input file, failed check) prints one ``error:``
line and exits 2. Neither prints a traceback.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

# Air-gapped by design: models load from local folders and installed packages only, and no
# library may phone home (Hugging Face hub, great-expectations usage statistics).
for _name, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GX_ANALYTICS_ENABLED": "False"}.items():
    os.environ.setdefault(_name, _value)

import typer
from typer._click import exceptions as click_exceptions
from typer._click.core import Command, Context
from typer.core import TyperGroup

from reappreg import __version__
from reappreg.errors import ReappregError

USAGE_EXIT = 2

HELP = "Data-and-model registry for RLHF research on cognitive reappraisal."

# The concerns: ``reappreg <name> ...`` runs the typer app ``app`` of ``reappreg.commands.<name>``.
# A listed concern whose module does not exist is an error when it is named.
SUBCOMMANDS = ("data", "validate", "guard", "rm", "policy", "stats", "generate", "judge", "card", "registry",
               "leakscan")
# (module under reappreg.commands, function, command name): commands directly under the root.
# reappreg.dvcdeps reads both literals to find the code a DVC stage's command runs.
COMMANDS = [("report", "report", "report"), ("samples", "samples", "samples")]


def _plain(command: Command) -> Command:
    """Plain help (no rich markup) on ``command`` and everything under it."""
    stack = [command]
    while stack:
        current = stack.pop()
        current.rich_markup_mode = None
        stack.extend(getattr(current, "commands", {}).values())
    return command


def _load_concern(name: str) -> Command:
    module = importlib.import_module(f"reappreg.commands.{name}")
    group = typer.main.get_group(module.app)  # a group even when the concern has one command
    group.name = name
    return _plain(group)


def _load_root_command(module_name: str, function: str, name: str) -> Command:
    module = importlib.import_module(f"reappreg.commands.{module_name}")
    holder = typer.Typer(add_completion=False)
    holder.command(name)(getattr(module, function))
    return _plain(typer.main.get_command(holder))


class LazyCommands(MutableMapping):
    """A group's ``name -> command`` mapping whose commands are built when first looked up.

    Iterating yields the names without importing anything (typer's "did you mean"
    suggestions use them); looking a name up imports its commands module.
    """

    def __init__(self, loaders: dict[str, Callable[[], Command]]) -> None:
        self._loaders = dict(loaders)
        self._loaded: dict[str, Command] = {}
        self._order = list(loaders)

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            if name not in self._loaders:
                raise KeyError(name)
            self._loaded[name] = self._loaders[name]()
        return self._loaded[name]

    def __setitem__(self, name: str, command: Command) -> None:
        if name not in self._order:
            self._order.append(name)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._order:
            raise KeyError(name)
        self._order.remove(name)
        self._loaded.pop(name, None)
        self._loaders.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)


class LazyGroup(TyperGroup):
    """The root group: its concerns and root commands are imported when they are named."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        loaders: dict[str, Callable[[], Command]] = {name: functools.partial(_load_concern, name) for name in SUBCOMMANDS}
        for module_name, function, name in COMMANDS:
            loaders[name] = functools.partial(_load_root_command, module_name, function, name)
        eager = dict(self.commands)  # none today; kept if a command is ever added to ``app`` itself
        self.commands = LazyCommands(loaders)
        for name, command in eager.items():
            self.commands[name] = command

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)  # the names only: nothing is imported to list them


# Plain help everywhere (no rich panels, no markup): it reads the same in a terminal, a log
# file and a pipe, and help strings show exactly as written.
# Help is at least WIDTH columns wide, so one-line command summaries are not cut short.
WIDTH = 100
app = typer.Typer(cls=LazyGroup, no_args_is_help=True, add_completion=False, help=HELP, rich_markup_mode=None,
                  pretty_exceptions_enable=False,
                  context_settings={"max_content_width": WIDTH,
                                    "terminal_width": max(WIDTH, shutil.get_terminal_size().columns)})


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"reappreg {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit", is_eager=True,
                                 callback=_show_version),
) -> None:
    """Data-and-model registry for RLHF research on cognitive reappraisal."""


def command_tree():
    """The click command behind ``app``, with plain help. A concern is imported (and made
    plain) when it is looked up, so building the tree imports no commands module."""
    root = typer.main.get_command(app)
    root.rich_markup_mode = None
    return root


def _context_for(root, argv: list[str]):
    """The context of the deepest command ``argv`` names (for errors raised without one)."""
    ctx = Context(root, info_name="reappreg")
    command = root
    for token in argv:
        sub = getattr(command, "commands", {}).get(token)
        if sub is None:
            break
        command = sub
        ctx = Context(command, info_name=token, parent=ctx)
    return ctx


def _usage_error(exc: click_exceptions.UsageError, root, argv: list[str]) -> int:
    """Usage, one ``error:`` line and a hint on stderr; returns the exit code (2)."""
    ctx = exc.ctx if exc.ctx is not None else _context_for(root, argv)
    if isinstance(exc, click_exceptions.NoArgsIsHelpError):
        # A bare group: the missing part is the command, and the help lists them.
        message, body = "missing command", exc.format_message().rstrip()
        typer.echo(f"error: {message}\n\n{body}", err=True)
        return USAGE_EXIT
    message = " ".join(exc.format_message().split())
    typer.echo(f"{ctx.get_usage()}\nerror: {message}\nTry '{ctx.command_path} --help' for help.", err=True)
    return USAGE_EXIT


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit; ``argv`` defaults to ``sys.argv[1:]``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    root = command_tree()
    try:
        # Under `dvc repro` every stage command is one custody step (reappreg.custody.step): what it
        # consumes is checked against the signed links of the steps that produced it before it runs,
        # and a link of what it consumed and produced is signed after it succeeded.
        from reappreg.custody.step import begin_step

        step = begin_step(argv)
        # Outside standalone mode click *returns* the code of a `typer.Exit(n)` instead of
        # exiting with it; pass it on so `raise typer.Exit(1)` really fails the command.
        code = root.main(args=argv, prog_name="reappreg", standalone_mode=False)
        code = code if isinstance(code, int) else 0
        if step is not None and code == 0:
            step.finish()
        sys.exit(code)
    except ReappregError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(getattr(exc, "exit_code", USAGE_EXIT))  # an error class may name its own code
    except click_exceptions.UsageError as exc:
        sys.exit(_usage_error(exc, root, argv))
    except click_exceptions.ClickException as exc:  # e.g. a file option that cannot be opened
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
