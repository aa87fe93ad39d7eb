"""The quick starts in the README and the guides run exactly as written.

Only the blocks that are whole programs are run (README, agent memory, store);
the engine and recall guides show fragments (``statements`` and the like come
from the reader).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def run_blocks(path: Path, blocks: list[str] | None = None) -> None:
    for block in python_blocks(path) if blocks is None else blocks:
        namespace: dict = {"__name__": "__doc_example__"}
        exec(compile(block, str(path), "exec"), namespace)  # noqa: S102 - our own docs


def readme_blocks(*, model: bool) -> list[str]:
    """The README's quick starts that load the text model (default_encoder), or the others."""
    return [b for b in python_blocks(ROOT / "README.md") if ("default_encoder()" in b) == model]


def test_readme_has_a_quick_start() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert blocks, "README.md lost its python quick start"
    assert any("hopmem.Memory" in b for b in blocks)
    # the agent memory beside the engine: remember, recall, and an abstention
    assert any("AgentMemory" in b and ".remember(" in b and ".recall(" in b and "abstained" in b for b in blocks)


def test_readme_python_blocks_run(capsys) -> None:
    run_blocks(ROOT / "README.md", readme_blocks(model=False))
    assert "locations" in capsys.readouterr().out


@pytest.mark.model  # default_encoder() loads all-MiniLM-L6-v2
def test_readme_agent_quick_start_runs(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # it creates agent.db in the working directory
    run_blocks(ROOT / "README.md", readme_blocks(model=True))
    *hits, abstention = capsys.readouterr().out.splitlines()
    # the one relevant statement, whatever its band; then an unrelated question abstains, saying why
    assert [line.split(" ", 1)[1] for line in hits] == ["Production deploys require a database snapshot."]
    assert abstention.startswith("True below the gate:")


@pytest.mark.parametrize(("doc", "printed"), [
    # the agent quick start recalls the deploy rule for a deploying question, with its explanation;
    # its default_encoder() loads all-MiniLM-L6-v2 where it is installed
    pytest.param("docs/agent-memory.md", re.compile(r"database snapshot\. \| .*admitted by"),
                 marks=pytest.mark.model),
    # the store quick start prints three ids, two resolved documents and the stats
    ("docs/store.md", re.compile(r"\[1, 2, 3\].*CollectionStats\(.*documents=2\)", re.S)),
])
def test_guide_quick_starts_run(doc, printed, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # the examples create their files in the working directory
    run_blocks(ROOT / doc)
    out = capsys.readouterr().out
    assert printed.search(out), out


def test_the_git_tags_the_docs_name_exist() -> None:
    """A page that sends the reader to a tag (an old experiment, the record of earlier runs) names one that
    exists: the tags travel with a clone of the repository, not with the package."""
    import shutil
    import subprocess

    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if shallow == "true":
        pytest.skip("a shallow clone has no tags")
    pages = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("benchmarks/**/*.md"),
             *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("research/**/*.md")]
    named = {tag for page in pages for tag in re.findall(r"\btag\s+`{1,2}([\w.-]+)`{1,2}", page.read_text())}
    assert {"eval-round-13", "docs-history"} <= named
    tags = set(subprocess.run(["git", "-C", str(ROOT), "tag"], capture_output=True, text=True,
                              check=True).stdout.split())
    assert named <= tags, f"docs name tags that do not exist: {sorted(named - tags)}"
