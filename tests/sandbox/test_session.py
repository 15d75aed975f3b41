"""Sessions: state persists across execs; snapshot/rollback restore the exact tree."""

from __future__ import annotations

import asyncio
import time

import pytest

from posttrain.sandbox import ExecStatus, SandboxError

TREE_HASH = r"""
import hashlib, os, stat
h = hashlib.sha256()
for root, dirs, files in sorted(os.walk('/work')):
    dirs.sort()
    for name in sorted(dirs + files):
        p = os.path.join(root, name)
        st = os.lstat(p)
        h.update(f'{p} {stat.S_IFMT(st.st_mode)} {stat.S_IMODE(st.st_mode):o}'.encode())
        if stat.S_ISLNK(st.st_mode):
            h.update(os.readlink(p).encode())
        elif stat.S_ISREG(st.st_mode):
            h.update(open(p, 'rb').read())
print(h.hexdigest())
"""


def tree(s) -> str:
    r = s.exec(code=TREE_HASH)
    assert r.status is ExecStatus.OK, r.stderr
    return r.stdout


def test_workspace_persists_between_execs(sandbox):
    with sandbox.session(files={"main.py": "print('hi')"}) as s:
        assert s.exec(["python3", "main.py"]).stdout == "hi\n"
        s.exec("echo more > notes.txt")
        assert s.read_file("notes.txt") == b"more\n"


def test_read_and_write_file_round_trip_binary(sandbox):
    blob = bytes(range(256)) * 100
    with sandbox.session() as s:
        s.write_file("dir/sub/blob.bin", blob)
        assert s.read_file("dir/sub/blob.bin") == blob
        with pytest.raises(SandboxError):
            s.read_file("missing")


@pytest.mark.slow
def test_snapshot_and_rollback_restore_the_exact_tree(sandbox):
    with sandbox.session(files={"a.txt": "a", "keep/b.txt": "b", "gone.txt": "g"}) as s:
        s.exec("chmod 600 a.txt && ln -s a.txt link && mkdir -p d/e && echo deep > d/e/f")
        before = tree(s)
        snap = s.snapshot()
        s.exec("echo changed > a.txt && rm gone.txt && chmod 755 keep/b.txt && mv d moved "
               "&& rm -r keep && mkdir keep && ln -sf /etc link2 && echo new > new.txt")
        assert tree(s) != before
        s.rollback(snap)
        assert tree(s) == before


@pytest.mark.slow
def test_deep_snapshot_chains_roll_back_to_any_layer(sandbox):
    with sandbox.session() as s:
        hashes, snaps = [], []
        for i in range(12):
            s.exec(f"echo {i} > f{i % 3} && rm -f f{(i + 1) % 3}")
            hashes.append(tree(s))
            snaps.append(s.snapshot())
        s.rollback(snaps[4])
        assert tree(s) == hashes[4]
        s.exec("echo after > z")
        s.rollback(snaps[1])
        assert tree(s) == hashes[1]


def test_closed_session_refuses_work(sandbox):
    s = sandbox.session()
    s.close()
    with pytest.raises(SandboxError):
        s.exec("true")


def test_session_disk_quota_holds(sandbox):
    with sandbox.session() as s:
        r = s.exec("dd if=/dev/zero of=big bs=1M count=100 2>&1; ls -s --block-size=M big")
        assert int(r.stdout.strip().splitlines()[-1].split("M")[0]) <= 16


def test_aexec_runs_in_the_session_without_blocking_the_event_loop(sandbox):
    """``aexec`` is ``exec`` from asyncio: same workspace, same result, and the loop keeps running
    meanwhile; two calls on one session run one after the other."""
    with sandbox.session(files={"n.txt": "1"}) as s:
        async def scenario():
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.05)
                    ticks += 1

            t = asyncio.ensure_future(ticker())
            start = time.monotonic()
            first = asyncio.ensure_future(s.aexec("sleep 0.5; cat n.txt; echo 2 > n.txt"))
            await asyncio.sleep(0.05)  # the first call holds the session before the second asks
            second = await s.aexec("cat n.txt")
            elapsed = time.monotonic() - start
            t.cancel()
            return await first, second, ticks, elapsed

        first, second, ticks, elapsed = asyncio.run(scenario())
    assert (first.status, first.stdout) == (ExecStatus.OK, "1"), first
    assert (second.status, second.stdout) == (ExecStatus.OK, "2\n"), second
    assert ticks >= 0.5 * elapsed / 0.05, (ticks, elapsed)  # the loop ran while both executed
    with pytest.raises(SandboxError):
        asyncio.run(s.aexec("true"))  # closed
