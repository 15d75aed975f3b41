"""The workspace a task's Dockerfile describes, as a plan the sandbox can apply without building the image.

Covers: `plan_workspace(dockerfile, context)` -> `BuildPlan`, the ordered steps that shape `/app` (Harbor's
workspace): `COPY`/`ADD` of local files (sources globbed against the build context, destinations relative to
`WORKDIR`, `--chown`), `RUN` steps (or the parts of an `&&` chain) whose commands the sandbox has, with the
`WORKDIR` and `ENV` in force at that line; the final `WORKDIR` and `ENV` (the agent's and the tests'). What
cannot be applied without the image (package installs, downloads, user management, paths outside `/app`,
multi-stage `--from`, remote `ADD`) is listed in `BuildPlan.skipped`, one line each naming the Dockerfile
line; `tasks validate` prints them per task. Parsing (line continuations, JSON-form arguments) is
`dockerfile-parse`'s; `$VAR` / `${VAR}` substitution from `ARG` and `ENV` is done here.
Does not cover: running the plan (`tasks/harbor_workspace.py` `open_workspace`), `.dockerignore` beyond
plain patterns, `ONBUILD`, heredoc `RUN <<EOF` (skipped, reported), building an image (a container back end).
"""

from __future__ import annotations

import fnmatch
import io
import json
import posixpath
import re
import shlex
import shutil
from dataclasses import dataclass, field

WORKSPACE_ROOT = "/app"  # the sandbox's workspace: everything the plan writes must lie under it
DEFAULT_WORKDIR = "/app"  # Docker's default is "/", where nothing can be written here; Harbor tasks use /app

# First words of commands that fetch or install software, or change the system outside the workspace: the
# sandbox runs on the host's read-only tools, so these are reported, never run.
INSTALLERS = frozenset({
    "apt-get", "apt", "aptitude", "dpkg", "dpkg-reconfigure", "apk", "yum", "dnf", "microdnf", "zypper", "pacman",
    "pip", "pip3", "pipx", "uv", "uvx", "poetry", "conda", "mamba", "micromamba", "npm", "npx", "yarn", "pnpm",
    "corepack", "cargo", "rustup", "go", "gem", "bundle", "curl", "wget", "add-apt-repository",
    "update-alternatives", "useradd", "userdel", "usermod", "groupadd", "adduser", "addgroup", "locale-gen",
    "update-locale", "ln-sf-usr", "sudo", "su", "service", "systemctl", "snap", "nvm", "sdk", "opam", "cpan",
    "cpanm", "R", "Rscript", "julia", "dotnet", "mvn", "gradle", "install", "ldconfig", "update-ca-certificates",
})
_BUILTINS = frozenset({"cd", "export", "set", "true", "false", ":", "echo", "printf", "test", "[", "exit", "umask",
                       "for", "do", "done", "if", "then", "else", "elif", "fi", "while", "case", "esac", "unset",
                       "{", "}", "(", ")", "!", "source", ".", "shopt", "read", "local", "return"})
_PY_INSTALL = re.compile(r"\bpython[\d.]*\s+-m\s+(pip|venv|ensurepip)\b")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class CopyStep:
    """Files placed by one COPY/ADD: destination paths relative to `/app`."""

    files: dict[str, bytes]
    executable: frozenset[str]
    dirs: tuple[str, ...] = ()
    """Destination directories to create even when empty (relative to `/app`; "" is /app itself)."""
    chown: str | None = None
    line: int = 0


@dataclass(frozen=True)
class RunStep:
    """A shell command to run at build time, in `workdir` with `env` exported (what Docker's `RUN` would)."""

    command: str
    workdir: str
    env: dict[str, str]
    line: int = 0


@dataclass(frozen=True)
class BuildPlan:
    steps: tuple[CopyStep | RunStep, ...]
    workdir: str = DEFAULT_WORKDIR
    """The final WORKDIR: where the agent's commands and the tests start."""
    env: dict[str, str] = field(default_factory=dict)
    """The final ENV: exported to the agent's commands, the oracle and the tests."""
    skipped: tuple[str, ...] = ()
    """What the sandbox did not apply, one line each ("Dockerfile:12: RUN apt-get ...: package install")."""
    base_image: str = ""


def substitute(text: str, variables: dict[str, str]) -> str:
    """`$VAR`, `${VAR}` and `${VAR:-default}` as Docker expands them in instructions (unknown: empty)."""
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        value = variables.get(name)
        return value if value else (m.group(2) or "") if m.group(1) else (value or "")
    return _VAR.sub(one, text)


def _key_values(value: str, legacy_space: bool) -> dict[str, str]:
    """`ENV a=b c="d e"` or the legacy `ENV key value with spaces`."""
    if legacy_space and "=" not in value.split(None, 1)[0]:
        key, _, rest = value.partition(" ")
        return {key: rest.strip()}
    out = {}
    for token in shlex.split(value, posix=True):
        key, sep, val = token.partition("=")
        if sep:
            out[key] = val
        elif not legacy_space:
            out[key] = ""  # ARG without a default
    return out


def _args(value: str) -> list[str]:
    """An instruction's arguments: JSON form (`["a", "b"]`) or whitespace-separated."""
    stripped = value.strip()
    if stripped.startswith("["):
        try:
            parsed = json.loads(stripped)
            if isinstance(parsed, list) and all(isinstance(x, str) for x in parsed):
                return parsed
        except ValueError:
            pass
    return shlex.split(value, posix=True)


def _ignored(patterns: list[str], rel: str) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.strip("/")
        if fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(rel, pat + "/*") or rel.startswith(pat + "/"):
            ignored = not negate
    return ignored


def _in_workspace(path: str) -> str | None:
    """`path` (absolute, normalised) relative to /app, or None when it lies outside."""
    if path == WORKSPACE_ROOT:
        return ""
    if path.startswith(WORKSPACE_ROOT + "/"):
        return path[len(WORKSPACE_ROOT) + 1:]
    return None


def command_words(command: str) -> list[list[str]] | None:
    """The `&&`/`;`/`||`-separated parts of a shell command, each as the first words of its pipeline's
    commands (environment assignments skipped); None when the command cannot be tokenised."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    parts: list[list[str]] = [[]]
    expect_word = True
    for tok in tokens:
        if tok in ("&&", "||", ";", "\n", "&"):
            parts.append([])
            expect_word = True
        elif tok in ("|", "(", ")"):
            expect_word = True
        elif tok in ("<", ">", ">>", "<<", ">&", "2>", "<<<"):
            expect_word = False  # the next token is a file name
        elif expect_word:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tok):
                continue
            parts[-1].append(tok)
            expect_word = False
        elif tok in ("then", "do", "else"):
            expect_word = True
    return [p for p in parts if p]


def split_parts(command: str) -> list[str] | None:
    """`a && b; c` -> ["a", "b", "c"] at the top level (quotes respected); None when it is not that simple."""
    out, buf, quote, i = [], [], "", 0
    while i < len(command):
        ch = command[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and quote == '"' and i + 1 < len(command):
                buf.append(command[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            buf.append(ch)
        elif ch == "\\" and i + 1 < len(command):
            buf.append(command[i:i + 2])
            i += 1
        elif command.startswith("&&", i) or ch == ";" or ch == "\n":
            out.append("".join(buf).strip())
            buf = []
            i += 1 if ch != "&" else 2
            continue
        elif ch in "({`" or command.startswith("||", i) or command.startswith("$(", i):
            return None  # a sub-shell, a group or alternatives: keep the step whole
        else:
            buf.append(ch)
        i += 1
    if quote:
        return None
    out.append("".join(buf).strip())
    return [p for p in out if p]


def why_not_run(words: list[str], have: object = shutil.which) -> str | None:
    """Why a command (its pipeline's first words) cannot run in the sandbox, or None when it can."""
    for word in words:
        name = posixpath.basename(word)
        if name in INSTALLERS:
            return f"{name}: installs or fetches software"
        if name in _BUILTINS:
            continue
        if callable(have) and have(name) is None and not word.startswith(("/app", "./")):
            return f"{name}: not in the sandbox"
    return None


def plan_workspace(dockerfile: str, context: dict[str, bytes], executable: frozenset[str] = frozenset(), *,
                   name: str = "Dockerfile", hidden: frozenset[str] = frozenset(),
                   dockerignore: str = "", have: object = shutil.which) -> BuildPlan:
    """The plan of `dockerfile` over the build `context` (relative path -> bytes; `executable` the paths with
    the x bit). Paths in `hidden` (a task's tests and solution) are never copied in, whatever COPY says."""
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.encode()))
    ignore = [ln.strip() for ln in dockerignore.splitlines() if ln.strip() and not ln.startswith("#")]
    visible = {rel: data for rel, data in context.items()
               if rel not in hidden and not any(rel.startswith(h + "/") for h in hidden) and not _ignored(ignore, rel)}
    planner = _Planner(visible, executable, have)
    for ins in parser.structure:
        line = ins["startline"] + 1
        planner.read(ins["instruction"], ins["value"], line, f"{name}:{line}")
    return BuildPlan(tuple(planner.steps), planner.workdir, planner.env, tuple(planner.skipped), planner.base)


@dataclass
class _Planner:
    """A Dockerfile's state as its instructions are read in order: the steps so far, what is skipped, the `ARG`
    and `ENV` values, `WORKDIR`, and the base image of the current build stage."""

    context: dict[str, bytes]
    """The build context COPY can see (hidden and ignored files removed)."""
    executable: frozenset[str]
    have: object
    steps: list[CopyStep | RunStep] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = DEFAULT_WORKDIR
    base: str = ""
    stages: int = 0

    def read(self, kind: str, value: str, line: int, where: str) -> None:
        """Apply one instruction (`where` names its line in skipped notes)."""
        variables = {**self.args, **self.env}
        if kind == "COMMENT":
            return
        if kind == "FROM":
            self.new_stage(value, where)
        elif kind == "ARG":
            for k, v in _key_values(value, legacy_space=False).items():
                self.args.setdefault(k, substitute(v, variables))
        elif kind == "ENV":
            for k, v in _key_values(value, legacy_space=True).items():
                self.env[k] = substitute(v, variables)
        elif kind == "WORKDIR":
            self.change_workdir(substitute(value.strip(), variables), line, where)
        elif kind in ("COPY", "ADD"):
            step = _copy(kind, substitute(value, variables), self.workdir, self.context, self.executable, where,
                         self.skipped)
            if step is not None:
                self.steps.append(CopyStep(step.files, step.executable, step.dirs, step.chown, line))
        elif kind == "RUN":
            run = _run(value, where, self.skipped, self.have)
            if run:
                self.steps.append(RunStep(run, self.workdir, dict(self.env), line))
        elif kind in ("CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
                      "VOLUME"):
            if kind in ("ENTRYPOINT", "CMD", "USER", "SHELL", "VOLUME"):
                self.skipped.append(f"{where}: {kind} {value}: not applied (no container process runs it here)")
        elif kind == "USER":
            self.skipped.append(f"{where}: USER {value}: commands run as root of the sandbox's own namespace")
        else:
            self.skipped.append(f"{where}: {kind} {value}: not supported")

    def new_stage(self, value: str, where: str) -> None:
        """`FROM`: the base image; a second stage starts the workspace over (only the last stage is placed)."""
        self.stages += 1
        self.base = value.split()[0] if value.split() else ""
        if self.stages == 2:
            self.skipped.append(f"{where}: a second build stage (FROM {value}): only the last stage's files are "
                                "placed, and the files of earlier stages are not built")
            self.steps, self.env, self.workdir = [], {}, DEFAULT_WORKDIR

    def change_workdir(self, path: str, line: int, where: str) -> None:
        """`WORKDIR` (relative to the current one): made, and where commands start, when it lies under /app."""
        new = posixpath.normpath(posixpath.join(self.workdir, path))
        if _in_workspace(new) is None:
            self.skipped.append(f"{where}: WORKDIR {new} lies outside /app, the sandbox's workspace: commands start in /app")
        else:
            self.workdir = new
            self.steps.append(CopyStep({}, frozenset(), dirs=(_in_workspace(new) or "",), line=line))


def _copy(kind: str, value: str, workdir: str, context: dict[str, bytes], executable: frozenset[str], where: str,
          skipped: list[str]) -> CopyStep | None:
    words = _args(value)
    chown = None
    flags = [w for w in words if w.startswith("--")]
    words = [w for w in words if not w.startswith("--")]
    for flag in flags:
        if flag.startswith("--from="):
            skipped.append(f"{where}: {kind} {value}: files from another build stage or image are not available")
            return None
        if flag.startswith("--chown="):
            chown = flag.split("=", 1)[1]
    if len(words) < 2:
        skipped.append(f"{where}: {kind} {value}: needs a source and a destination")
        return None
    *sources, dest = words
    dest_abs = posixpath.normpath(posixpath.join(workdir, dest))
    dest_rel = _in_workspace(dest_abs)
    if dest_rel is None:
        skipped.append(f"{where}: {kind} {value}: {dest_abs} lies outside /app, the sandbox's workspace")
        return None
    # Docker copies into a directory when the destination ends in "/" (or is "."), and onto an existing
    # directory (WORKDIR, /app) as into it.
    into_dir = dest.endswith("/") or dest in (".", "..") or dest_abs in (workdir, WORKSPACE_ROOT) or len(sources) > 1
    files: dict[str, bytes] = {}
    execs: set[str] = set()
    dirs: list[str] = []
    for src in sources:
        if re.match(r"^[a-z]+://", src):
            skipped.append(f"{where}: {kind} {src}: a download")
            continue
        src_norm = "." if src.strip("/") in ("", ".") else posixpath.normpath(src.lstrip("/"))
        matched = False
        for rel, data in context.items():
            if src_norm == ".":
                target = posixpath.join(dest_rel, rel)
            elif _match(rel, src_norm):  # a file named by the source
                target = posixpath.join(dest_rel, posixpath.basename(rel)) if into_dir or _glob(src_norm) else dest_rel
            else:  # a file inside a directory the source names: the directory's contents go to dest
                parts = rel.split("/")
                top = next(("/".join(parts[:k]) for k in range(1, len(parts)) if _match("/".join(parts[:k]), src_norm)),
                           None)
                if top is None:
                    continue
                target = posixpath.join(dest_rel, rel[len(top) + 1:])
            _place(files, execs, target, rel, data, executable)
            matched = True
        if kind == "ADD" and src_norm.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")) and matched:
            skipped.append(f"{where}: ADD {src}: copied as the archive, not extracted")
        if not matched:
            skipped.append(f"{where}: {kind} {src}: no such file in the build context")
    dirs.append(dest_rel if into_dir or not files or dest_rel not in files else posixpath.dirname(dest_rel))
    return CopyStep(files, frozenset(execs), tuple(dirs), chown)


def _match(path: str, pattern: str) -> bool:
    """Docker's (Go's filepath.Match) globbing: `*` and `?` never cross a `/`."""
    parts, pats = path.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pats))


def _glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _place(files: dict[str, bytes], execs: set[str], target: str, rel: str, data: bytes,
           executable: frozenset[str]) -> None:
    target = posixpath.normpath(target)
    files[target] = data
    if rel in executable:
        execs.add(target)


def _run(value: str, where: str, skipped: list[str], have: object) -> str:
    """The part of a RUN step the sandbox runs (each skipped part reported), or "" for none."""
    stripped = value.strip()
    if stripped.startswith("["):
        argv = _args(stripped)
        stripped = " ".join(shlex.quote(a) for a in argv)
    if "<<" in stripped.split("\n", 1)[0] and re.search(r"<<-?\s*['\"]?[A-Za-z_]+", stripped) and "\n" not in stripped:
        skipped.append(f"{where}: RUN {stripped[:80]}: a heredoc, which this parser cannot read")
        return ""
    parts = split_parts(stripped) or [stripped]
    kept = []
    for part in parts:
        words = command_words(part)
        why = "cannot be parsed" if words is None else (
            "python -m pip: installs software" if _PY_INSTALL.search(part) else why_not_run(
                [w for ws in words for w in ws], have))
        if why:
            skipped.append(f"{where}: RUN {part[:100]}: not run ({why})")
        else:
            kept.append(part)
    return " && ".join(kept)
