"""The fast subset (`python -m pytest -m "not slow"`) still covers every package: each test directory keeps
at least one test that is not marked slow.

Read from the test files' syntax (decorators, classes' decorators, a module's ``pytestmark``) rather than
by collecting the suite, which would import every test module and cost as much as the subset itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
SRC = TESTS.parent / "src" / "posttrain"


def _marks(node: ast.expr) -> set[str]:
    """Names of the ``pytest.mark.X`` in an expression (a decorator, or a ``pytestmark`` list)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark":
            out.add(n.attr)
    return out


def fast_tests(source: str) -> list[str]:
    """The test functions of one test module that ``-m "not slow"`` keeps."""
    tree = ast.parse(source)
    module_marks: set[str] = set()
    for st in tree.body:
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in st.targets):
            module_marks |= _marks(st.value)
    if "slow" in module_marks:
        return []
    out = []
    for st in tree.body:
        scopes = [(st, set())]
        if isinstance(st, ast.ClassDef) and st.name.startswith("Test"):
            cls_marks = set().union(*(_marks(d) for d in st.decorator_list))
            scopes = [(f, cls_marks) for f in st.body]
        for fn, inherited in scopes:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.name.startswith("test"):
                continue
            if "slow" not in inherited.union(*(_marks(d) for d in fn.decorator_list)):
                out.append(fn.name)
    return out


def uncovered_dirs(root: Path) -> list[str]:
    """Test directories (``root`` itself included) holding test modules but no test the fast subset keeps."""
    out = []
    for d in sorted({p.parent for p in root.rglob("test_*.py")}):
        if not any(fast_tests(p.read_text()) for p in d.glob("test_*.py")):
            out.append(str(d.relative_to(root)))
    return out


def test_every_test_directory_keeps_a_fast_test():
    assert uncovered_dirs(TESTS) == []


def test_every_package_has_a_test_directory():
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    # cli: tests/test_cli.py at the top level (its commands are thin wrappers over the packages)
    assert packages - {"cli"} <= {d.name for d in TESTS.iterdir() if d.is_dir()}


def test_a_directory_whose_tests_are_all_slow_is_reported(tmp_path):
    (tmp_path / "test_top.py").write_text("def test_a():\n    pass\n")
    for name, src in {
        "decorated": "import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n",
        "module": "import pytest\n\npytestmark = [pytest.mark.ray, pytest.mark.slow]\n\ndef test_a():\n    pass\n",
        "cls": "import pytest\n\n@pytest.mark.slow\nclass TestX:\n    def test_a(self):\n        pass\n",
        "kept": "import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n\n"
                "@pytest.mark.parametrize('x', [1])\ndef test_b(x):\n    pass\n",
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "test_m.py").write_text(src)
    assert uncovered_dirs(tmp_path) == ["cls", "decorated", "module"]
