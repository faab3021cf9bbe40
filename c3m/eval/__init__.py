"""Evaluation: chronological replay with query-blindness enforced, evidence metrics with bootstrap
intervals, a parallel and resumable harness, and Table-1-style reports."""
from .harness import load_results, run_eval
from .metrics import QuestionResult, aggregate, bootstrap_ci, score_context
from .replay import HistoryResult, QueryBlindnessViolation, replay_history
from .report import make_header, write_report

__all__ = ["HistoryResult", "QueryBlindnessViolation", "QuestionResult", "aggregate", "bootstrap_ci", "load_results",
           "make_header", "replay_history", "run_eval", "score_context", "write_report"]
