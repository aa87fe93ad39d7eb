"""The agent memory under kills and concurrency: nothing acknowledged is lost, nothing half-written is seen.

* A writer process (tests/fixtures/agent_crash_writer.py) remembers, forgets and
  sets feedback in three scopes; it is killed with SIGKILL at random moments
  many times. Afterwards every acknowledged statement is in the file unless an
  acknowledged forget removed it, nothing else is (but the one operation in
  flight at each kill), SQLite and the FTS5 indexes pass their integrity
  checks, and both retrievers find each statement: the text, the vector and the
  keyword row were committed together.
* Several processes, and several threads of one process, remember at once into
  one file: every statement ends up there exactly once, seen by every
  controller.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading

import pytest

from crash_support import run_and_kill

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITER = os.path.join(ROOT, "tests", "fixtures", "agent_crash_writer.py")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _load_writer():
    spec = importlib.util.spec_from_file_location("agent_crash_writer", WRITER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_and_kill(path: str, rnd: random.Random) -> tuple[int, list[list[str]]]:
    """One writer run: its first statement index and its acknowledgement lines, split."""
    first, out = run_and_kill([sys.executable, WRITER, path], ENV, rnd, 0.3)
    lines = [line.split() for line in out.splitlines()]
    if lines and (len(lines[-1]) < 3 or (lines[-1][0] == "forget" and len(lines[-1]) < 4)):
        lines.pop()  # a line cut by the kill was not acknowledged
    return int(first.split()[1]), lines


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.subprocess
def test_sigkill_during_agent_writes_loses_nothing_acknowledged(tmp_path):
    writer = _load_writer()
    path = str(tmp_path / "crash.db")
    rnd = random.Random(int(os.environ.get("HOPMEM_CRASH_SEED", "2024")))
    kills = int(os.environ.get("HOPMEM_CRASH_KILLS", "12"))
    remembered: dict[int, int] = {}  # statement -> entry id, acknowledged
    forgotten: set[int] = set()
    in_flight: set[int] = set()  # the operation each kill interrupted: it may or may not have committed
    for _ in range(kills):
        start, lines = _run_and_kill(path, rnd)
        last = start - 1
        for kind, i, *rest in lines:
            last = int(i)
            if kind == "rem":
                remembered[int(i)] = int(rest[0])
                forgotten.discard(int(i))
            elif kind == "forget" and rest[1] == "1":
                forgotten.add(int(rest[0]))
        in_flight.add(last + 1)
    assert len(remembered) > 20, "the writer hardly ran: the test checked nothing"

    mem = writer.open_memory(path)
    try:
        present = {}
        for session in writer.SESSIONS:
            for entry in mem.entries(session_id=session):
                i = writer.index_of(entry.text)
                assert entry.text == writer.text(i) and entry.session_id == writer.scope(i)[0]
                present[i] = entry.id
        for i, entry_id in remembered.items():
            if i in forgotten:
                assert i not in present, f"statement {i}: its forget was acknowledged"
            elif present.get(i) != entry_id:  # only an in-flight forget may have removed it
                assert i not in present and any(writer.op(k) == ("forget", i) for k in in_flight), i
        for i in set(present) - set(remembered):
            assert i in in_flight, f"statement {i} is in the file but was never acknowledged"
        # the vector and the keyword row of every statement were committed with its text
        for i, entry_id in present.items():
            session, _ = writer.scope(i)
            assert mem.rank(f"AG-{i:05d}", session_id=session, mode="keyword", limit=1)[0].entry_id == entry_id
            assert entry_id in [h.entry_id for h in mem.rank(writer.text(i), session_id=session,
                                                                mode="associative", limit=3)]
    finally:
        mem.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        for (name,) in conn.execute("SELECT name FROM fts_tables").fetchall():
            conn.execute(f"INSERT INTO {name}({name}) VALUES ('integrity-check')")  # raises if inconsistent
    finally:
        conn.close()


@pytest.mark.subprocess
def test_processes_remembering_at_once_lose_and_double_nothing(tmp_path):
    writer = _load_writer()
    path = str(tmp_path / "shared.db")
    writer.open_memory(path).close()  # create the file before the race
    code = ("import sys; sys.path.insert(0, {root!r}); from tests.fixtures.agent_crash_writer import *\n"
            "mem = open_memory({path!r})\n"
            "for i in range({lo}, {hi}):\n"
            "    s, d = scope(i); mem.remember(text(i), session_id=s, durability=d)\n"
            "    mem.recall(text(max(i - 1, 0)), session_id=s, record=i % 2 == 0)\n"
            "mem.close()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code.format(root=ROOT, path=path, lo=100 * p, hi=100 * p + 30)],
                              env=ENV, stderr=subprocess.PIPE, text=True) for p in range(3)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    expected = {i for p in range(3) for i in range(100 * p, 100 * p + 30)}
    mem = writer.open_memory(path)
    try:
        for session in writer.SESSIONS:
            got = [writer.index_of(e.text) for e in mem.entries(session_id=session)
                   if e.session_id == session]
            assert sorted(got) == sorted(i for i in expected if writer.scope(i)[0] == session)
    finally:
        mem.close()


def test_threads_sharing_one_controller_lose_and_double_nothing(tmp_path):
    writer = _load_writer()
    mem = writer.open_memory(str(tmp_path / "threads.db"))
    errors: list[BaseException] = []

    def work(lo: int) -> None:
        try:
            for i in range(lo, lo + 25):
                session, durability = writer.scope(i)
                entry = mem.remember(writer.text(i), session_id=session, durability=durability)
                assert mem.get(entry.id, session_id=session).text == writer.text(i)
                mem.recall(writer.text(i), session_id=session)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(100 * t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        texts = [e.text for s in writer.SESSIONS for e in mem.entries(session_id=s) if e.session_id == s]
        assert sorted(texts) == sorted(writer.text(i) for t in range(4) for i in range(100 * t, 100 * t + 25))
    finally:
        mem.close()


def _batch_items(n: int) -> list[dict]:
    return [{"text": f"Turn {i}: the {('garden', 'invoice', 'violin')[i % 3]} note number {i * 13}",
             "metadata": {"speaker": "Ana" if i % 2 else "Bo"}} for i in range(n)]


def test_remember_many_commits_once_a_batch_and_announces_only_committed_entries(tmp_path):
    from hopmem.agent import AgentMemory
    from hopmem.agent.writes import WRITE_BATCH
    from hopmem.text.encoders import HashingEncoder

    path = tmp_path / "batch.db"
    mem = AgentMemory.open(path, encoder=HashingEncoder(256), namespace="team")
    commits: list[str] = []
    mem._state.store.conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    reader = sqlite3.connect(path)  # another connection sees only what is committed
    unseen: list[int] = []

    def check(event) -> None:
        if event.type == "remembered" and not reader.execute(
                "SELECT 1 FROM entries WHERE id = ?", (event.data["id"],)).fetchone():
            unseen.append(event.data["id"])

    mem.events.subscribe(check)
    items = _batch_items(WRITE_BATCH + 44)
    stored = mem.remember_many(items, progress=False)
    try:
        assert len(stored) == len(items) and len(commits) == 2  # two batches, not one commit a turn
        assert unseen == []  # every event came after its entry's commit
        assert [e.text for e in mem.entries()] == [i["text"] for i in items]
    finally:
        reader.close()
        mem.close()


def test_a_write_failing_halfway_rolls_back_its_batch_and_the_rows_in_memory(tmp_path):
    from hopmem.agent import AgentMemory
    from hopmem.agent.writes import WRITE_BATCH
    from hopmem.text.encoders import HashingEncoder

    path = tmp_path / "halfway.db"
    encoder = HashingEncoder(256)
    mem = AgentMemory.open(path, encoder=encoder, namespace="team")
    # a real SQLite failure after the entry row is written: the write id's row is refused
    mem._state.store.conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON write_ids WHEN NEW.write_id = 'boom' "
                            "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END")
    items = _batch_items(WRITE_BATCH + 40)
    items[WRITE_BATCH + 30]["write_id"] = "boom"
    with pytest.raises(Exception, match="refused by a trigger"):
        mem.remember_many(items, progress=False)
    first_batch = [i["text"] for i in items[:WRITE_BATCH]]
    assert [e.text for e in mem.entries()] == first_batch  # the second batch is gone from memory ...
    hits = mem.rank("Turn 277: the invoice note number 3601")
    assert hits and all(not h.text.startswith("Turn 277:") for h in hits)  # ... and from the indexes
    mem.close()
    with AgentMemory.open(path, encoder=encoder, namespace="team") as again:  # ... and from the file
        assert [e.text for e in again.entries()] == first_batch


def test_remember_many_refusing_an_item_keeps_the_batches_before_it(tmp_path):
    from hopmem.agent import AgentMemory
    from hopmem.agent.writes import WRITE_BATCH
    from hopmem.errors import InvalidInput
    from hopmem.text.encoders import HashingEncoder

    path = tmp_path / "refused.db"
    encoder = HashingEncoder(256)
    items = _batch_items(WRITE_BATCH + 20)
    items[WRITE_BATCH + 10]["kind"] = "poem"  # refused before it writes anything
    with AgentMemory.open(path, encoder=encoder, namespace="team") as mem:
        with pytest.raises(InvalidInput, match="kind"):
            mem.remember_many(items, progress=False)
    with AgentMemory.open(path, encoder=encoder, namespace="team") as again:
        assert [e.text for e in again.entries()] == [i["text"] for i in items[:WRITE_BATCH + 10]]


@pytest.mark.subprocess
def test_sigkill_during_remember_many_keeps_whole_batches_only(tmp_path):
    from hopmem.agent.writes import WRITE_BATCH

    writer = _load_writer()
    path = str(tmp_path / "batches.db")
    rnd = random.Random(int(os.environ.get("HOPMEM_CRASH_SEED", "2024")))
    whole = {0, WRITE_BATCH, writer.CALL}  # what of an interrupted call may be in the file
    pending = 0  # the first statement of the call a kill interrupted
    acknowledged: set[int] = set()
    for _ in range(int(os.environ.get("HOPMEM_CRASH_KILLS", "8"))):
        first, out = run_and_kill([sys.executable, WRITER, path, "--batches"], ENV, rnd, 1.0)
        start = int(first.split()[1])
        assert start - pending in whole, f"a restart found {start - pending} statements of a call of {writer.CALL}"
        pending = start
        for line in out.splitlines():
            if line.startswith("batch "):
                assert int(line.split()[1]) == pending
                acknowledged.update(range(pending, pending + writer.CALL))
                pending += writer.CALL
    assert len(acknowledged) >= writer.CALL, "no call ever returned: the test checked nothing"
    mem = writer.open_memory(path)
    try:
        present = [writer.index_of(e.text) for e in mem.entries()]
    finally:
        mem.close()
    assert sorted(present) == list(range(len(present)))  # no statement twice, none missing
    assert acknowledged <= set(present) and len(present) - pending in whole
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
