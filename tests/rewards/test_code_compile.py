"""`python_compiles` and `c_compiles`: pass/fail and the structured diagnostics an agent reads back."""

from __future__ import annotations

import pytest

from posttrain.rewards import make_verifier, safe_verify, score_sync
from posttrain.rewards.code import CCompiles, CompileError, PythonCompiles, compile_errors, parse_gcc_diagnostics
from posttrain.types import Task, VerdictStatus

T = Task("t", "write code")


def test_python_compiles_accepts_valid_code_without_running_it():
    v = safe_verify(PythonCompiles(), T, "```python\nimport os\nos._exit(3)\nwhile True:\n    pass\n```")
    assert (v.status, v.score, v.passed) == (VerdictStatus.OK, 1.0, True)
    assert compile_errors(v) == []


def test_python_syntax_error_has_file_line_column_and_message():
    v = safe_verify(PythonCompiles(), T, "def f(x):\n    return x +\n")
    assert v.ok and v.score == 0.0 and not v.passed
    (err,) = compile_errors(v)
    assert err == CompileError("solution.py", 2, 15, err.message, "error")
    assert err.message.startswith("SyntaxError: invalid syntax")


def test_python_compile_catches_errors_past_the_parser():
    v = safe_verify(PythonCompiles(), T, "def f():\n    pass\nreturn 1\n")
    assert v.score == 0.0 and "'return' outside function" in compile_errors(v)[0].message


def test_python_warnings_are_reported_and_fail_only_with_werror():
    code = "x = 1\nif x is 1:\n    pass\n"
    lax, strict = score_sync(PythonCompiles(), [T], [code])[0], score_sync(PythonCompiles(werror=True), [T], [code])[0]
    assert lax.score == 1.0 and strict.score == 0.0
    (w,) = compile_errors(lax)
    assert w.severity == "warning" and w.line == 2 and "SyntaxWarning" in w.message


def test_python_compile_batch_keeps_order():
    codes = ["x = 1", "x = ", "def f(): return 2", "(((", "pass"] * 20
    verdicts = score_sync(make_verifier("python_compiles"), [T] * len(codes), codes)
    assert [v.score for v in verdicts] == [1.0, 0.0, 1.0, 0.0, 1.0] * 20


@pytest.mark.slow
def test_c_compiles_valid_program():
    v = safe_verify(CCompiles(), T, "```c\n#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }\n```")
    assert (v.status, v.score, v.passed) == (VerdictStatus.OK, 1.0, True)
    assert v.info["errors"] == [] and compile_errors(v) == []


def test_c_compile_errors_are_structured():
    src = "int main(void) {\n    int x = ;\n    return y;\n}\n"
    v = safe_verify(make_verifier("c_compiles"), T, src)
    assert v.ok and v.score == 0.0
    errs = [e for e in compile_errors(v) if e.severity == "error"]
    assert [(e.file, e.line, e.column) for e in errs] == [("main.c", 2, 13), ("main.c", 3, 12)]
    assert "expected expression" in errs[0].message and "undeclared" in errs[1].message


def test_c_warnings_pass_unless_werror():
    src = "int main(void) { int unused; return 0; }\n"
    lax = safe_verify(CCompiles(), T, src)
    strict = safe_verify(CCompiles(werror=True), T, src)
    assert lax.score == 1.0 and strict.score == 0.0
    assert any("unused variable" in w.message for w in compile_errors(lax) if w.severity == "warning")


def test_c_link_errors_only_when_linking():
    src = "int missing(void);\nint main(void) { return missing(); }\n"
    assert safe_verify(CCompiles(), T, src).score == 1.0
    v = safe_verify(CCompiles(link=True), T, src)
    assert v.score == 0.0 and any("undefined reference" in e.message for e in compile_errors(v))


@pytest.mark.slow
def test_c_include_of_an_endless_device_times_out_as_a_failure():
    v = safe_verify(CCompiles(timeout_s=2.0), T, "#include </dev/zero>\nint main(void) { return 0; }\n")
    assert v.ok and v.score == 0.0


def test_gcc_diagnostics_parser_on_json_then_linker_text():
    stderr = ('[{"kind": "error", "locations": [{"caret": {"file": "main.c", "line": 3, "column": 5}}], "message": "boom"}]\n'
              "/usr/bin/ld: /tmp/cc.o: in function `main':\nmain.c:(.text+0x5): undefined reference to `f'\n"
              "collect2: error: ld returned 1 exit status\n")
    errors, warnings = parse_gcc_diagnostics(stderr)
    assert errors[0] == {"file": "main.c", "line": 3, "column": 5, "message": "boom", "severity": "error"}
    assert errors[1]["file"] == "main.c" and "undefined reference" in errors[1]["message"]
    assert len(errors) == 2 and warnings == []


def test_compile_details_are_a_short_text_naming_the_first_diagnostic():
    v = safe_verify(make_verifier("c_compiles"), T, "int main(void) {\n    int x = ;\n    return y;\n}\n")
    assert v.details.startswith("compile error at main.c:2:13: ") and v.details.endswith("; 1 more error")
    assert v.info["compiled"] is False and len(v.info["errors"]) == 2
    ok = safe_verify(PythonCompiles(), T, "x = 1\n")
    assert ok.details == "compiled" and ok.info == {"compiled": True, "errors": [], "warnings": []}
    code = "x = 1\nif x is 1:\n    pass\n"
    lax, strict = safe_verify(PythonCompiles(), T, code), safe_verify(PythonCompiles(werror=True), T, code)
    assert lax.details.startswith("compiled with 1 warning: compile warning at solution.py:2: SyntaxWarning")
    assert strict.details.startswith("warnings fail (werror): compile warning at solution.py:2")
