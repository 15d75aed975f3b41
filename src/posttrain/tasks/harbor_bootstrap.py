"""The files that put the test bootstrap stand-ins (`_bootstrap_shim.py`) on the verifier's PATH, and the verdict's record.

Covers: `bootstrap_files(python)` -> the files under `/work/.harbor/bin` (the shim and one wrapper per name it
answers: apt-get, apt, curl, wget, uv, uvx, pip, pip3), `BOOTSTRAP_PATH` (prepended to PATH for the tests only,
so the agent never gets them and cannot plant them: `.harbor` is cleared before the tests are copied in), and
`substitutions(log_text)`, the lines a verdict keeps. Why stand-ins: published test scripts install curl and uv and
fetch pytest at test time; this machine reaches no download site, and the sandbox's root is read-only.
Does not cover: what each stand-in does (`_bootstrap_shim.py`), running the tests (`harbor_workspace.py`).
"""

from __future__ import annotations

from pathlib import Path

SHIM_NAMES = ("apt-get", "apt", "curl", "wget", "uv", "uvx", "pip", "pip3")
BOOTSTRAP_DIR = ".harbor/bin"  # under /work
BOOTSTRAP_PATH = "/work/" + BOOTSTRAP_DIR
MAX_LINES = 40


def bootstrap_files(python: str) -> dict[str, bytes]:
    """Workspace-relative path -> content; the wrappers are shell scripts (made executable by the caller)."""
    shim = (Path(__file__).with_name("_bootstrap_shim.py")).read_bytes()
    files = {f"{BOOTSTRAP_DIR}/_bootstrap_shim.py": shim}
    for name in SHIM_NAMES:
        files[f"{BOOTSTRAP_DIR}/{name}"] = (
            f'#!/bin/sh\nexec {python} -I {BOOTSTRAP_PATH}/_bootstrap_shim.py {name} "$@"\n').encode()
    return files


def executables() -> list[str]:
    return [f"{BOOTSTRAP_PATH}/{name}" for name in SHIM_NAMES]


def substitutions(log_text: str) -> list[str]:
    """The distinct lines of the bootstrap log, in order (at most `MAX_LINES`)."""
    seen: list[str] = []
    for line in log_text.splitlines():
        if line.strip() and line not in seen:
            seen.append(line)
    return seen[:MAX_LINES]
