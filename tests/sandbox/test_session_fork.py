"""Session forks: n workspaces from one template's layers, isolated from each other, with their own
snapshots and quotas, and layer lifetimes that outlast the parent (the fork-server's store is
inspected from the host through the server's /proc entries)."""

from __future__ import annotations

import asyncio
import os

import pytest
from _sandbox_testlib import FAST

from posttrain.sandbox import ExecStatus, Limits, SandboxError


def _server_pid(sandbox) -> int:
    """The fork-server itself: the one child of the outer process ``server_pid`` names."""
    sandbox.run(["true"])  # a live server
    outer = sandbox.server_pid
    with open(f"/proc/{outer}/task/{outer}/children") as f:
        (inner,) = f.read().split()
    return int(inner)


def stores(sandbox) -> set[str]:
    """Session ids whose layer store (a tmpfs at /state/<sid>) the fork-server still has mounted."""
    with open(f"/proc/{_server_pid(sandbox)}/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return {p.split("/")[2] for p in points if p.startswith("/state/")}


def layers(sandbox, sid: str) -> list[str]:
    return sorted(os.listdir(f"/proc/{_server_pid(sandbox)}/root/state/{sid}/layers"))


def ls(s) -> list[str]:
    r = s.exec("ls -A")
    assert r.status is ExecStatus.OK, r
    return r.stdout.split()


def test_a_fork_sees_the_parent_files_uncommitted_changes_included(sandbox):
    with sandbox.session(files={"a.txt": "a", "d/b.txt": "b"}) as parent:
        parent.exec("echo dirty > c.txt && rm a.txt")  # not snapshotted: fork freezes it
        with parent.fork() as child:
            assert ls(child) == ["c.txt", "d"]
            assert child.read_file("d/b.txt") == b"b" and child.read_file("c.txt") == b"dirty\n"
            assert child.parent_id == parent.id
        assert ls(parent) == ["c.txt", "d"]  # the parent sees what it saw


def test_writes_in_a_fork_are_invisible_to_the_parent_and_to_siblings(sandbox):
    with sandbox.session(files={"shared.txt": "0"}) as parent:
        a, b = parent.fork(), parent.fork()
        a.exec("echo a > shared.txt && echo a > only_a.txt")
        b.exec("rm shared.txt && echo b > only_b.txt")
        parent.exec("echo p > only_p.txt")
        assert ls(a) == ["only_a.txt", "shared.txt"] and a.read_file("shared.txt") == b"a\n"
        assert ls(b) == ["only_b.txt"]
        assert ls(parent) == ["only_p.txt", "shared.txt"] and parent.read_file("shared.txt") == b"0"
        c = parent.fork()  # after the parent's change: sees it, none of its siblings'
        assert ls(c) == ["only_p.txt", "shared.txt"]
        for s in (a, b, c):
            s.close()


def test_a_fork_snapshots_and_rolls_back_but_never_below_its_fork_point(sandbox):
    with sandbox.session(files={"base.txt": "base"}) as parent:
        before = parent.snapshot()
        with parent.fork() as child:
            child.exec("echo 1 > one.txt")
            s1 = child.snapshot()
            child.exec("echo 2 > two.txt && rm base.txt")
            assert ls(child) == ["one.txt", "two.txt"]
            child.rollback(s1)
            assert ls(child) == ["base.txt", "one.txt"]
            child.rollback(0)  # the fork point
            assert ls(child) == ["base.txt"]
            with pytest.raises(SandboxError, match="no snapshot"):
                child.rollback(before)  # the parent's snapshot id is not the child's
            with pytest.raises(SandboxError, match="no snapshot"):
                child.rollback(s1)  # dropped by the rollback to 0
            assert ls(child) == ["base.txt"]
        assert ls(parent) == ["base.txt"]


@pytest.mark.slow
def test_closing_the_parent_first_keeps_its_forks_working(sandbox):
    parent = sandbox.session(files={"a.txt": "a"})
    children = [parent.fork() for _ in range(3)]
    parent.close()
    with pytest.raises(SandboxError):
        parent.exec("true")
    assert parent.id in stores(sandbox)  # its layers live on for the forks
    for i, child in enumerate(children):
        child.exec(f"echo {i} > mine.txt")
        assert ls(child) == ["a.txt", "mine.txt"] and child.read_file("a.txt") == b"a"
        snap = child.snapshot()
        child.exec("rm a.txt")
        child.rollback(snap)
        assert child.read_file("a.txt") == b"a"
        grandchild = child.fork()  # forks of a fork whose grandparent is closed
        assert grandchild.read_file("mine.txt") == f"{i}\n".encode()
        grandchild.close()
    for child in children[:-1]:
        child.close()
        assert parent.id in stores(sandbox)
    children[-1].close()
    assert not {parent.id, *(c.id for c in children)} & stores(sandbox)


def test_children_closed_then_parent_frees_every_layer_store(sandbox):
    parent = sandbox.session(files={"a.txt": "a"})
    children = [parent.fork() for _ in range(4)]
    grandchild = children[0].fork()
    ids = {parent.id, grandchild.id, *(c.id for c in children)}
    assert ids <= stores(sandbox)
    for s in (grandchild, *children):
        s.close()
    assert stores(sandbox) & ids == {parent.id}
    parent.close()
    assert not stores(sandbox) & ids


def test_rolling_the_parent_back_below_a_fork_keeps_the_layers_the_fork_reads(sandbox):
    with sandbox.session(files={"a.txt": "a"}) as parent:
        start = parent.snapshot()
        parent.exec("echo 1 > one.txt")
        child = parent.fork()  # freezes one.txt into a new parent layer
        dropped = max(layers(sandbox, parent.id))
        parent.rollback(start)
        assert ls(parent) == ["a.txt"]
        parent.exec("echo 2 > two.txt")
        parent.snapshot()  # a new layer number: the dropped one lives on for the child
        assert ls(child) == ["a.txt", "one.txt"] and child.read_file("one.txt") == b"1\n"
        assert dropped in layers(sandbox, parent.id)
        child.close()
        assert dropped not in layers(sandbox, parent.id)  # freed with its last reader
        assert ls(parent) == ["a.txt", "two.txt"]


@pytest.mark.slow
def test_sixteen_forks_of_one_parent_run_in_parallel_each_with_its_own_files(sandbox):
    with sandbox.session(files={f"src/m{i}.py": f"X = {i}\n" for i in range(20)}) as parent:
        children = [parent.fork() for _ in range(16)]

        async def all_of_them():
            return await asyncio.gather(*(c.aexec(f"echo {i} > mine.txt && ls src | wc -l && cat src/m7.py")
                                          for i, c in enumerate(children)))

        results = asyncio.run(all_of_them())
        assert all(r.status is ExecStatus.OK and r.stdout == "20\nX = 7\n" for r in results), results
        for i, c in enumerate(children):
            assert c.read_file("mine.txt") == f"{i}\n".encode()
            assert ls(c) == ["mine.txt", "src"]
            c.close()
        assert ls(parent) == ["src"]


def test_each_fork_has_its_own_disk_quota(sandbox):
    with sandbox.session(limits=Limits(**{**FAST.to_dict(), "disk_mb": 16})) as parent:
        assert parent.exec("head -c 10M /dev/zero > parent.bin").ok
        a, b = parent.fork(), parent.fork(limits=Limits(**{**FAST.to_dict(), "disk_mb": 4}))
        # 10 MB of the parent's + 12 MB would not fit one 16 MB store: the fork's store is its own.
        assert a.exec("head -c 12M /dev/zero > a.bin").ok
        assert not b.exec("head -c 6M /dev/zero > b.bin").ok  # over its own 4 MB
        r = a.exec("head -c 8M /dev/zero > more.bin")  # 12 + 8 > 16: the fork's quota holds
        assert not r.ok
        assert b.exec("rm -f b.bin && head -c 2M /dev/zero > small.bin").ok
        assert parent.read_file("parent.bin") == bytes(10 << 20)
        a.close()
        b.close()


def test_forking_a_closed_session_is_a_clear_error(sandbox):
    s = sandbox.session()
    s.close()
    with pytest.raises(SandboxError, match="closed"):
        s.fork()
    # The server refuses too, whoever asks.
    reply = sandbox.call_server({"op": "session_fork", "sid": "f0r4ed", "parent": s.id, "disk_bytes": 1 << 20})
    assert "closed" in reply["error"]


@pytest.mark.slow
def test_a_chain_too_deep_for_one_overlay_mount_is_refused_before_any_exec_breaks(sandbox):
    with sandbox.session() as s:
        with pytest.raises(SandboxError, match="more than one overlay mount can take"):
            for i in range(300):
                s.exec(f"echo {i} > f{i}")
                s.snapshot()
        assert 50 < i < 300
        r = s.exec("ls | wc -l")  # the deepest chain accepted still mounts
        assert (r.status, r.stdout) == (ExecStatus.OK, f"{i + 1}\n"), r
        with pytest.raises(SandboxError, match="more than one overlay mount can take"):
            s.fork()  # the dirty upper cannot be frozen on top
        s.rollback(0)
        with s.fork() as child:
            assert ls(child) == []
