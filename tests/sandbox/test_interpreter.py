"""Which interpreter tasks run when the caller's Python lives under a path every task mounts fresh."""

import os
import sys

import pytest

from posttrain.sandbox import sandbox as sbmod


def test_task_mounts_are_recognised():
    assert sbmod.under_task_mount("/tmp/venv/bin/python") == "/tmp"
    assert sbmod.under_task_mount("/work") == "/work"
    assert sbmod.under_task_mount("/workspace/venv") is None
    assert sbmod.under_task_mount("/usr/bin/python3") is None


def test_interpreter_outside_task_mounts_is_used_as_is(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    assert sbmod.task_python() == "/usr/bin/python3"


def test_venv_under_tmp_falls_back_to_the_real_interpreter(monkeypatch, tmp_path):
    real = os.path.realpath(sys.executable)
    link = tmp_path / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    monkeypatch.setattr(sys, "executable", str(link))
    assert sbmod.task_python() == real


def test_hidden_environment_is_warned_about(monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/tmp/some-venv")
    with pytest.warns(RuntimeWarning, match="lies under /tmp"):
        sbmod.default_ro_binds()
