"""``KeyArena``: many tenants' key vectors in one contiguous matrix, so one ragged top-k serves them all.

A service answers many users at once; each user (namespace) has its own few thousand Raw-Node vectors. One
ragged ``candidate_topk`` launch over a batch of questions needs every tenant's rows in *one* key matrix, each
query searching its tenant's ``(start, end)`` range. Concatenating the tenants per batch would copy every key
once per batch (gigabytes at a thousand tenants), so the arena keeps them in place:

* each tenant owns a slot with slack (its capacity is a power of two), so appending a session writes its
  rows in place;
* a tenant that outgrows its slot moves to the end of the matrix (amortised O(1) per row, like a growing
  array); the hole it leaves is reclaimed by compaction once holes outweigh the live rows;
* the backing matrix doubles when full. Row views handed out are valid until the next append: callers ask
  for ``rows(tenant)`` again rather than keep one.

``device_keys(device)`` mirrors the matrix on a CUDA device for the Triton path (re-uploaded only after
a change).
"""
from __future__ import annotations

import numpy as np


class KeyArena:
    def __init__(self, dim: int, dtype=np.float32, capacity: int = 1024):
        self.dim = dim
        self._data = np.zeros((max(1, capacity), dim), dtype)
        self._slots: dict[str, list[int]] = {}  # tenant -> [start, rows, capacity]
        self._end = 0            # first row never handed to a slot
        self._live_capacity = 0  # rows held by current slots (the rest below _end are holes)
        self.generation = 0      # bumped on every change (device mirrors compare it)
        self._mirror: tuple[str, int, object] | None = None

    # -- reading -------------------------------------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        """The backing matrix (rows outside every tenant's span are slack or holes: never search them)."""
        return self._data

    def span(self, tenant: str) -> tuple[int, int]:
        """(start, end) rows of ``tenant`` in ``data`` (empty span for an unknown tenant)."""
        s = self._slots.get(tenant)
        return (0, 0) if s is None else (s[0], s[0] + s[1])

    def rows(self, tenant: str) -> np.ndarray:
        start, end = self.span(tenant)
        return self._data[start:end]

    def __len__(self) -> int:
        return sum(s[1] for s in self._slots.values())

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    def device_keys(self, device: str):
        """``data`` as a torch tensor on ``device`` (a zero-copy view on the CPU; a cached upload on CUDA)."""
        import torch

        if device == "cpu":
            return torch.from_numpy(self._data)
        if self._mirror is None or self._mirror[:2] != (device, self.generation):
            self._mirror = (device, self.generation, torch.from_numpy(self._data).to(device))
        return self._mirror[2]

    # -- writing -------------------------------------------------------------------------------
    def clear(self, tenant: str) -> None:
        """Forget a tenant's rows (its slot stays for the next ``extend``)."""
        if tenant in self._slots:
            self._slots[tenant][1] = 0
            self.generation += 1

    def drop(self, tenant: str) -> None:
        s = self._slots.pop(tenant, None)
        if s is not None:
            self._live_capacity -= s[2]
            self.generation += 1

    def extend(self, tenant: str, vecs: np.ndarray) -> None:
        vecs = np.asarray(vecs, self._data.dtype).reshape(-1, self.dim)
        if not len(vecs):
            return
        slot = self._slots.get(tenant)
        need = (slot[1] if slot else 0) + len(vecs)
        if slot is None or need > slot[2]:
            slot = self._move(tenant, slot, need)
        self._data[slot[0] + slot[1]: slot[0] + need] = vecs
        slot[1] = need
        self.generation += 1

    def _move(self, tenant: str, slot: list[int] | None, need: int) -> list[int]:
        cap = 1 << max(4, (need - 1).bit_length())
        old = self._data[slot[0]:slot[0] + slot[1]].copy() if slot else None
        if slot is not None:
            self._live_capacity -= slot[2]
            del self._slots[tenant]
        holes = self._end - self._live_capacity
        if holes > max(self._live_capacity, 1 << 16):
            self._compact()
        if self._end + cap > len(self._data):
            grown = np.zeros((max(2 * len(self._data), self._end + cap), self.dim), self._data.dtype)
            grown[:self._end] = self._data[:self._end]
            self._data = grown
        new = [self._end, 0, cap]
        if old is not None:
            self._data[new[0]:new[0] + len(old)] = old
            new[1] = len(old)
        self._end += cap
        self._live_capacity += cap
        self._slots[tenant] = new
        return new

    def _compact(self) -> None:
        """Rewrite every live slot contiguously (holes left by moved tenants are reclaimed)."""
        data = np.zeros((max(len(self._data), 1), self.dim), self._data.dtype)
        end = 0
        for s in self._slots.values():
            data[end:end + s[1]] = self._data[s[0]:s[0] + s[1]]
            s[0] = end
            end += s[2]
        self._data, self._end = data, end
