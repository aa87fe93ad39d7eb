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
    """A page that sends the reader to a tag (an old experiment, the record of earlier runs) also gives the
    tag's commit, which is in main's history, so a clone that fetched no tags still reaches it: every tag named
    comes with its commit, every ``git show COMMIT:PATH`` the docs give resolves, and where the clone has the
    tag it points at that commit."""
    import shutil
    import subprocess

    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)

    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone lacks the older commits")
    pages = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("benchmarks/**/*.md"),
             *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("research/**/*.md")]
    text = "\n".join(page.read_text() for page in pages)
    named = set(re.findall(r"\btag\s+`{1,2}([\w.-]+)`{1,2}", text))
    assert {"eval-round-13", "docs-history"} <= named
    given = re.findall(r"\btag\s+`{1,2}([\w.-]+)`{1,2}\s*\(commit ([0-9a-f]{12,40})", text)
    commits = {tag: {commit for t, commit in given if t == tag} for tag in named}
    assert all(len(c) == 1 for c in commits.values()), f"each tag named with one commit: {commits}"
    tags = set(git("tag").stdout.split())
    for tag, (commit,) in commits.items():
        assert git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0, f"{tag}: {commit} not in history"
        if tag in tags:
            assert git("rev-parse", f"{tag}^{{commit}}").stdout.startswith(commit), f"{tag} is not {commit}"
    shows = re.findall(r"git show ([0-9a-f]{12,40}):([\w./-]+)", text)
    assert len(shows) >= 5
    for commit, path in shows:
        assert git("cat-file", "-e", f"{commit}:{path}").returncode == 0, f"git show {commit}:{path} fails"
