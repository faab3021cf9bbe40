"""c3m: cross-session multimodal memory for long-horizon LLM/VLM agents.

    from c3m import Memory, Session, Turn
    with Memory("./store", namespace="alice") as mem:
        mem.add_session(Session("s1", datetime(2026, 3, 2, 10), [Turn("user", "Here is my studio.", ["studio.png"])]))
        print(mem.ask("What does my studio look like?").text)
"""
from .config import MemoryConfig
from .errors import C3MError, InvalidInput, SessionConflict, StoreError
from .memory import AddResult, Memory
from .types import (Answer, BudgetUse, Context, ContextItem, EvidenceForm, History, ImageRef, Question, RawNode,
                    ReaderBudget, RouteTrace, Session, Turn, WriteBudget)

__version__ = "0.1.0"
__all__ = ["AddResult", "Answer", "BudgetUse", "C3MError", "Context", "ContextItem", "EvidenceForm", "History",
           "ImageRef", "InvalidInput", "Memory", "MemoryConfig", "Question", "RawNode", "ReaderBudget",
           "RouteTrace", "Session", "SessionConflict", "StoreError", "Turn", "WriteBudget", "__version__"]
