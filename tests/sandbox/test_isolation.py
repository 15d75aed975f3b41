"""Escape attacks: file system, privileges, kernel surface, network. Each must fail inside
the sandbox, and a control shows the probe itself works where access is legitimate.

Every probe prints what it observed and the test asserts that observation (and that the probe
ran to its end): a check that only looks for a string's absence would pass if the probe crashed."""

from __future__ import annotations

import concurrent.futures
import errno
import os
import signal
import socket
import threading
import time

import pytest
from _sandbox_testlib import free_port, sandbox_uid_processes, wait_until

from posttrain.sandbox import ExecStatus, Limits, SandboxError

# ---------------------------------------------------------------- file system


def test_host_files_outside_the_binds_are_invisible(sandbox):
    paths = ("/etc/shadow", "/root/.bashrc", "/home", "/var", "/work/main", "/sys/fs/cgroup", "/boot")
    r = sandbox.run(code=f"import os\nfor p in {paths!r}:\n    print(p, os.path.exists(p))\n"
                         "print('/usr', os.path.exists('/usr'))")
    assert r.status is ExecStatus.OK, r
    assert r.stdout == "".join(f"{p} False\n" for p in paths) + "/usr True\n", r.stdout  # /usr: the probe sees binds
    assert os.path.exists("/etc/shadow")  # control: it is there on the host


def test_etc_passwd_is_the_sandbox_own(sandbox):
    r = sandbox.run("cat /etc/passwd")
    with open("/etc/passwd") as f:
        host = f.read()
    assert r.status is ExecStatus.OK, r
    assert r.stdout != host and r.stdout.startswith("root:x:0:0:sandbox")


def test_proc_1_root_and_proc_self_root_lead_nowhere_on_the_host(sandbox):
    code = ("import os\nfor p in ('/proc/1/root', '/proc/2/root', '/proc/self/root'):\n    try:\n"
            "        names = os.listdir(p)\n"
            "        print(p, 'home' in names or 'var' in names, os.path.exists(p + '/etc/shadow'))\n"
            "    except OSError as e:\n        print(p, 'denied', e.errno)")
    r = sandbox.run(code=code)
    lines = r.stdout.splitlines()
    assert r.status is ExecStatus.OK, r
    assert len(lines) == 3, r.stdout + r.stderr
    for line in lines:
        assert line.endswith("False False") or " denied " in line, line
    assert lines[2].endswith("False False")  # our own root is readable and is the sandbox's


def test_runtime_binds_and_root_are_read_only(sandbox):
    code = ("import errno\nfor p in ('/usr/evil', '/etc/evil', '/evil', '/bin/evil', '/dev/evil', '/proc/evil', "
            "'/tmp/ok'):\n    try:\n        open(p, 'w')\n        print(p, 'WRITABLE')\n    except OSError as e:\n"
            "        print(p, e.errno)")
    r = sandbox.run(code=code)
    assert r.status is ExecStatus.OK, r
    ro = [f"{p} {errno.EROFS}" for p in ("/usr/evil", "/etc/evil", "/evil", "/bin/evil", "/dev/evil")]
    assert r.stdout.splitlines() == [*ro, f"/proc/evil {errno.ENOENT}", "/tmp/ok WRITABLE"], r.stdout  # /tmp: control
    assert not os.path.exists("/usr/evil")


def test_parent_and_absolute_file_names_are_rejected(sandbox):
    for bad in ("../escape", "/etc/evil", "a/../../b", "", "a//b", "./x"):
        with pytest.raises(ValueError):
            sandbox.run(code="pass", files={bad: "x"})


def test_symlinks_cannot_redirect_writes_to_the_host(sandbox):
    with sandbox.session() as s:
        s.exec("ln -s /etc /work/etc_link && ln -s /usr/bin/python3 /work/py_link && ln -s ../../.. /work/up")
        for target in ("etc_link/passwd", "py_link", "up/etc/evil"):
            with pytest.raises(SandboxError, match=f"Errno {errno.EROFS}"):  # the link resolved inside the sandbox
                s.write_file(target, b"owned")
        assert b"sandbox" in s.read_file("etc_link/passwd")  # resolves to the sandbox's /etc
    with open("/etc/passwd") as f:
        assert "owned" not in f.read()


def test_harbor_paths_are_directories_of_the_tasks_own_workspace(sandbox):
    """/app, /tests, /logs, /solution (sandbox.WORKSPACE_BINDS) are real directories bound from the task's own
    /work; a symlink planted on the way binds nothing, and they cannot be replaced."""
    with sandbox.session() as s:
        r = s.exec("cd /app && pwd -P; echo a > /app/f; mkdir -p .harbor/logs .harbor/tests && echo b > .harbor/logs/g && "
                   "echo t > .harbor/tests/test_x.py; true")
        assert r.stdout == "/app\n", r
        r = s.exec("cat /work/f /logs/g; find /tests -name '*test*.py'; rm -rf /tests 2>/dev/null || echo fixed; "
                   "ln -s /etc /app/etc && ln -sfn / /logs 2>/dev/null || echo readonly; "
                   "rm -rf .harbor/solution && ln -s /etc .harbor/solution")
        assert r.stdout == "a\nb\n/tests/test_x.py\nfixed\nreadonly\n", r
        r = s.exec("ls -A /solution; test -d /tests && test ! -L /tests && test ! -L /app && echo dirs")
        assert r.stdout == "dirs\n", r  # the planted .harbor/solution -> /etc was not bound
    r = sandbox.run("ls -A /app /logs")  # a one-shot run: a fresh, empty /work behind them
    assert r.stdout.split() == ["/app:", "/logs:"], r


def test_mknod_mount_and_chroot_are_refused(sandbox):
    code = ("import os, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "try:\n    os.mknod('/tmp/null', 0o666 | 0o020000, os.makedev(1, 3)); print('mknod ok')\n"
            "except OSError as e: print('mknod', e.errno)\n"
            "print('mount', libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\n"
            "try:\n    os.chroot('/tmp'); print('chroot ok')\nexcept OSError as e: print('chroot', e.errno)")
    r = sandbox.run(code=code)
    assert r.status is ExecStatus.OK, r
    assert r.stdout == f"mknod {errno.EPERM}\nmount -1 {errno.EPERM}\nchroot {errno.EPERM}\n", r.stdout


# ---------------------------------------------------------------- privileges and kernel surface


def test_capabilities_are_empty_and_no_new_privs_is_set(sandbox):
    r = sandbox.run("grep -E '^(Cap[A-Za-z]+|NoNewPrivs|Seccomp):' /proc/self/status")
    fields = dict(line.split(":\t") for line in r.stdout.splitlines())
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"


@pytest.mark.slow
def test_tasks_run_as_nobody_on_the_host(sandbox):
    import asyncio

    marker = "uid-probe-5521"

    async def scenario():
        task = asyncio.ensure_future(sandbox.arun(["python3", "-c", "import time; time.sleep(2)", marker]))
        from _sandbox_testlib import host_processes_with
        ok = await asyncio.get_running_loop().run_in_executor(None, lambda: wait_until(lambda: host_processes_with(marker), 3))
        uids = []
        for pid in host_processes_with(marker):
            with open(f"/proc/{pid}/status") as f:
                uids += [line.split()[1:] for line in f if line.startswith("Uid:")]
        await task
        return ok, uids

    ok, uids = asyncio.run(scenario())
    assert ok and uids and all(u == ["65534"] * 4 for u in uids), uids


def test_owners_keep_only_three_capabilities_and_only_over_the_namespaces_own_files(sandbox):
    """Limits(owners=True) (terminal tasks): root of the namespace may chown to the ids tasks use and pass
    permissions of files those ids own, nothing else: no other capability, the host's files (owned by ids the
    namespace does not map) stay as they are, the read-only root stays read-only, and without it nothing is kept."""
    owners = Limits(owners=True)
    script = ("grep -E '^Cap(Eff|Bnd|Amb):' /proc/self/status; mkdir d && echo x > d/f && chmod 600 d/f && "
              "chown -R 1000:1000 d && stat -c '%u:%g' d/f && cat d/f && "
              "tar -C /tmp --owner=1000 --group=1000 -cf /tmp/a.tar /work/d 2>/dev/null; mkdir e && "
              "tar -xf /tmp/a.tar -C e && stat -c '%u' e/work/d/f; "
              "chown 0 /usr/bin/env 2>&1 | grep -c 'Read-only'; cat /etc/shadow 2>/dev/null | wc -c; "
              "unshare -r true 2>/dev/null || echo no-userns; mount -t tmpfs x /tmp 2>/dev/null || echo no-mount")
    r = sandbox.run(script, limits=owners)
    assert r.stdout.split("\n")[:3] == ["CapEff:\t000000000000000b", "CapBnd:\t000000000000000b",
                                        "CapAmb:\t000000000000000b"], r
    assert r.stdout.split("\n")[3:] == ["1000:1000", "x", "1000", "1", "0", "no-userns", "no-mount", ""], r
    # Without owners: nothing kept, and chown to another id is refused
    r = sandbox.run("grep -E '^CapEff:' /proc/self/status; touch f; chown 1000 f 2>/dev/null || echo refused")
    assert r.stdout == "CapEff:\t0000000000000000\nrefused\n", r
    # A host directory of host root (unmapped in the namespace) is not the namespace's: DAC_OVERRIDE does not reach it
    if os.path.isdir("/etc/ssl/private") and not os.stat("/etc/ssl/private").st_mode & 0o005:
        r = sandbox.run("ls /etc/ssl/private >/dev/null 2>&1 && echo listed || echo denied", limits=owners)
        assert r.stdout == "denied\n", r


def test_ptrace_is_refused(sandbox):
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "pid = os.fork()\nif pid == 0:\n    import time; time.sleep(2); os._exit(0)\n"
            "print(libc.ptrace(16, pid, 0, 0), ctypes.get_errno())")  # PTRACE_ATTACH
    r = sandbox.run(code=code)
    assert r.stdout.strip() == "-1 1"


@pytest.mark.parametrize("name,nr", [("keyctl", 250), ("bpf", 321), ("perf_event_open", 298),
                                     ("userfaultfd", 323), ("io_uring_setup", 425), ("setns", 308)])
@pytest.mark.slow
def test_dangerous_syscalls_return_eperm(sandbox, name, nr):
    r = sandbox.run(code=f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                         f"print(libc.syscall({nr}, 0, 0, 0, 0, 0), ctypes.get_errno())")
    assert r.stdout.strip() == "-1 1", (name, r.stdout, r.stderr)


def test_tiocsti_terminal_injection_is_refused(sandbox):
    r = sandbox.run(code="import fcntl\ntry:\n    fcntl.ioctl(0, 0x5412, b'x'); print('injected')\n"
                         "except OSError as e:\n    print(e.errno)")
    assert r.stdout.strip() == "1"


def test_nested_user_namespaces_are_refused(sandbox):
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.unshare(0x10000000), ctypes.get_errno())\n"
            "import subprocess\nprint(subprocess.run(['unshare', '-U', 'true']).returncode)")
    r = sandbox.run(code=code)
    assert r.status is ExecStatus.OK, r
    assert r.stdout == f"-1 {errno.EPERM}\n1\n", r.stdout  # unshare(1) exits 1 when the call fails
    assert "Operation not permitted" in r.stderr, r.stderr


def test_kill_minus_one_cannot_reach_host_processes(sandbox, host_sleeper):
    """kill(-1) reaches every process the task may signal: its own child dies (the probe works),
    the host's processes and the sandbox server do not."""
    code = ("import os, signal, subprocess\nchild = subprocess.Popen(['sleep', '30'])\n"
            "os.kill(-1, signal.SIGKILL)\nprint('sent', child.wait())")
    r = sandbox.run(code=code)
    assert r.status is ExecStatus.OK, r
    assert r.stdout == f"sent {-signal.SIGKILL}\n", r.stdout
    assert host_sleeper.poll() is None  # the host process is alive
    assert sandbox.run(code="print(1)").stdout == "1\n"  # and so is the sandbox server


def test_host_processes_are_invisible(sandbox, host_sleeper):
    r = sandbox.run(code="import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert r.stdout == "[1, 2]\n"  # the task's init and the task, alone in their PID namespace


@pytest.mark.parametrize("prefork", [False, True])
def test_task_holds_no_descriptor_but_its_stdio(sandbox, prefork):
    r = sandbox.run(code="import os; print(sorted(int(x) for x in os.listdir('/proc/self/fd')))", prefork=prefork)
    assert r.stdout == "[0, 1, 2, 3]\n", r.stdout  # 3 is the listdir handle itself


def _status(pid: int, key: str) -> list[str]:
    with open(f"/proc/{pid}/status") as f:
        return next(line.split()[1:] for line in f if line.startswith(key + ":"))


@pytest.mark.slow
def test_inits_run_no_code_and_tasks_hold_no_descriptor_of_concurrent_executions(sandbox):
    """Each execution's init (pid 1 of its namespace) shares the fork-server's memory and
    descriptor table, so it must never run anything: it sleeps in pause(), has a handler for
    no signal (nothing a task sends it can make it run code), survives every signal its task
    sends it, and is non-dumpable (its /proc entries belong to host root, so no task can open
    its memory or descriptors). The tasks themselves hold nothing but their stdio."""
    probe = ("import os, signal, time\nfor s in signal.valid_signals():\n    try:\n        os.kill(1, s)\n"
             "    except OSError:\n        pass\n"
             "time.sleep(1.5); print(sorted(int(x) for x in os.listdir('/proc/self/fd')))")
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        runs = [ex.submit(sandbox.run, code=probe, prefork=pf) for pf in (True, False, True, False)]
        time.sleep(0.8)
        inits = {}
        for pid in sandbox_uid_processes():  # this sandbox's: other sandboxes may run on the host
            try:
                ns, parent = _status(pid, "NSpid"), int(_status(pid, "PPid")[0])
                if len(ns) == 3 and ns[-1] == "1" and int(_status(parent, "PPid")[0]) == sandbox.server_pid:
                    caught = _status(pid, "SigCgt")[0]
                    with open(f"/proc/{pid}/stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                    with open(f"/proc/{pid}/syscall") as f:
                        call = f.read().split()[0]
                    inits[pid] = (int(caught, 16), state, call, os.stat(f"/proc/{pid}/fd").st_uid)
            except (OSError, StopIteration):
                continue
        results = [f.result() for f in runs]
    assert [r.status for r in results] == [ExecStatus.OK] * 4, results
    assert [r.stdout for r in results] == ["[0, 1, 2, 3]\n"] * 4, results
    assert len(inits) >= 4, inits
    pause = {"x86_64": "34"}.get(os.uname().machine)
    for caught, state, call, owner in inits.values():
        assert caught == 0 and state == "S" and owner == 0, inits
        assert pause is None or call == pause, inits


def test_task_cannot_reach_its_init_status_channel(sandbox):
    code = ("import os\nfor p in ('/proc/1/mem', '/proc/1/fd/3', '/proc/1/fd/4', '/proc/1/environ'):\n"
            "    try:\n        open(p, 'rb').close(); print(p, 'OPEN')\n    except OSError as e:\n        print(p, e.errno)\n"
            "print(os.listdir('/proc/1/fd') if os.access('/proc/1/fd', os.R_OK) else 'no fd listing')")
    r = sandbox.run(code=code)
    assert r.status is ExecStatus.OK, r
    paths = ("/proc/1/mem", "/proc/1/fd/3", "/proc/1/fd/4", "/proc/1/environ")
    assert r.stdout == "".join(f"{p} {errno.EACCES}\n" for p in paths) + "no fd listing\n", r.stdout


# ---------------------------------------------------------------- network


def _serve_once(sock: socket.socket, hits: list) -> threading.Thread:
    def loop():
        sock.settimeout(3)
        try:
            if sock.type == socket.SOCK_STREAM:
                conn, _ = sock.accept()
                hits.append("tcp")
                conn.close()
            else:
                sock.recvfrom(100)
                hits.append("udp")
        except OSError:
            pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


CONNECT = ("import socket, sys\nfam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n"
           "s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)\n"
           "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('connected')\n"
           "except OSError as e:\n    print('refused', e.errno)")


@pytest.mark.parametrize("host,family", [("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)])
@pytest.mark.slow
def test_no_tcp_to_host_loopback(sandbox, host, family):
    srv = free_port(family, host=host)
    srv.listen()
    hits: list = []
    t = _serve_once(srv, hits)
    port = srv.getsockname()[1]
    r = sandbox.run(["python3", "-c", CONNECT, host, str(port)])
    assert r.status is ExecStatus.OK, r
    assert r.stdout.startswith("refused"), r.stdout + r.stderr
    control = sandbox.run(["python3", "-c", CONNECT, host, str(port)], network=True)
    t.join()
    srv.close()
    assert control.stdout == "connected\n" and hits == ["tcp"]


@pytest.mark.slow
def test_no_udp_to_host_loopback(sandbox):
    srv = free_port(socket.AF_INET, socket.SOCK_DGRAM)
    hits: list = []
    port = srv.getsockname()[1]
    code = (f"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"print('sent', s.sendto(b'x', ('127.0.0.1', {port})))")
    r = sandbox.run(code=code)
    t = _serve_once(srv, hits)
    srv.settimeout(0.5)
    t.join()
    control = sandbox.run(code=code, network=True)  # the same datagram arrives with network on
    srv.settimeout(2)
    data, _ = srv.recvfrom(10)
    srv.close()
    assert (r.status, r.stdout) == (ExecStatus.OK, "sent 1\n"), r  # sent, to the task's own loopback
    assert (control.status, control.stdout) == (ExecStatus.OK, "sent 1\n"), control
    assert hits == [] and data == b"x"


def test_no_abstract_unix_socket_to_host(sandbox):
    name = b"\0posttrain-sandbox-test-abstract"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen()
    code = (f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({name!r}); print('connected')\n"
            "except OSError as e:\n    print('refused', e.errno)")
    r = sandbox.run(code=code)
    srv.close()
    assert r.status is ExecStatus.OK, r
    assert r.stdout == f"refused {errno.ECONNREFUSED}\n", r.stdout


def test_no_dns_resolution(sandbox):
    code = ("import socket\ntry:\n    print(socket.getaddrinfo('example.com', 80)[0][4])\n"
            "except OSError as e:\n    print('failed', type(e).__name__)")
    r = sandbox.run(code=code, limits=Limits(wall_s=8))
    assert r.status is ExecStatus.OK, r
    assert r.stdout.startswith("failed"), r.stdout


def test_private_loopback_works_inside_one_task(sandbox):
    code = ("import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.send(b'hi'); print(a.recv(2))")
    assert sandbox.run(code=code).stdout == "b'hi'\n"
