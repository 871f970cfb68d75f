"""The one entry point: exit codes and error messages."""

from __future__ import annotations

import subprocess
import sys


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "reappreg", *args], capture_output=True, text=True)


def test_help_lists_every_concern():
    proc = _cli("--help")
    assert proc.returncode == 0
    for name in ["data", "validate", "stats"]:
        assert name in proc.stdout


def test_reappreg_error_exits_2_with_message(tmp_path):
    proc = _cli("data", "ingest", "--out", str(tmp_path / "x"), "--params", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2
    assert "params file not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_usage_error_is_nonzero():
    proc = _cli("data", "ingest", "--no-such-flag")
    assert proc.returncode != 0


def test_typer_exit_code_is_propagated(monkeypatch):
    import typer

    from reappreg import cli

    probe = typer.Typer()

    @probe.command()
    def fail() -> None:
        raise typer.Exit(3)

    monkeypatch.setattr(cli, "app", probe)
    monkeypatch.setattr(sys, "argv", ["reappreg"])
    try:
        cli.main()
    except SystemExit as exc:
        assert exc.code == 3
    else:  # pragma: no cover - main must exit
        raise AssertionError("main() returned without exiting")
