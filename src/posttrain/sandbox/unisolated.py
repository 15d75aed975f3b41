"""The explicit opt-in unisolated mode: rlimits and a temporary directory, nothing more.

Covers: running a request as a plain child process where namespaces are unavailable, when
and only when the caller passed ``allow_unisolated=True``; every result carries
``isolated=False`` and ``UNISOLATED_WARNING``. Does not cover: any protection of the host.
"""

from __future__ import annotations

import base64
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult, ExecStatus
from posttrain.sandbox.supervise import Outcome, OutputPump, classify, decode_wait

if TYPE_CHECKING:
    from posttrain.sandbox._server import ExecRequest


def run_unisolated(req: ExecRequest, stdin: bytes, limits: Limits, warnings: list[str]) -> Outcome:
    argv = req["argv"] or [sys.executable, "-c", req["code"] or ""]
    workdir = tempfile.mkdtemp(prefix="posttrain-unisolated-")
    t0 = time.monotonic()
    try:
        for rel, content in req["files"].items():
            path = os.path.join(workdir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(base64.b64decode(content))

        def rlimits() -> None:
            cpu = int(limits.cpu_s + 0.999)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb << 22,) * 2)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.disk_mb << 20,) * 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        env = dict(req["env"], HOME=workdir, TMPDIR=workdir)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=workdir, env=env, start_new_session=True, preexec_fn=rlimits)
        except OSError as e:
            return Outcome(ExecResult(ExecStatus.SANDBOX_ERROR, error=str(e), isolated=False,
                                       warnings=list(warnings)))
        pump = OutputPump(os.dup(proc.stdout.fileno()), os.dup(proc.stderr.fileno()), os.dup(proc.stdin.fileno()),
                     stdin, limits.output_bytes)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
        deadline = time.monotonic() + limits.wall_s
        timed_out = over = False
        while not pump.done:
            if time.monotonic() > deadline:
                timed_out = True
                break
            if pump.step(min(0.1, deadline - time.monotonic()))[0]:
                over = True
                break
        if timed_out or over:
            os.killpg(proc.pid, signal.SIGKILL)
        pump.close()
        _, wstatus, ru = os.wait4(proc.pid, 0)
        proc.returncode = 0
        code, sig = decode_wait(wstatus)
        res = ExecResult(classify(exit_code=code, sig=sig, timed_out=timed_out, output_over=over, cpu_over=False,
                                  oom_kills=0), exit_code=code, signal=sig,
                         stdout=pump.out.decode("utf-8", "replace"), stderr=pump.err.decode("utf-8", "replace"),
                         stdout_truncated=pump.out_truncated, stderr_truncated=pump.err_truncated,
                         wall_s=time.monotonic() - t0, cpu_s=ru.ru_utime + ru.ru_stime,
                         peak_memory_bytes=ru.ru_maxrss * 1024, isolated=False, warnings=list(warnings))
        return Outcome(res, bytes(pump.out), bytes(pump.err))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
