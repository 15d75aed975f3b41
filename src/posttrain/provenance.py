"""Which code produced a result: package version, git commit, and a hash of the package source."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from posttrain.version import __version__

ROOT = Path(__file__).parent  # the package's directory


@functools.cache
def source_hash() -> str:
    root = ROOT
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def git_commit() -> str | None:
    root = ROOT.resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def code_version() -> dict[str, str | None]:
    return {"version": __version__, "git": git_commit(), "source_sha": source_hash()}
