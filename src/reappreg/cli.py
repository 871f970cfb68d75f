"""The one command line entry point: ``reappreg <concern> <command>``.

Each concern's commands live in ``reappreg.commands.<concern>`` as a typer sub-app;
those modules import heavy libraries (torch, mlflow, GX) inside the commands so that
``reappreg --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys

# Air-gapped by design: models load from local folders and installed packages only, and no
# library may phone home (Hugging Face hub, great-expectations usage statistics).
for _name, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GX_ANALYTICS_ENABLED": "False"}.items():
    os.environ.setdefault(_name, _value)

import typer
from rich.console import Console

from reappreg.errors import ReappregError

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__.splitlines()[0])

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


def _register() -> None:
    for module_name, name in SUBCOMMANDS:
        module = importlib.import_module(f"reappreg.commands.{module_name}")
        app.add_typer(module.app, name=name)


_register()


def main() -> None:
    try:
        # Outside standalone mode click *returns* the code of a `typer.Exit(n)` instead of
        # exiting with it; pass it on so `raise typer.Exit(1)` really fails the command.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except ReappregError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(1)
        raise
