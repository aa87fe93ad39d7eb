"""AsyncAgentMemory: the same memory, awaited in worker threads, so the event loop keeps running."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from hopmem.agent import AgentMemory, AsyncAgentMemory, memory_tools
from hopmem.errors import InvalidInput
from hopmem.text.encoders import HashingEncoder

ENC = HashingEncoder(384)


class SlowEncoder:
    """The hashing encoder, taking ``delay`` seconds a call (a model on a busy CPU), recording its threads."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay, self.threads = delay, set()
        self.name, self.dim, self.fingerprint = ENC.name, ENC.dim, ENC.fingerprint

    def encode(self, texts):
        self.threads.add(threading.get_ident())
        time.sleep(self.delay)
        return ENC.encode(texts)


def open_async(tmp_path, encoder=ENC, **kwargs):
    return AsyncAgentMemory.open(tmp_path / "mem.db", encoder=encoder, namespace="team", **kwargs)


def test_calls_give_what_the_sync_memory_gives(tmp_path):
    async def main():
        async with await open_async(tmp_path) as mem:
            entry = await mem.remember("Production deploys require a database snapshot.", labels=None)
            many = await mem.remember_many(["Ticket PROJ-4417 tracks duplicate webhooks.", "Standup is at 9:30."])
            sel = await mem.recall("Which ticket tracks the webhooks?")
            ranked = await mem.rank("deploys snapshot")
            assert await mem.complete(sel.id, 0.9)
            assert (await mem.feedback(entry.id, 1.0)).manual_feedback == 1.0
            assert await mem.forget(many[1].id)
            stats = await mem.stats()
            return entry, many, sel, ranked, stats, mem.sync

    entry, many, sel, ranked, stats, sync = asyncio.run(main())
    assert sel.hits and sel.hits[0].entry_id == many[0].id  # the identifier's entry, as the sync call finds it
    assert ranked[0].entry_id == entry.id
    assert stats["entries"] == 2  # three remembered, one forgotten
    with pytest.raises(InvalidInput):  # closed by the context manager
        sync.remember("anything at all")
    again = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team")
    assert [e.id for e in again.entries(include_hidden=False)] == [entry.id, many[0].id]  # the forget stuck
    again.close()


def test_the_event_loop_keeps_running_while_the_encoder_works(tmp_path):
    """A heartbeat ticks every 5 ms; a 0.25 s encoder call must not stop it when awaited, and does when a
    coroutine calls the sync memory directly (the control, so the test can fail)."""
    encoder = SlowEncoder()

    async def beats_during(work):
        ticks = 0

        async def heartbeat():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.02)
        start = ticks
        await work()
        during = ticks - start
        beat.cancel()
        return during

    async def main():
        mem = await open_async(tmp_path, encoder=encoder)
        encoder.delay = 0.25
        awaited = await beats_during(lambda: mem.remember("The boiler service is booked for Friday."))

        async def blocking():
            mem.sync.remember("The damp survey found a leaking gutter.")

        blocked = await beats_during(blocking)
        encoder.delay = 0.0
        await mem.close()
        return awaited, blocked

    awaited, blocked = asyncio.run(main())
    assert blocked <= 1  # the sync call held the loop for the whole encode
    assert awaited >= 10  # at least 50 ms of the 250 ms beat on
    loop_thread = threading.get_ident()  # asyncio.run ran the loop in this thread
    assert loop_thread in encoder.threads and encoder.threads - {loop_thread}  # the control here, the rest not


def test_many_concurrent_calls_lose_nothing(tmp_path):
    async def main():
        mem = await open_async(tmp_path)
        texts = [f"Note {i}: the invoice for order NW-{1000 + i} was paid on day {i}." for i in range(40)]
        entries = await asyncio.gather(*(mem.remember(t) for t in texts))
        hits = await asyncio.gather(*(mem.recall(f"What about order NW-{1000 + i}?", record=False)
                                      for i in range(40)))
        listed = await mem.entries()
        await mem.close()
        return texts, entries, hits, listed

    texts, entries, hits, listed = asyncio.run(main())
    assert sorted(e.text for e in listed) == sorted(texts) and len({e.id for e in entries}) == 40
    for i, sel in enumerate(hits):  # every recall found its own order by the exact identifier
        assert sel.hits and sel.hits[0].text == texts[i]


def test_errors_and_signatures_are_the_sync_ones(tmp_path):
    async def main():
        mem = await open_async(tmp_path)
        try:
            with pytest.raises(InvalidInput, match="text"):
                await mem.remember("   ")
            with pytest.raises(InvalidInput, match="limit"):
                await mem.recall("anything", limit=0)
        finally:
            await mem.close()

    asyncio.run(main())
    assert AsyncAgentMemory.recall.__doc__ == AgentMemory.recall.__doc__
    assert AsyncAgentMemory.remember.__wrapped__ is AgentMemory.remember
    with pytest.raises(TypeError, match="AsyncAgentMemory.open"):
        AsyncAgentMemory("agent.db")  # type: ignore[arg-type]


def test_tools_can_be_awaited(tmp_path):
    async def main():
        mem = await open_async(tmp_path)
        tools = memory_tools(mem.sync, session_id="chat-1")
        stored = await tools.acall("remember", {"text": "User's sister lives in Kyoto, in flat K-204."})
        found = await tools.acall("recall", {"query": "Who lives in flat K-204?"})  # an exact identifier
        refused = await tools.get("forget").arun({"id": stored["id"]})
        unknown = await tools.acall("teleport", {})
        await mem.close()
        return stored, found, refused, unknown

    stored, found, refused, unknown = asyncio.run(main())
    assert stored["ok"] and found["found"] and "Kyoto" in found["memories"][0]["text"]
    assert not refused["ok"]  # forget needs approval by default
    assert not unknown["ok"] and "unknown tool" in unknown["error"]


def test_a_cancelled_await_does_not_cancel_the_write(tmp_path):
    """A thread cannot be stopped mid-call: cancelling the awaiting task leaves the remember to finish, and
    it lands (documented), rather than leaving a half-written entry."""
    encoder = SlowEncoder()

    async def main():
        mem = await open_async(tmp_path, encoder=encoder)
        encoder.delay = 0.2
        task = asyncio.create_task(mem.remember("The roofer comes on Thursday at 8."))
        await asyncio.sleep(0.05)  # the call is in its worker thread, encoding
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        encoder.delay = 0.0
        await asyncio.sleep(0.3)  # the thread finishes the call
        texts = [e.text for e in await mem.entries()]
        await mem.close()
        return texts

    assert asyncio.run(main()) == ["The roofer comes on Thursday at 8."]
