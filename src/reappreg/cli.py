"""The one command line entry point: reappreg CONCERN COMMAND.

Each concern's commands live in ``reappreg.commands.<concern>`` as a typer sub-app;
those modules import heavy libraries (torch, mlflow, GX) inside the commands so that
``reappreg --help`` stays fast.

Errors are handled here, once, for every command: a usage error (unknown command or
option, missing or malformed value) prints its usage, one ``error:`` line and a hint,
and exits 2; a ``ReappregError`` (bad input file, failed check) prints one ``error:``
line and exits 2. Neither prints a traceback.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys

# Air-gapped by design: models load from local folders and installed packages only, and no
# library may phone home (Hugging Face hub, great-expectations usage statistics).
for _name, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GX_ANALYTICS_ENABLED": "False"}.items():
    os.environ.setdefault(_name, _value)

import typer
from typer._click import exceptions as click_exceptions

from reappreg import __version__
from reappreg.errors import ReappregError

USAGE_EXIT = 2

HELP = "Data-and-model registry for RLHF research on cognitive reappraisal."

# Plain help everywhere (no rich panels, no markup): it reads the same in a terminal, a log
# file and a pipe, and help strings show exactly as written.
# Help is at least WIDTH columns wide, so one-line command summaries are not cut short.
WIDTH = 100
app = typer.Typer(no_args_is_help=True, add_completion=False, help=HELP, rich_markup_mode=None,
                  pretty_exceptions_enable=False,
                  context_settings={"max_content_width": WIDTH,
                                    "terminal_width": max(WIDTH, shutil.get_terminal_size().columns)})


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"reappreg {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                 callback=_show_version),
) -> None:
    """Data-and-model registry for RLHF research on cognitive reappraisal."""


# (module under reappreg.commands, sub-command name). A module listed here that does
# not exist yet is an error: every listed concern must be real.
SUBCOMMANDS = [
    ("data", "data"),
    ("validate", "validate"),
    ("guard", "guard"),
    ("rm", "rm"),
    ("policy", "policy"),
    ("stats", "stats"),
    ("generate", "generate"),
    ("judge", "judge"),
    ("card", "card"),
    ("registry", "registry"),
    ("leakscan", "leakscan"),
]
# (module under reappreg.commands, function, command name): commands directly under the root.
COMMANDS = [("report", "report", "report")]


def _register() -> None:
    for module_name, name in SUBCOMMANDS:
        module = importlib.import_module(f"reappreg.commands.{module_name}")
        app.add_typer(module.app, name=name)
    for module_name, function, name in COMMANDS:
        module = importlib.import_module(f"reappreg.commands.{module_name}")
        app.command(name)(getattr(module, function))


_register()


def command_tree():
    """The click command behind ``app``, with plain help on every group and command."""
    root = typer.main.get_command(app)
    stack = [root]
    while stack:
        command = stack.pop()
        # Sub-apps are built by their own modules; plain help is set here for all of them.
        command.rich_markup_mode = None
        stack.extend(getattr(command, "commands", {}).values())
    return root


def _context_for(root, argv: list[str]):
    """The context of the deepest command ``argv`` names (for errors raised without one)."""
    from typer._click.core import Context

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
        # Outside standalone mode click *returns* the code of a `typer.Exit(n)` instead of
        # exiting with it; pass it on so `raise typer.Exit(1)` really fails the command.
        code = root.main(args=argv, prog_name="reappreg", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
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
