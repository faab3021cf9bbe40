"""Evaluation: chronological replay of datasets through a memory method, and evidence metrics."""
from .replay import QuestionResult, evaluate, summarize

__all__ = ["QuestionResult", "evaluate", "summarize"]
