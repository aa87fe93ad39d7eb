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
