"""HiVe-Mem episodes: consecutive turns of one session, ~``target_tokens`` long, never cut inside a turn.

Rule (``segment_episodes``): walk the nodes in the given order; a new episode starts (1) when the session
changes, or (2) at a turn boundary once the running episode already holds ``>= target_tokens`` text tokens
(``count(node.text)``; images carry no text tokens). So an episode is extended to the end of the turn that
takes it over the target and is never split inside a turn; a single turn longer than the target is one
episode on its own. Every input node lands in exactly one episode, in order; an empty input gives no
episode. Redacted nodes (blank text, 0 tokens) stay in their episode so the index keeps complete provenance.
"""
from __future__ import annotations

import hashlib
import json
from typing import Callable, Sequence

from ..types import Episode, RawNode

#: HiVe-Mem's episode length (text tokens)
EPISODE_TOKENS = 256


def segment_episodes(nodes: Sequence[RawNode], count: Callable[[str], int],
                     target_tokens: int = EPISODE_TOKENS) -> list[list[RawNode]]:
    """Group ``nodes`` into episodes (module docstring); ``count(text) -> tokens``."""
    if target_tokens < 1:
        raise ValueError(f"target_tokens must be >= 1, got {target_tokens!r}")
    out: list[list[RawNode]] = []
    cur: list[RawNode] = []
    tokens = 0
    for node in nodes:
        if cur and (node.session_id != cur[-1].session_id or tokens >= target_tokens):
            out.append(cur)
            cur, tokens = [], 0
        cur.append(node)
        tokens += count(node.text) if node.text else 0
    if cur:
        out.append(cur)
    return out


def episode_id(namespace: str, session_id: str, first_turn: int) -> str:
    """Deterministic episode id: the same (namespace, session, first turn) always names the same episode."""
    digest = hashlib.sha256(json.dumps(["episode", namespace, session_id, int(first_turn)]).encode()).hexdigest()
    return f"e-{digest[:16]}"


def to_episode(namespace: str, nodes: Sequence[RawNode], count: Callable[[str], int]) -> Episode:
    """The ``c3m.types.Episode`` record of one segment (text = the turns' texts, one per line)."""
    if not nodes:
        raise ValueError("an episode needs at least one node")
    text = "\n".join(n.text for n in nodes if n.text)
    return Episode(episode_id(namespace, nodes[0].session_id, nodes[0].turn_index), nodes[0].session_id,
                   tuple(n.node_id for n in nodes), text, sum(count(n.text) for n in nodes if n.text), nodes[0].time)


__all__ = ["EPISODE_TOKENS", "episode_id", "segment_episodes", "to_episode"]
