"""A Ray worker's failure reaches the user as one line that keeps the worker's own exception."""

from posttrain.distributed.ray_sandbox import _why


class RemoteError(Exception):
    pass


def test_a_remote_traceback_keeps_its_last_line():
    tb = ("The actor died because of an error raised in its creation task, ray::SandboxWorker.__init__() "
          "(pid=1, ip=192.0.2.2, actor_id=abc)\n" + "  File \"/x.py\", line 3, in f\n    g()\n" * 20
          + "OSError: [Errno 24] Too many open files")
    line = _why(RemoteError(tb))
    assert "\n" not in line
    assert line.startswith("RemoteError: The actor died")
    assert line.endswith("OSError: [Errno 24] Too many open files")


def test_a_one_line_error_is_not_repeated():
    assert _why(RemoteError("worker gone")) == "RemoteError: worker gone"
