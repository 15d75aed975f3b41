"""The trusted test harness that runs INSIDE the sandbox: tests run here, the solution runs in a child.

Covers: the three processes of one sandboxed verification, the wire codec between them, the
messages each receives (``Job``/``Item`` from ``rewards/code.py`` on stdin, ``Load``/``Call`` in C,
``Reply`` in H), and the per-item report (its shape, ``Report``, is defined in ``rewards/code.py``,
which reads it). It imports nothing from posttrain (the sandbox cannot see the package);
``rewards/code.py`` compiles this file and sends it as the sandboxed program.

Processes (all inside one sandbox execution, which already has no capabilities, seccomp,
no network and its own PID/mount namespaces):

- H, the harness (this module's ``main``). First it makes itself non-dumpable
  (``PR_SET_DUMPABLE=0``: a process of the same uid cannot ptrace it, read ``/proc/H/mem``,
  ``/proc/H/environ`` or open ``/proc/H/fd/*``), keeps a private duplicate of stdout as the
  report channel and points fd 1 at /dev/null, drops every ``sys.path`` entry a task could
  write (``''``, /work, /tmp, /dev/shm) and non-standard import hooks, then forks Z. Of the
  entries under /tmp it keeps only those inside a runtime bound read-only there (a virtual
  environment under /tmp), through descriptors opened now (``_held_read_only``).
  Only THEN does it read its job from stdin: per-run nonce, programs and tests. The tests
  never exist as files, so nothing can rewrite them, and no process holding the solution
  ever has a copy of H's memory that contains them.
- Z, a zygote forked before H read anything secret. It closes stdin/stdout/stderr and on
  request forks a fresh C for a socket H hands it (SCM_RIGHTS).
- C, the candidate: closes every fd but its socket, gets /dev/null as stdio and an
  RLIMIT_AS cap, then execs the solution as module ``solution`` and serves calls: H sends
  ``(name, args)`` and gets back plain data or an exception name.

The tests (HumanEval ``check(candidate)``, top-level asserts, or pytest-style ``test_*``
functions) run in H against proxies whose calls go to C. Values cross the boundary only as
plain data (None, bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset),
encoded as tagged JSON and decoded here by a depth- and size-bounded walk, so an object with a
forged ``__eq__`` cannot cross, and every ``assert`` is evaluated in H on H's own builtins.
Hence ``sys.exit``/``os._exit`` in the solution, monkeypatched ``builtins``/pytest (they live
in C), printing "PASS" (C's stdout is /dev/null; H's report lines carry the nonce) and
rewriting test files (there are none) earn nothing. A call that overruns its timeout kills C,
fails that test and the next test gets a fresh C. Between batch items H SIGKILLs every process
but init, H and Z and empties /work, /tmp and /dev/shm, so one item cannot touch the next.
Killing H or Z (``kill(-1, 9)``) ends the run without a report for the current item: no
credit (the manager re-runs the remaining items of a batch one by one).

Does not cover: building the sandbox, batching and verdicts (``rewards/code.py``).
Limits: the solution can still read its own inputs and return memorised outputs; arguments
are copied, so tests that inspect in-place mutation of an argument see the original; objects
other than plain data cannot be returned.
"""

from __future__ import annotations

import ast
import base64
import builtins
import json
import os
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import time
import traceback
import types

# Signals the solution could send H to turn its failure into an ERROR verdict (KeyboardInterrupt
# at the wrong moment) or a crash; H and Z ignore them (SIGKILL/SIGSTOP end the run: no credit).
_QUIET_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                  signal.SIGPIPE, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGXFSZ)
MAX_MSG = 16 << 20  # bytes per message from C
MAX_DEPTH = 200
ERR_LEN = 400
_CORE_PIDS: set[int] = set()
_TASK_PATH: list[str] = []  # sys.path as the sandbox gave it; C gets it back (H keeps only what no task can write)
_KEPT_MOUNTS: set[str] = set()  # runtimes bound read-only under the writable directories: never emptied (where they are now)


# ----------------------------------------------------------------------------- messages
# For readers and type checkers only: `typing` is not imported at run time (this program runs
# once per sandboxed batch; in command mode nothing has imported it yet).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal, TypedDict

    class Item(TypedDict):
        """One response to judge."""

        id: str
        program: str
        """The whole program the response stands for (``code.build_program``)."""
        tests: str
        entry_point: str | None
        style: Literal["auto", "check", "asserts", "pytest"]
        module: str
        """The name the program is loaded as (``from solution import f`` in the tests)."""
        split: bool
        """``check`` style: count each top-level statement of ``check`` holding an assert as one test."""
        call_timeout_s: float
        timeout_s: float
        """The item's whole budget: its tests together."""

    class Job(TypedDict):
        """What H reads on stdin, once Z is forked: the per-run nonce and the items."""

        nonce: str
        items: list[Item]

    class Load(TypedDict):
        """H -> C: run ``src`` as module ``module``."""

        op: Literal["load"]
        src: str
        module: str

    class Call(TypedDict):
        """H -> C: call the solution's ``name`` with ``encode``d arguments."""

        op: Literal["call"]
        name: str
        args: object
        kwargs: object

    class Loaded(TypedDict):
        callables: list[str]
        data: dict[str, object]
        """The module's plain-data globals, ``encode``d."""

    class Raised(TypedDict):
        type: str
        message: str
        where: str
        """``file:line`` in the solution, or empty."""

    class Returned(TypedDict):
        ok: object
        """``Loaded`` for a load; the ``encode``d return value for a call."""

    class Failed(TypedDict):
        exc: Raised

    Reply = Returned | Failed  # C -> H, untrusted: H checks its shape before use


# ----------------------------------------------------------------------------- codec


class NotData(TypeError):
    """A value that is not plain data cannot cross the process boundary."""


def encode(v, depth: int = 0, budget: list[int] | None = None):
    """Plain data -> JSON-able tree; lists are arrays, everything else that JSON cannot say is tagged.
    ``budget`` ([n]) caps the number of nodes: over it, ``NotData``."""
    if depth > MAX_DEPTH:
        raise NotData("value nested too deeply")
    if budget is not None:
        budget[0] -= 1
        if budget[0] < 0:
            raise NotData("value too large")
    if v is None or type(v) in (bool, str):
        return v
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    d = depth + 1
    if isinstance(v, list):
        return [encode(x, d, budget) for x in v]
    if isinstance(v, tuple):
        return {"t": [encode(x, d, budget) for x in v]}
    if isinstance(v, dict):
        return {"d": [[encode(k, d, budget), encode(x, d, budget)] for k, x in v.items()]}
    if isinstance(v, frozenset):
        return {"f": [encode(x, d, budget) for x in v]}
    if isinstance(v, set):
        return {"s": [encode(x, d, budget) for x in v]}
    if isinstance(v, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, complex):
        return {"c": [v.real, v.imag]}
    raise NotData(f"a value of type {type(v).__name__} is not plain data")


def decode(x, depth: int = 0):
    """The inverse of ``encode``, strict: anything else raises ``NotData``. Runs on untrusted input."""
    if depth > MAX_DEPTH:
        raise NotData("value nested too deeply")
    t = type(x)
    if x is None or t in (bool, int, float, str):
        return x
    d = depth + 1
    if t is list:
        return [decode(i, d) for i in x]
    if t is dict and len(x) == 1:
        (tag, body), = x.items()
        if tag == "b" and type(body) is str:
            return base64.b64decode(body, validate=True)
        if type(body) is not list:
            raise NotData("malformed value")
        if tag == "t":
            return tuple(decode(i, d) for i in body)
        if tag == "d":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise NotData("malformed dict")
                out[decode(pair[0], d)] = decode(pair[1], d)
            return out
        if tag == "s":
            return {decode(i, d) for i in body}
        if tag == "f":
            return frozenset(decode(i, d) for i in body)
        if tag == "c" and len(body) == 2 and all(type(i) in (int, float) for i in body):
            return complex(body[0], body[1])
    raise NotData("malformed value")


def _send(sock: socket.socket, obj) -> None:
    data = json.dumps(obj, allow_nan=True).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            raise TimeoutError
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket, deadline: float):
    (n,) = struct.unpack("!I", _recv_exact(sock, 4, deadline))
    if n > MAX_MSG:
        raise NotData(f"message of {n} bytes is over the {MAX_MSG} byte cap")
    return json.loads(_recv_exact(sock, n, deadline))


# ----------------------------------------------------------------------------- C: the candidate


def _only_fd(keep: int) -> None:
    """Close every descriptor but `keep`; stdin/stdout/stderr become /dev/null."""
    os.closerange(0, keep)
    os.closerange(keep + 1, 1 << 16)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _child(sock: socket.socket, memory_bytes: int) -> None:
    """Serve the solution's functions to H. Never returns. Everything after the preamble is untrusted."""
    try:
        _only_fd(sock.fileno())
        sys.stdin = open(0, "r", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        for sig in _QUIET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if memory_bytes:  # on top of what the forked interpreter already maps
            with open("/proc/self/statm") as f:
                mapped = int(f.read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (mapped + memory_bytes,) * 2)
        os.chdir("/work")
        sys.path[:] = ["/work", *_TASK_PATH]  # as under ``python -c``: the solution's imports are its own business
        sys.setrecursionlimit(3000)
    except BaseException:  # noqa: BLE001
        os._exit(3)
    _child_loop(sock)
    os._exit(0)


def _child_loop(sock: socket.socket) -> None:
    module = None
    while True:
        try:
            msg: Load | Call = _recv(sock, time.monotonic() + 86400)
        except BaseException:  # noqa: BLE001 - H went away
            return
        try:
            if msg["op"] == "load":
                module = types.ModuleType(msg["module"])
                module.__file__ = f"/work/{msg['module']}.py"
                sys.modules[msg["module"]] = module
                exec(compile(msg["src"], f"{msg['module']}.py", "exec"), module.__dict__)
                names, data, room = [], {}, MAX_MSG // 4
                for k, v in list(vars(module).items()):
                    if k.startswith("__"):
                        continue
                    if callable(v):
                        names.append(k)
                        continue
                    try:  # constants the tests may name; large tables stay behind (tests call functions)
                        enc = encode(v, 0, [4096])
                        size = len(json.dumps(enc))
                    except (NotData, TypeError, ValueError, RecursionError):
                        continue
                    if size <= min(room, 1 << 16):
                        data[k], room = enc, room - size
                loaded: Loaded = {"callables": names, "data": data}
                reply: Reply = {"ok": loaded}
            else:
                fn = getattr(module, msg["name"])
                args, kwargs = decode(msg["args"]), decode(msg["kwargs"])
                if type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
                    raise TypeError("bad keyword arguments")
                reply = {"ok": encode(fn(*args, **kwargs))}
        except BaseException as e:  # noqa: BLE001 - the solution's own failure, reported as data
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if f.filename.endswith(".py")
                          and not f.filename.endswith("_code_harness.py")), "")
            reply = {"exc": {"type": type(e).__name__, "message": str(e)[:ERR_LEN], "where": where}}
        try:
            _send(sock, reply)
        except (TypeError, ValueError):  # e.g. an int too large for str()
            _send(sock, {"exc": {"type": "ValueError", "message": "the result could not be encoded", "where": ""}})


# ----------------------------------------------------------------------------- Z: the zygote


def _zygote(ctl: socket.socket, memory_bytes: int) -> None:
    _only_fd(ctl.fileno())
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    import gc

    gc.freeze()  # C's collections then skip every inherited object: fewer copy-on-write faults per C
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        try:
            _, fds, _, _ = socket.recv_fds(ctl, 16, 1)
        except OSError:
            os._exit(0)
        if not fds:
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            ctl.close()
            _child(socket.socket(fileno=fds[0]), memory_bytes)
        os.close(fds[0])
        ctl.sendall(struct.pack("!i", pid))


# ----------------------------------------------------------------------------- H: the harness


class ZygoteLost(Exception):
    """Z did not answer: no fresh C can be made in this run."""


class CandidateTimeout(Exception):
    """A call into the solution ran past its time limit."""


class CandidateCrashed(Exception):
    """The solution's process died (exit, kill, crash) during a call."""


class RemoteError(Exception):
    """The solution raised an exception whose type has no builtin counterpart."""


class ItemDeadline(BaseException):
    """The item's whole time budget is spent (BaseException: tests' ``except Exception`` cannot swallow it)."""


def _remote_exception(name: str, msg: str, where: str) -> Exception:
    cls = getattr(builtins, name, None)
    text = f"{msg} ({where})" if where else msg
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(text)
        except Exception:  # noqa: BLE001 - exception types with odd constructors
            pass
    return RemoteError(f"{name}: {text}")


class Remote:
    """H's handle on the current C: spawn through Z, load the program, call, kill."""

    def __init__(self, zygote: socket.socket, program: str, module: str, call_timeout_s: float):
        self.zygote, self.program, self.module, self.call_timeout_s = zygote, program, module, call_timeout_s
        self.sock: socket.socket | None = None
        self.pid = 0
        self.load_error: str | None = None
        self.callables: list[str] = []
        self.data: dict = {}

    def start(self) -> bool:
        """A fresh C with the program loaded; False (with ``load_error``) when loading failed."""
        self.kill()
        mine, theirs = socket.socketpair()
        try:
            socket.send_fds(self.zygote, [b"C"], [theirs.fileno()])
            self.pid = struct.unpack("!i", _recv_exact(self.zygote, 4, time.monotonic() + 10))[0]
        except (OSError, EOFError, TimeoutError) as e:
            mine.close()
            raise ZygoteLost(f"the zygote did not start a process: {type(e).__name__}") from None
        finally:
            theirs.close()
        self.sock = mine
        try:
            reply = self._rpc({"op": "load", "src": self.program, "module": self.module})
            self.callables = [str(n) for n in reply["callables"]]
            self.data = {str(k): decode(v) for k, v in reply["data"].items()}
        except Exception as e:  # noqa: BLE001 - whatever the solution did while loading is its failure
            self.load_error = f"{type(e).__name__}: {e}"
            self.callables, self.data = [], {}
            self.kill()
            return False
        return True

    def _rpc(self, msg):
        assert self.sock is not None
        try:
            _send(self.sock, msg)
            reply = _recv(self.sock, time.monotonic() + self.call_timeout_s)
        except TimeoutError:
            self.kill()
            raise CandidateTimeout(f"timed out after {self.call_timeout_s:g} s") from None
        except (EOFError, OSError):
            self.kill()
            raise CandidateCrashed("the solution's process exited or crashed") from None
        except (NotData, ValueError) as e:
            self.kill()
            raise NotData(f"unreadable reply from the solution: {e}") from None
        if type(reply) is not dict or len(reply) != 1:
            raise NotData("malformed reply from the solution")
        exc = reply.get("exc")
        if type(exc) is dict and set(exc) == {"type", "message", "where"}:
            raise _remote_exception(str(exc["type"]), str(exc["message"]), str(exc["where"]))
        if "ok" not in reply:
            raise NotData("malformed reply from the solution")
        return reply["ok"]

    def call(self, name: str, args: tuple, kwargs: dict | None = None):
        if self.sock is None and not self.start():
            raise CandidateCrashed(f"the solution could not be loaded again: {self.load_error}")
        msg = {"op": "call", "name": name, "args": encode(list(args)), "kwargs": encode(kwargs or {})}
        return decode(self._rpc(msg))

    def kill(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid > 0:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.pid = 0


class Proxy:
    """Stands for one of the solution's functions in the tests: calls cross to C, results come back as data."""

    def __init__(self, remote: Remote, name: str):
        self._remote, self.__name__ = remote, name

    def __call__(self, *args, **kwargs):
        return self._remote.call(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<solution function {self.__name__}>"


def _short(e: BaseException) -> str:
    msg = str(e)
    if isinstance(e, AssertionError) and not msg:
        tb = traceback.extract_tb(e.__traceback__)
        line = next((f for f in reversed(tb) if f.filename == "<tests>"), None)
        return f"assertion failed at tests line {line.lineno}" if line else "assertion failed"
    return f"{type(e).__name__}: {msg}"[:ERR_LEN]


def _solution_namespace(item: Item, remote: Remote, entry: str | None) -> tuple[types.ModuleType, dict]:
    """The ``solution`` module the tests may import (every name a proxy or data from C, a missing one a proxy
    that fails when called) and the namespace the tests run in (the names they may see, and ``candidate``)."""
    module = types.ModuleType(item.get("module") or "solution")
    ns: dict = {"__name__": "__tests__", "__builtins__": builtins}
    for name, value in remote.data.items():
        setattr(module, name, value)
        if _visible(name, entry):
            ns[name] = value
    for name in remote.callables:
        proxy = Proxy(remote, name)
        setattr(module, name, proxy)
        if _visible(name, entry):
            ns[name] = proxy
    if entry:
        ns["candidate"] = ns.get(entry) or Proxy(remote, entry)

    def missing_name(name: str):  # `from solution import f` works even when f is missing: calling it fails
        if name.startswith("__"):
            raise AttributeError(name)
        return Proxy(remote, name)

    module.__getattr__ = missing_name
    return module, ns


def _run_tests(item: Item, remote: Remote, out: dict, results: list) -> None:
    """Count the tests into ``out["total"]``, then fill ``results`` with (name, passed, error) as
    they finish, so that a deadline keeps what ran and the unrun ones still count as failed."""
    tests, entry = item["tests"], item.get("entry_point")
    style = item.get("style") or "auto"
    tree = ast.parse(tests, "<tests>")  # a SyntaxError here is the task's fault
    if style == "auto":
        style = _detect_style(tree, entry)
    module, ns = _solution_namespace(item, remote, entry)
    sys.modules[module.__name__] = module
    try:
        if style == "asserts":
            out["total"] = sum(isinstance(n, ast.Assert) for n in tree.body)
            if not out["total"]:
                raise ValueError("the tests contain no top-level assert statement")
            _run_asserts(tree, ns, results)
        elif style == "check" and item.get("split"):
            _run_split_check(tree, entry, ns, out, results)
        elif style == "check":
            _run_check(tree, entry, ns, out, results)
        else:
            _run_pytest_style(tree, ns, out, results)
    finally:
        sys.modules.pop(module.__name__, None)


def _run_check(tree: ast.Module, entry: str | None, ns: dict, out: dict, results: list) -> None:
    """``check(candidate)`` as one test."""
    out["total"] = 1
    try:
        exec(compile(tree, "<tests>", "exec"), ns)
    except ItemDeadline:
        raise
    except BaseException as e:  # noqa: BLE001 - set-up of the tests called the solution and failed
        results.append((f"check({entry})", False, _short(e)))
        return
    if not callable(ns.get("check")):
        raise ValueError("the tests define no check(candidate) function")
    _one(f"check({entry})", lambda: ns["check"](ns["candidate"]), results)


def _run_pytest_style(tree: ast.Module, ns: dict, out: dict, results: list) -> None:
    """Each ``test_*`` function (and each of its parametrized cases) as one test; module level is set-up."""
    try:
        exec(compile(tree, "<tests>", "exec"), ns)
    except ItemDeadline:
        raise
    except BaseException as e:  # noqa: BLE001 - set-up that uses the solution failed: every test fails
        names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name.startswith("test")]
        out["total"] = len(names)
        results.extend((n, False, f"module set-up failed: {_short(e)}") for n in names)
        return
    cases = [case for name, fn in list(ns.items())
             if name.startswith("test") and isinstance(fn, types.FunctionType)
             for case in _pytest_cases(name, fn, ns)]
    out["total"] = len(cases)
    if not cases:
        raise ValueError("the tests define no test_* function")
    for case_name, call in cases:
        _one(case_name, call, results)


def _run_split_check(tree: ast.Module, entry: str | None, ns: dict, out: dict, results: list) -> None:
    """``check(candidate)`` with each top-level statement of its body that contains an ``assert``
    counted as one test; other statements are set-up, and a failing one fails the tests after it."""
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        raise ValueError("the tests define no check(candidate) function")
    names: list[str] = []
    body = []
    for st in check.body:
        if any(isinstance(x, ast.Assert) for x in ast.walk(st)):
            names.append(f"check line {st.lineno}")
            wrap = ast.parse(f"try:\n    pass\nexcept __deadline__:\n    raise\nexcept BaseException as __e:\n"
                             f"    __record__({len(names) - 1}, __e)\nelse:\n    __record__({len(names) - 1}, None)\n").body[0]
            wrap.body = [st]
            ast.copy_location(wrap, st)
            body.append(wrap)
        else:
            body.append(st)
    check.body = body
    ast.fix_missing_locations(tree)
    out["total"] = len(names)
    if not names:
        raise ValueError("check(candidate) contains no assert")
    done: set[int] = set()

    def record(i: int, e: BaseException | None) -> None:
        done.add(i)
        results.append((names[i], e is None, "" if e is None else _short(e)))

    ns["__record__"], ns["__deadline__"] = record, ItemDeadline
    try:
        exec(compile(tree, "<tests>", "exec"), ns)
        ns["check"](ns["candidate"])
        why = "not reached"
    except ItemDeadline:
        raise
    except BaseException as e:  # noqa: BLE001 - set-up inside check failed
        why = f"not reached: {_short(e)}"
    results.extend((n, False, why) for i, n in enumerate(names) if i not in done)


def _visible(name: str, entry: str | None) -> bool:
    """Whether a name the solution defines joins the tests' globals: never one that would shadow a
    builtin the tests rely on (a solution's own ``isinstance`` or ``abs``), nor a dunder."""
    return name == entry or not (name.startswith("__") or hasattr(builtins, name) or name in ("candidate", "check"))


def _detect_style(tree: ast.Module, entry_point: str | None) -> str:
    defs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "check" in defs and entry_point:
        return "check"
    if any(n.startswith("test") for n in defs):
        return "pytest"
    return "asserts"


def _pytest_cases(name: str, fn, ns: dict) -> list:
    """A test function, or one case per row of its ``pytest.mark.parametrize`` marks."""
    params = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    marks = [m for m in getattr(fn, "pytestmark", []) if getattr(m, "name", "") == "parametrize"]
    if not marks:
        return [(name, lambda: fn(*(ns.get("candidate") for _ in params)))]
    rows: list[dict] = [{}]
    for m in marks:
        argnames, values = m.args[0], m.args[1]
        names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        rows = [{**row, **dict(zip(names, (v,) if len(names) == 1 else tuple(v)))}
                for row in rows for v in (getattr(v, "values", v) for v in values)]
    cases = []
    for i, row in enumerate(rows):
        kwargs = {p: row[p] if p in row else ns.get("candidate") for p in params}
        cases.append((f"{name}[{i}]", lambda kw=kwargs: fn(**kw)))
    return cases


def _one(name: str, call, results: list) -> None:
    try:
        call()
        results.append((name, True, ""))
    except ItemDeadline:
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit from tests included: a failed test
        results.append((name, False, _short(e)))


def _run_asserts(tree: ast.Module, ns: dict, results: list) -> None:
    """Each top-level ``assert`` is one test; other statements are set-up run in order."""
    broken: str | None = None
    for node in tree.body:
        code = compile(ast.Module(body=[node], type_ignores=[]), "<tests>", "exec")
        if isinstance(node, ast.Assert):
            if broken is not None:
                results.append((f"line {node.lineno}", False, broken))
            else:
                _one(f"line {node.lineno}", lambda c=code: exec(c, ns), results)
        elif broken is None:
            try:
                exec(code, ns)
            except ItemDeadline:
                raise
            except BaseException as e:  # noqa: BLE001
                broken = f"set-up at line {node.lineno} failed: {_short(e)}"


def _others() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()} - _CORE_PIDS


def _clean_slate() -> None:
    """Kill every process but init, H and Z; empty the writable directories."""
    if os.getpid() != 2 or not os.path.exists("/work"):  # only as the task of a sandbox's own PID namespace
        raise RuntimeError("refusing to clean up outside a sandbox")
    killed: set[int] = set()
    for _ in range(200):
        new = _others() - killed
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed |= new
    # Where the bound runtimes are NOW: a solution may have renamed a writable ancestor of one (the
    # mount moves with it) and built a look-alike at the old path, which must go like any planted file.
    _KEPT_MOUNTS.clear()
    _KEPT_MOUNTS.update(_writable_mounts())
    for top in ("/work", "/tmp", "/dev/shm"):
        _empty(top)


def _writable_mounts() -> list[str]:
    """Mount points inside the mounts now at /work, /tmp and /dev/shm: the runtimes bound read-only there
    (a task cannot mount anything in this namespace, and the kernel reports a moved mount at its current
    path). Not those of the server's root that the task's fresh mounts cover, listed at the same paths."""
    rows = _mount_points()
    tops = {m: mid for mid, _, m in rows if m in ("/work", "/tmp", "/dev/shm")}  # the last one mounted is seen
    parent = {mid: par for mid, par, _ in rows}
    out = []
    for mid, par, m in rows:
        seen: set[int] = set()
        while par in parent and par not in seen and par not in tops.values():
            seen.add(par)
            par = parent[par]
        if par in tops.values() and mid not in tops.values():
            out.append(m)
    return out


def _empty(top: str) -> None:
    """Remove everything under ``top`` but the runtimes bound read-only there (``_KEPT_MOUNTS``)."""
    try:
        entries = os.listdir(top)
    except OSError:
        return
    for e in entries:
        path = os.path.join(top, e)
        if path in _KEPT_MOUNTS:
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                if any(m.startswith(path + "/") for m in _KEPT_MOUNTS):
                    _empty(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _mount_points() -> list[tuple[int, int, str]]:
    """(mount id, parent id, mount point) of this mount namespace, in mount order
    (``/proc/self/mountinfo``, octal escapes decoded)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            rows = [line.split()[:5] for line in f if len(line.split()) > 4]
    except OSError:
        return []
    out = []
    for mid, parent, _, _, m in rows:
        for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
            m = m.replace(code, ch)
        out.append((int(mid), int(parent), m))
    return out


def _on_alarm(signum, frame):
    raise ItemDeadline()


def run_item(item: Item, zygote: socket.socket) -> dict:
    """Load one program in a fresh C and run its tests in this process; the item's report."""
    remote = Remote(zygote, item["program"], item.get("module") or "solution", float(item["call_timeout_s"]))
    results: list = []
    out: dict = {"id": item["id"]}
    signal.setitimer(signal.ITIMER_REAL, float(item["timeout_s"]))
    try:
        loaded = remote.start()  # ZygoteLost here is not this item's doing: no report, the manager re-runs it
        if not loaded:
            out["load_error"] = remote.load_error
            remote = _Dead(remote.load_error or "load failed")  # every test still counts, and fails
        _run_tests(item, remote, out, results)
    except ItemDeadline:
        out["deadline"] = True
    except ZygoteLost:
        raise
    except (SyntaxError, ValueError) as e:  # the tests themselves are broken: the task's fault
        out["harness_error"] = f"bad tests: {type(e).__name__}: {e}"[:ERR_LEN]
    except BaseException as e:  # noqa: BLE001
        out["harness_error"] = f"{type(e).__name__}: {e}"[:ERR_LEN]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        remote.kill()
    failed = 0
    out["tests"] = []
    for n, ok, err in results:  # error texts for the first failures only: the report stays small
        failed += not ok
        out["tests"].append({"name": n[:200], "passed": ok, "error": err if failed <= 20 else ""})
    return out


class _Dead(Remote):
    """Stands in for a C whose program did not load: every call fails."""

    def __init__(self, reason: str):
        self.callables, self.data, self.reason = [], {}, reason
        self.sock, self.pid = None, 0

    def call(self, name, args, kwargs=None):
        raise CandidateCrashed(f"the solution did not load: {self.reason}")


def _held_read_only(path: str) -> str | None:
    """``path`` as ``/proc/self/fd/N`` of a descriptor opened now, while no untrusted code exists,
    if it is a directory on a read-only mount; else None.

    Why not the path itself: the mount point cannot be renamed (EBUSY), but its ancestors below
    /tmp are plain directories of the writable tmpfs, and renaming one of them moves the mount
    away, so a solution could then build a look-alike tree (a planted ``pytest.py``) at the old
    path before the tests import from it. The descriptor stays on the mount whatever is renamed."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    if not os.fstatvfs(fd).f_flag & os.ST_RDONLY:
        os.close(fd)
        return None
    return f"/proc/self/fd/{fd}"


def _harden() -> None:
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError("prctl(PR_SET_DUMPABLE, 0) failed")
    writable = ("/work", "/tmp", "/dev/shm", "/proc")
    _TASK_PATH[:] = [p for p in sys.path if p and p != "."]
    _KEPT_MOUNTS.update(_writable_mounts())
    kept = []
    for p in _TASK_PATH:
        if not any(p == w or p.startswith(w + "/") for w in writable):
            kept.append(p)  # the read-only root: no task can change what it names
        elif any(p == m or p.startswith(m + "/") for m in _KEPT_MOUNTS):
            held = _held_read_only(p)  # a runtime bound read-only under /tmp (a virtual environment there)
            if held is not None:
                kept.append(held)
    sys.path[:] = kept
    sys.path_importer_cache.clear()
    std = {"BuiltinImporter", "FrozenImporter", "PathFinder"}
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__name__", type(f).__name__) in std]
    os.chdir("/")
    sys.dont_write_bytecode = True


def main() -> None:
    for sig in _QUIET_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    _harden()
    report = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - tests' prints go nowhere
    ctl_h, ctl_z = socket.socketpair()
    zpid = os.fork()
    if zpid == 0:
        try:
            ctl_h.close()
            os.close(report)
            _zygote(ctl_z, memory_bytes=int(os.environ.get("POSTTRAIN_CHILD_MB", "0")) << 20)
        finally:
            os._exit(0)
    ctl_z.close()
    _CORE_PIDS.update({1, os.getpid(), zpid})
    job: Job = json.loads(sys.stdin.buffer.read())  # read only now: Z and every C never hold it
    nonce = job["nonce"]
    signal.signal(signal.SIGALRM, _on_alarm)
    for i, item in enumerate(job["items"]):
        if i:
            _clean_slate()
            try:
                os.kill(zpid, signal.SIGCONT)
            except ProcessLookupError:
                break  # Z is gone: the manager re-runs what has no report
        try:
            out = run_item(item, ctl_h)
        except ZygoteLost:
            break
        except BaseException as e:  # noqa: BLE001
            out = {"id": item["id"], "harness_error": f"{type(e).__name__}: {e}"[:ERR_LEN], "tests": []}
        line = f"{nonce} {json.dumps(out, allow_nan=True)}\n".encode()
        while line:
            line = line[os.write(report, line):]
    os.write(report, f"{nonce} DONE\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
