"""Which code and which machine produced a result: package version, git commit, a hash of the package source, and
the CPU, cores, memory and GPU it ran on (`machine`, read from the OS, never typed by hand)."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
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


def _cpuinfo(text: str) -> dict[str, str]:
    """The first processor's fields of a Linux `/proc/cpuinfo` text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU as `lscpu` names it, with its family and model numbers where the OS gives them (two VMs that both say
    "AMD EPYC" can be different generations): e.g. "AMD EPYC (family 25 model 1)"."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields = _cpuinfo(cpuinfo)
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name


def machine() -> dict[str, object]:
    """The machine a result comes from: CPU, usable cores, memory in GiB, and the GPU's name (None without one, or
    when this process has not initialised CUDA). A benchmark prints it; a run stores it beside `code_version`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory_gib = None
    gpu = None
    try:  # named only where the process already uses CUDA: describing a machine must not initialise it (a fork after
        import torch  # CUDA's init breaks the children) nor fail where a test fakes a visible GPU

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - a missing or broken CUDA is "no GPU" here, never a failed run
        gpu = None
    return {"cpu": cpu_name(), "cores": cores, "memory_gib": memory_gib, "gpu": gpu}
