"""Ingest pipelining: the next sessions' model work runs on background threads while the writer commits.

A session's write is model work (the Raw Nodes' shared text embeddings, the text anchors of the turns RAMU
describes) followed by the index update under the store's write lock. The model work needs only the session's
turns, so while session *t* is folded into the index, two worker threads embed and a third describes sessions
*t + 1 … t + lookahead*, each library at one thread of its own (``models.threads``). NumPy's and torch's matrix
products and spaCy's kernels release the GIL for part of their time: ``c3m ingest`` of a 128K-token history on
two cores went from 33.0 s (no prefetch) to 26.0 s with one embedding thread and to ~21 s with two
(``benchmarks/results/write-cost-cpu``).

Nothing changes in what is stored, bit for bit:

* the workers embed, for each session, exactly the batch the writer would embed when it gets there (the
  session's texts not in the memo or the store's vector cache when the session was queued, less those an earlier
  queued session embeds), and ``MemoryMethod.text_vectors`` takes a prefetched batch only when it is that same
  batch (same texts, same order), else embeds as usual (padding makes a vector's last bits depend on its batch);
* anchors go through the process's ``DescriptionMemo`` (thread-safe, keyed by text).

The store is touched only on the caller's thread (its connection is not shared); with a perception backend the
embedded texts carry captions that only the write computes, so then only the anchors are prefetched.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from ..models.threads import one_thread_each
from ..store import text_sha256
from ..types import Session


#: threads embedding queued sessions' batches at once: on two cores the embedder is the ingest's longest stage
#: (a 128K-token history: 25 -> 21 s with two, BLAS at one thread each; ``models.threads``)
EMBED_WORKERS = 2


class Prefetcher:
    """Two worker threads, fed by the writer (``Memory.add_sessions``) ahead of itself. The batches it
    will embed are decided on the writer's thread when a session is queued, in session order, and registered in
    ``method.prefetched`` (batch key -> Future of its vectors), so the writer waits for a batch still in flight
    instead of embedding it again."""

    def __init__(self, method, store, *, embed: bool = True):
        self.method, self.store, self.embed = method, store, embed
        self.emb = method.models.text_embedder
        # embeddings on EMBED_WORKERS threads (each batch stands alone), text anchors on one, in session order (the
        # describe memo is one lock); NumPy's products, torch's and spaCy's parser release the GIL, so they overlap
        # with the writer's thread on two or more cores, each library held at one thread of its own
        self._threads = one_thread_each()
        self._threads.__enter__()
        self._embedder = ThreadPoolExecutor(EMBED_WORKERS, thread_name_prefix="c3m-prefetch-embed")
        self._describer = ThreadPoolExecutor(1, thread_name_prefix="c3m-prefetch-anchors")
        self._queued: list[Future] = []
        self._embedded: set[str] = set()  # hashes an earlier queued session embeds

    def queue(self, session: Session) -> None:
        """Queue one session's model work (call in session order, on the writer's thread). A session the writer
        will refuse (bad input) is skipped here: ``add_session`` raises its clear error when it gets there."""
        self._queued = [f for f in self._queued if not f.done()]
        try:
            self._queue(session)
        except Exception:  # noqa: BLE001 - the writer validates and reports
            return

    def _queue(self, session: Session) -> None:
        if self.store.session_record(self.method.namespace, session.id) is not None:
            return  # stored already: a re-ingest is a no-op with no model work (nor any model loaded)
        describe = self.method.prefetch_describe(session)
        if describe:
            self._queued.append(self._describer.submit(self.method.anchors.describe, describe))
        if not self.embed:
            return
        texts = self.method.prefetch_embedding_texts(session)
        hashes = [text_sha256(t) for t in texts]
        memo = self.method._vector_memo
        fresh = [h for h in dict.fromkeys(hashes) if h not in memo and h not in self._embedded]
        cached = set(self.store.get_vectors(self.emb.name, fresh)) if fresh else set()
        todo = {h: t for h, t in zip(hashes, texts) if h in fresh and h not in cached}
        if todo:  # text_vectors' own batch for this session, in its order (MemoryMethod.text_vectors)
            self._embedded.update(todo)
            job = self._embedder.submit(self.emb.embed, list(todo.values()))
            self.method.prefetched[tuple(todo)] = job
            self._queued.append(job)

    def close(self) -> None:
        for f in self._queued:
            f.cancel()
        self._embedder.shutdown(wait=True)
        self._describer.shutdown(wait=True)
        self.method.prefetched.clear()  # batches the writer never asked for (an error stopped the ingest)
        self._threads.__exit__(None, None, None)


__all__ = ["Prefetcher"]
