"""The test bootstrap of published tasks, satisfied inside the sandbox: `apt-get`, `curl | sh` for uv, `uv`, `uvx`, `pip`.

Runs in the sandbox (stdlib only), as the command each name on the verifier's PATH stands for
(`tasks/harbor_bootstrap.py` writes it and its wrappers to `/work/.harbor/bin` for the tests only). Published test
scripts start with `apt-get update; apt-get install -y curl`, `curl -LsSf https://astral.sh/uv/.../install.sh | sh`,
`uv venv` / `uv init` / `uv add pytest==8.4.1` / `uv pip install ...`, then `uv run pytest` or
`uvx --with pytest==8.4.1 pytest ...`. Here:
- `apt-get update` does nothing; `apt-get install P...` succeeds when each package is on the host (its command on
  PATH or `/usr/share/doc/P`), else fails as apt does (exit 100);
- `curl` of uv's installer prints a script that only writes `$HOME/.local/bin/env` (the sandbox's uv is used);
  any other `curl` / `wget` is the real one (offline, it fails as it would);
- `uv venv` makes a virtual environment over the sandbox's Python (its packages visible), `uv init` a bare
  pyproject.toml; `uv add` / `uv pip install` / `pip install` / `uvx --with` check that each requirement is
  installed (a different version is used and said; a missing one fails, exit 1); `uv run CMD` / `uvx CMD` run the
  local CMD (`python -m CMD` when CMD is a module, as pytest). Only when a requirement is missing, with
  `POSTTRAIN_NETWORK=1` and a real `uv` on the host, is the command handed to that uv (which may fetch it from
  the package index): tools already present are never fetched.
Every substitution is one line in `/work/.harbor/bootstrap.log`, which the verifier puts in the verdict.
Does not cover: installing anything (nothing is fetched offline), `apt-get` with network (the root is read-only).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

LOG = "/work/.harbor/bootstrap.log"
SHIM_DIR = os.path.dirname(os.path.abspath(__file__))
# Debian packages whose command has another name
_PKG_COMMAND = {"build-essential": "gcc", "python3-pip": "python3", "python3-venv": "python3", "python3-dev": "python3",
                "python-is-python3": "python3", "procps": "ps", "coreutils": "ls", "ca-certificates": "ls",
                "sqlite3": "sqlite3", "git": "git", "xz-utils": "xz", "bsdmainutils": "column", "gnupg": "gpg"}


def log(line: str) -> None:
    try:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(line.rstrip() + "\n")
    except OSError:
        pass


def real(name: str) -> str | None:
    """`name` on PATH, skipping this shim's directory."""
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.abspath(d or ".") != SHIM_DIR)
    return shutil.which(name, path=path)


def apt(args: list[str]) -> int:
    words = [a for a in args if not a.startswith("-")]
    if not words or words[0] in ("update", "upgrade", "clean", "autoremove", "autoclean"):
        log(f"apt-get {' '.join(args)}: skipped (the sandbox uses the host's packages)")
        return 0
    if words[0] != "install":
        log(f"apt-get {' '.join(args)}: not supported here")
        return 100
    missing = []
    for pkg in words[1:]:
        name = re.split(r"[=:]", pkg)[0]
        if real(_PKG_COMMAND.get(name, name)) or os.path.isdir(f"/usr/share/doc/{name}"):
            continue
        missing.append(name)
    present = [p for p in words[1:] if re.split(r"[=:]", p)[0] not in missing]
    if present:
        log(f"apt-get install {' '.join(present)}: already on the host, not fetched")
    if missing:
        log(f"apt-get install {' '.join(missing)}: not on the host, cannot be installed here")
        print(f"E: Unable to locate package {missing[0]} (posttrain sandbox: packages are the host's)", file=sys.stderr)
        return 100
    return 0


_UV_INSTALLER = """mkdir -p "$HOME/.local/bin"
printf 'export PATH="$HOME/.local/bin:$PATH"\\n' > "$HOME/.local/bin/env"
echo "uv: the sandbox's own uv is used (posttrain)"
"""


def fetch(name: str, args: list[str]) -> int:
    urls = [a for a in args if re.match(r"https?://", a)]
    if any(re.search(r"astral\.sh/uv/|/uv/releases/.*install", u) for u in urls):
        log(f"{name} {urls[0]}: uv's installer replaced (the sandbox's uv is used)")
        out = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-o", "--output", "-O")), None)
        if out:
            with open(out, "w", encoding="utf-8") as f:
                f.write(_UV_INSTALLER)
        else:
            sys.stdout.write(_UV_INSTALLER)
        return 0
    exe = real(name)
    if exe is None:
        print(f"{name}: not on the host (posttrain sandbox)", file=sys.stderr)
        return 127
    os.execv(exe, [name, *args])
    return 126


def _requirement(spec: str) -> tuple[str, str | None]:
    m = re.match(r"\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(?:==\s*([^\s,;]+))?", spec)
    return (m.group(1), m.group(2)) if m else (spec, None)


def check(specs: list[str], what: str) -> int:
    from importlib import metadata

    missing = []
    for spec in specs:
        name, wanted = _requirement(spec)
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(spec)
            continue
        same = wanted is None or wanted == have
        log(f"{what} {spec}: {'installed' if same else 'not fetched; the installed'} {name} {have}"
            f"{'' if same else ' is used'}")
    if missing:
        log(f"{what} {' '.join(missing)}: not installed on the host, cannot be fetched offline")
        print(f"error: offline: {', '.join(missing)} not installed (posttrain sandbox)", file=sys.stderr)
        return MISSING
    return 0


def _pip_specs(args: list[str]) -> list[str]:
    specs, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-r", "--requirement"):
            skip = True  # requirement files are read below
            continue
        if a in ("-e", "--editable", "-c", "--constraint", "-i", "--index-url", "--extra-index-url", "--python",
                 "-p", "--target", "-t", "--prefix"):
            skip = True
            continue
        if not a.startswith("-") and not a.startswith(("/", ".")):
            specs.append(a)
    for i, a in enumerate(args[:-1]):
        if a in ("-r", "--requirement") and os.path.isfile(args[i + 1]):
            with open(args[i + 1], encoding="utf-8") as f:
                specs += [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip() and not ln.startswith("-")]
    return specs


def run_local(argv: list[str]) -> int:
    """Run `argv` with the local tools: a Python module (pytest) as `python -m`."""
    if not argv:
        return 0
    cmd = argv[0]
    python = real("python3") or sys.executable
    if cmd in ("python", "python3"):
        os.execv(python, [python, *argv[1:]])
    exe = real(cmd)
    if exe is None or cmd in ("pytest", "py.test"):
        from importlib.util import find_spec

        module = "pytest" if cmd == "py.test" else cmd.replace("-", "_")
        if find_spec(module) is not None:
            os.execv(python, [python, "-m", module, *argv[1:]])
        print(f"{cmd}: not installed (posttrain sandbox)", file=sys.stderr)
        return 127
    os.execv(exe, argv)
    return 126


def _withs(args: list[str]) -> tuple[list[str], list[str]]:
    """(requirements of --with/--from, the command and its arguments) of `uvx` / `uv run` options."""
    withs, rest, i = [], list(args), 0
    while i < len(rest):
        a = rest[i]
        if a in ("--with", "-w", "--from", "--with-requirements", "--python", "-p", "--directory", "--project",
                 "--env-file", "--index-url", "--extra-index-url"):
            if a in ("--with", "-w", "--from") and i + 1 < len(rest):
                withs += [x for x in rest[i + 1].split(",") if x]
            del rest[i:i + 2]
        elif a.startswith(("--with=", "--from=")):
            withs += [x for x in a.split("=", 1)[1].split(",") if x]
            del rest[i]
        elif a == "--":
            del rest[i]
            break
        elif a.startswith("-"):
            del rest[i]
        else:
            break
    return withs, rest


def online(argv: list[str]) -> int:
    """A requirement is missing: hand `argv` (a uv command line) to the host's uv when the network is on."""
    exe = real("uv")
    if os.environ.get("POSTTRAIN_NETWORK") != "1" or exe is None:
        return 1
    log(f"{' '.join(argv)[:120]}: a requirement is missing; the host's uv fetches it (network on)")
    os.execv(exe, argv)
    return 126


def uv(args: list[str], tool: bool) -> int:
    rc = _uv(args, tool)
    if rc == MISSING:
        return online(["uv", *(["tool", "run"] if tool else []), *args])
    return rc


MISSING = 200  # what `check` returns for a missing requirement (uv / pip then exit 1, or go online)


def _uv(args: list[str], tool: bool) -> int:
    if tool:
        withs, rest = _withs(args)
        if rest:
            withs = [w for w in withs if _requirement(w)[0] != rest[0]]
        rc = check(withs, "uvx --with") if withs else 0
        log(f"uvx {' '.join(rest)[:120]}: the local {rest[0] if rest else '?'}")
        return rc or run_local(rest)
    sub = args[0] if args else ""
    rest = args[1:]
    if sub in ("--version", "-V", "version"):
        print("uv 0.0.0 (posttrain sandbox stand-in)")
        return 0
    if sub == "venv":
        path = next((a for a in rest if not a.startswith("-")), ".venv")
        python = real("python3") or sys.executable
        log(f"uv venv {path}: a virtual environment over the sandbox's Python (its packages visible)")
        return subprocess.call([python, "-m", "venv", "--system-site-packages", "--without-pip", path])
    if sub == "init":
        if not os.path.exists("pyproject.toml"):
            name = re.sub(r"[^A-Za-z0-9_-]", "-", os.path.basename(os.getcwd()) or "project")
            with open("pyproject.toml", "w", encoding="utf-8") as f:
                f.write(f'[project]\nname = "{name}"\nversion = "0.1.0"\nrequires-python = ">=3.8"\ndependencies = []\n')
        log("uv init: a bare pyproject.toml")
        return 0
    if sub == "add":
        return check([a for a in rest if not a.startswith("-")], "uv add")
    if sub == "pip":
        if rest and rest[0] == "install":
            return check(_pip_specs(rest[1:]), "uv pip install")
        return subprocess.call([real("python3") or sys.executable, "-m", "pip", *rest])
    if sub in ("sync", "lock"):
        log(f"uv {sub}: nothing to do (the sandbox's packages are used)")
        return 0
    if sub == "run":
        withs, cmd = _withs(rest)
        rc = check(withs, "uv run --with") if withs else 0
        log(f"uv run {' '.join(cmd)[:120]}: the local {cmd[0] if cmd else '?'}")
        return rc or run_local(cmd)
    if sub == "tool" and rest[:1] == ["run"]:
        return _uv(rest[1:], tool=True)
    log(f"uv {' '.join(args)[:120]}: not supported here")
    print(f"uv {sub}: not supported in the posttrain sandbox", file=sys.stderr)
    return 2


def pip(args: list[str]) -> int:
    if args[:1] == ["install"]:
        rc = check(_pip_specs(args[1:]), "pip install")
        if rc == MISSING:
            return online(["uv", "pip", "install", "--python", real("python3") or sys.executable, *args[1:]])
        return rc
    return subprocess.call([real("python3") or sys.executable, "-m", "pip", *args])


def main(argv: list[str]) -> int:
    name, args = os.path.basename(argv[1]), argv[2:]
    if name in ("apt-get", "apt"):
        return apt(args)
    if name in ("curl", "wget"):
        return fetch(name, args)
    if name in ("uv", "uvx"):
        return uv(args, tool=name == "uvx")
    if name in ("pip", "pip3"):
        return pip(args)
    print(f"bootstrap shim: unknown name {name}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
