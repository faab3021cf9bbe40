"""c3m inside agent frameworks, each an optional extra imported only when used:

- ``c3m.integrations.langgraph``: ``C3MStore`` (a LangGraph ``BaseStore``) and ``c3m_tools`` (LangChain tools
  ``remember`` / ``recall`` / ``ask``) — ``pip install "c3m[langgraph]"``
- ``c3m.integrations.openai_agents``: ``C3MSession`` (an Agents SDK ``Session``) and ``c3m_function_tools`` —
  ``pip install "c3m[openai-agents]"``
- ``c3m.integrations.llamaindex``: ``C3MMemoryBlock`` (a LlamaIndex memory block) — ``pip install "c3m[llamaindex]"``
- ``c3m.integrations.autogen``: ``C3MMemory`` (an AutoGen ``Memory``) — ``pip install "c3m[autogen]"``

Every adapter is thin: reads and writes go through ``c3m.Memory`` (provenance, budgets, namespaces, forget and
the PostgreSQL backend work unchanged). See docs/integrations/.
"""
from __future__ import annotations

import importlib

_WHERE = {"C3MStore": "langgraph", "c3m_tools": "langgraph", "C3MSession": "openai_agents",
          "c3m_function_tools": "openai_agents", "C3MMemoryBlock": "llamaindex", "C3MMemory": "autogen",
          "MemoryWorker": "_core"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
