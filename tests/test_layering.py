"""The package's layering: only `posttrain.cli` imports typer and rich, and no other package imports the CLI.

Every import statement counts, the lazy ones inside functions included: a domain package that imported typer
lazily would still tie its code to the command line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import posttrain

PACKAGE = Path(posttrain.__file__).parent
CLI = PACKAGE / "cli"
CLI_ONLY = ("typer", "rich", "click")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file; `from posttrain import cli` counts as posttrain.cli."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _outside_cli() -> list[Path]:
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if CLI not in p.parents]
    assert len(files) > 50 and PACKAGE / "errors.py" in files  # the walk found the package
    return files


@pytest.mark.slow
def test_only_the_cli_imports_typer_or_rich():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
        for path in _outside_cli()
        for line, module in _imported_modules(path)
        if module.split(".")[0] in CLI_ONLY
    ]
    assert offenders == [], "typer/rich belong to posttrain.cli only:\n" + "\n".join(offenders)


@pytest.mark.slow
def test_no_package_imports_the_cli():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
        for path in _outside_cli()
        for line, module in _imported_modules(path)
        if module == "posttrain.cli" or module.startswith("posttrain.cli.")
    ]
    assert offenders == [], "the domain packages must not depend on the command line:\n" + "\n".join(offenders)


def test_the_check_sees_lazy_imports(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    import rich.console\n    from typer import Exit\n    from posttrain import cli\n")
    modules = [m for _, m in _imported_modules(sample)]
    assert "rich.console" in modules and "typer" in modules and "posttrain.cli" in modules
