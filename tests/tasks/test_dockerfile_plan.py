"""The workspace a Dockerfile describes (`tasks/dockerfile_plan.py`): COPY/ADD sources and destinations, WORKDIR,
ENV, which RUN steps run and which are reported. Fixtures of our own reproduce the conventions of published
Terminal-Bench and Harbor Dockerfiles (COPY workspace/ ./, COPY task_deps/ /app/raw_logs/, RUN mkdir, RUN rm of a
generator, apt-get/pip/curl installs)."""

from __future__ import annotations

from posttrain.tasks.dockerfile_plan import CopyStep, RunStep, command_words, plan_workspace, split_parts, substitute

CONTEXT = {"workspace/main.py": b"m", "workspace/sub/data.txt": b"d", "task_deps/a.log": b"a", "task_deps/b.log": b"b",
           "generator.py": b"g", "run.sh": b"#!/bin/sh\n", "Dockerfile": b"..."}


def have(name):  # the tools the sandbox has, as `shutil.which` would answer
    return f"/usr/bin/{name}" if name in {"mkdir", "rm", "python3", "chmod", "cp", "mv", "ln", "cat", "git"} else None


def plan(text, **kw):
    return plan_workspace(text, CONTEXT, frozenset({"run.sh"}), have=have, **kw)


def copies(p):
    return [s for s in p.steps if isinstance(s, CopyStep) and s.files]


def test_copy_sources_land_at_their_destinations_relative_to_workdir():
    p = plan("FROM x\nWORKDIR /app\nCOPY workspace/ ./\nCOPY task_deps/ /app/raw_logs/\nCOPY run.sh generator.py tools/\n"
             "COPY task_deps/a.log single.log\n")
    files = [s.files for s in copies(p)]
    assert files == [{"main.py": b"m", "sub/data.txt": b"d"}, {"raw_logs/a.log": b"a", "raw_logs/b.log": b"b"},
                     {"tools/run.sh": b"#!/bin/sh\n", "tools/generator.py": b"g"}, {"single.log": b"a"}]
    assert copies(p)[2].executable == frozenset({"tools/run.sh"})
    assert p.workdir == "/app" and p.skipped == ()


def test_copy_dot_wildcards_and_a_nested_workdir():
    p = plan("FROM x\nWORKDIR /app/src\nCOPY *.py ./\nCOPY . /app/\n")
    assert copies(p)[0].files == {"src/generator.py": b"g"}
    assert set(copies(p)[1].files) == set(CONTEXT)  # COPY . copies the Dockerfile too, as docker does
    assert p.workdir == "/app/src"


def test_env_arg_and_substitution():
    p = plan("FROM x\nARG DIR=logs\nENV TEST_DIR=/tests LANG=C.UTF-8\nENV OLD a b\nWORKDIR /app\n"
             "COPY task_deps/ /app/${DIR}_in/\n")
    assert p.env == {"TEST_DIR": "/tests", "LANG": "C.UTF-8", "OLD": "a b"}
    assert set(copies(p)[0].files) == {"logs_in/a.log", "logs_in/b.log"}
    assert substitute("${A:-x}/$B/${C}", {"B": "b"}) == "x/b/"


def test_run_steps_that_shape_files_run_and_installs_are_reported():
    p = plan("FROM x\nWORKDIR /app\nCOPY generator.py .\n"
             "RUN apt-get update && apt-get install -y curl && mkdir -p /app/recovered_logs/ && "
             "python3 generator.py && rm -f generator.py\nRUN pip install numpy\nRUN curl -L https://x | sh\n"
             "RUN [\"chmod\", \"+x\", \"run.sh\"]\n")
    runs = [s for s in p.steps if isinstance(s, RunStep)]
    assert [r.command for r in runs] == ["mkdir -p /app/recovered_logs/ && python3 generator.py && rm -f generator.py",
                                         "chmod +x run.sh"]
    assert runs[0].workdir == "/app"
    assert p.skipped == (
        "Dockerfile:4: RUN apt-get update: not run (apt-get: installs or fetches software)",
        "Dockerfile:4: RUN apt-get install -y curl: not run (apt-get: installs or fetches software)",
        "Dockerfile:5: RUN pip install numpy: not run (pip: installs or fetches software)",
        "Dockerfile:6: RUN curl -L https://x | sh: not run (curl: installs or fetches software)")


def test_what_cannot_be_placed_is_reported_never_dropped_silently():
    p = plan("FROM a AS build\nFROM b\nWORKDIR /srv\nCOPY missing.txt /app/\nCOPY run.sh /opt/run.sh\n"
             "COPY --from=build /x /app/x\nADD https://example.com/f.tgz /app/\nRUN frobnicate --all\nUSER app\n")
    text = "\n".join(p.skipped)
    for expected in ("second build stage", "WORKDIR /srv lies outside /app", "missing.txt: no such file",
                     "/opt/run.sh lies outside /app", "another build stage", "a download",
                     "frobnicate: not in the sandbox", "USER app"):
        assert expected in text, (expected, text)
    assert p.workdir == "/app"


def test_hidden_paths_are_never_copied():
    p = plan_workspace("FROM x\nCOPY . /app/\n", {"tests/test_x.py": b"t", "a.txt": b"a"}, hidden=frozenset({"tests"}))
    assert copies(p)[0].files == {"a.txt": b"a"}


def test_dockerignore_patterns():
    p = plan("FROM x\nCOPY . /app/\n", dockerignore="task_deps\n*.py\n!workspace/main.py\n")
    assert set(copies(p)[0].files) == {"workspace/main.py", "workspace/sub/data.txt", "run.sh", "Dockerfile"}


def test_shell_splitting_respects_quotes_and_keeps_subshells_whole():
    assert split_parts("a && b 'x && y'; c") == ["a", "b 'x && y'", "c"]
    assert split_parts("a || b") is None and split_parts("(a) && b") is None
    assert command_words("FOO=1 make -C x | tee log > out && echo 'a|b'") == [["make", "tee"], ["echo"]]
