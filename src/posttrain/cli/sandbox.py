"""`posttrain sandbox run`: one command in a fresh sandbox, its ExecResult printed as JSON.

Covers: ``run [--timeout S] [--memory MB] [--pids N] [--network] [--file DEST=SRC]... -- CMD ARGS...``.
The exit code is 0 whenever the sandbox itself worked, whatever the program did; 1 for a
SANDBOX_ERROR result; 2 when no sandbox can be built here (namespaces unavailable) or a --file / --stdin
source cannot be read. `app` is a typer app of its own, so it mounts under any parent.
Does not cover: sessions or pools (use the Python API, `posttrain.sandbox`).
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from posttrain.cli.common import friendly
from posttrain.errors import UserError

app = typer.Typer(help="Isolated, quota-bound execution of untrusted code.", no_args_is_help=True)


@app.callback()
def group() -> None:
    """Isolated, quota-bound execution of untrusted code."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise UserError(f"{what} {path}: {exc.strerror or exc}") from None


@app.command(context_settings={"ignore_unknown_options": True})
def run(
    cmd: list[str] = typer.Argument(..., help="Command and arguments, after --."),
    timeout: float = typer.Option(10.0, help="Wall-clock limit in seconds."),
    cpu: Optional[float] = typer.Option(None, help="CPU-time limit in seconds (default: --timeout)."),
    memory: int = typer.Option(512, help="Memory limit in MiB for the whole process tree."),
    pids: int = typer.Option(64, help="Maximum processes and threads."),
    disk: int = typer.Option(64, help="Size of /work and /tmp in MiB."),
    output: int = typer.Option(1 << 20, help="Bytes kept per output stream."),
    network: bool = typer.Option(False, "--network", help="Share the host network (off by default)."),
    file: list[str] = typer.Option([], "--file", help="DEST=SRC: copy host file SRC to /work/DEST."),
    stdin: Optional[str] = typer.Option(None, "--stdin", help="Host file fed to stdin ('-' for ours)."),
    unisolated: bool = typer.Option(False, "--unisolated",
                                    help="If namespaces are unavailable, run WITHOUT isolation (trusted code only)."),
) -> None:
    """Run CMD in a fresh sandbox; print the ExecResult as one JSON object."""
    from posttrain.sandbox.launcher import SandboxUnavailable
    from posttrain.sandbox.limits import Limits
    from posttrain.sandbox.result import ExecStatus
    from posttrain.sandbox.sandbox import Sandbox

    try:
        limits = Limits(wall_s=timeout, cpu_s=cpu or timeout, memory_mb=memory, pids=pids, disk_mb=disk,
                        output_bytes=output)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    with friendly():
        files = {}
        for spec in file:
            dest, sep, src = spec.partition("=")
            if not sep or not dest or not src:
                raise typer.BadParameter(f"--file expects DEST=SRC, got {spec!r}")
            files[dest] = _read(src, "--file")
        data = None
        if stdin is not None:
            data = sys.stdin.buffer.read() if stdin == "-" else _read(stdin, "--stdin")
        try:
            sb = Sandbox(limits, network=network, allow_unisolated=unisolated)
        except SandboxUnavailable as e:
            raise UserError(f"sandbox unavailable: {e}") from None
    with sb:
        try:
            result = sb.run(list(cmd), files=files, stdin=data)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from e
    typer.echo(result.to_json())
    raise typer.Exit(1 if result.status is ExecStatus.SANDBOX_ERROR else 0)
