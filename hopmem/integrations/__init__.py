"""Adapters that put hopmem under the agent frameworks people already use.

* :mod:`hopmem.integrations.langgraph`: :class:`~hopmem.integrations.langgraph.HopmemStore`, a LangGraph
  ``BaseStore`` on the agent memory (``pip install "hopmem[langgraph]"``), so LangGraph agents and LangMem's
  memory tools read and write through it.

Each adapter imports its framework only when it is imported itself.
"""
