"""The README's quick start runs exactly as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_a_quick_start() -> None:
    blocks = python_blocks()
    assert blocks, "README.md lost its python quick start"
    assert any("hopmem.Memory" in b for b in blocks)


def test_readme_python_blocks_run(capsys) -> None:
    for block in python_blocks():
        namespace: dict = {"__name__": "__readme__"}
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README
    out = capsys.readouterr().out
    assert "locations" in out
