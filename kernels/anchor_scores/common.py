"""Input normalisation shared by the anchor_scores backends: canonical ids, dedupe, inverse index."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..dispatch import record_transfer

OP = "anchor_scores"


def _np(x, dtype=None, op: str = OP):
    if x is None:
        return None
    if type(x).__module__.startswith("torch"):
        record_transfer(op, "download")
        x = x.detach().cpu().numpy()
    return np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)


def _on(x, device, dtype, op: str = OP):
    """``x`` as a ``dtype`` tensor on ``device``; a host array (or a tensor elsewhere) is copied there, and counted."""
    import torch

    if torch.is_tensor(x):
        if x.device != torch.device(device):
            record_transfer(op, "upload")
        return x.to(device=device, dtype=dtype)
    record_transfer(op, "upload")
    return torch.as_tensor(np.asarray(x), dtype=dtype).to(device)


class DeviceCSR(NamedTuple):
    """An :class:`AnchorIndex`'s CSR arrays as int64 tensors on one device (:meth:`AnchorIndex.on_device`)."""

    ep_indptr: Any
    ep_anchors: Any
    an_indptr: Any
    an_episodes: Any
    max_len: int  # most anchors on one episode (pads the seeds' anchor gather)


@dataclass
class AnchorIndex:
    """Episode->anchor CSR (deduplicated, canonical ids, sorted) and its anchor->episode inverse.

    Attributes:
        ep_indptr, ep_anchors: CSR rows per episode (int64).
        an_indptr, an_episodes: CSR rows per canonical anchor (int64), episodes ascending.
        num_episodes, num_anchors: sizes (``num_anchors`` counts canonical ids).

    The arrays are not to be changed once built: :meth:`on_device` keeps device copies of them.
    """

    ep_indptr: np.ndarray
    ep_anchors: np.ndarray
    an_indptr: np.ndarray
    an_episodes: np.ndarray
    num_episodes: int
    num_anchors: int
    _device_csr: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def on_device(self, device, op: str = OP) -> DeviceCSR:
        """The CSR as tensors on ``device``, uploaded the first time a device asks and kept on the index, so the
        Triton path's repeated calls on one index upload only their queries."""
        key = str(device)
        got = self._device_csr.get(key)
        if got is None:
            import torch

            arrays = (self.ep_indptr, self.ep_anchors, self.an_indptr, self.an_episodes)
            record_transfer(op, "upload", len(arrays))
            tensors = [torch.from_numpy(np.ascontiguousarray(a, np.int64)).to(device) for a in arrays]
            max_len = int(np.diff(self.ep_indptr).max()) if self.num_episodes else 0
            got = self._device_csr[key] = DeviceCSR(*tensors, max_len)
        return got


def build_anchor_index(ep_indptr, ep_anchors, num_anchors: int, canonical=None) -> AnchorIndex:
    """Validate and normalise episode anchor sets.

    Args:
        ep_indptr: ``[E+1]`` non-decreasing ints, ``ep_indptr[0] == 0``; episode e owns
            ``ep_anchors[ep_indptr[e]:ep_indptr[e+1]]``.
        ep_anchors: ``[nnz]`` anchor ids in ``[0, num_anchors)``. Text and visual anchors share one id
            space; duplicates inside an episode are ignored (an anchor counts once per episode).
        num_anchors: size of the anchor id space (``len(idf)``).
        canonical: optional ``[num_anchors]`` map to canonical ids; use it to make cross-modal matches
            count (e.g. the visual tag "dog" -> the text entity "dog"). ``idf`` and ``sim`` are indexed
            by canonical id.
    """
    indptr = _np(ep_indptr)
    anchors = _np(ep_anchors)
    if indptr.ndim != 1 or indptr.size < 1 or indptr.dtype.kind not in "iu":
        raise ValueError(f"{OP}: ep_indptr must be a 1-D int array [E+1], got "
                         f"{list(indptr.shape)} {indptr.dtype}")
    if anchors.ndim != 1 or (anchors.size and anchors.dtype.kind not in "iu"):
        raise ValueError(f"{OP}: ep_anchors must be a 1-D int array, got {list(anchors.shape)} "
                         f"{anchors.dtype}")
    indptr = indptr.astype(np.int64)
    anchors = anchors.astype(np.int64)
    if indptr[0] != 0 or indptr[-1] != anchors.size or np.any(np.diff(indptr) < 0):
        raise ValueError(f"{OP}: ep_indptr must start at 0, be non-decreasing and end at "
                         f"len(ep_anchors)={anchors.size}; got start {int(indptr[0])}, end "
                         f"{int(indptr[-1])}")
    if anchors.size and (anchors.min() < 0 or anchors.max() >= num_anchors):
        raise ValueError(f"{OP}: ep_anchors must lie in [0, num_anchors={num_anchors}) "
                         f"(num_anchors = len(idf)); got [{int(anchors.min())}, {int(anchors.max())}]")
    if canonical is not None:
        can = _np(canonical).astype(np.int64)
        if can.shape != (num_anchors,) or (can.size and (can.min() < 0 or can.max() >= num_anchors)):
            raise ValueError(f"{OP}: canonical must be [num_anchors={num_anchors}] ids in "
                             f"[0, {num_anchors}), got shape {list(can.shape)}")
        anchors = can[anchors]
    E = indptr.size - 1
    ep_of = np.repeat(np.arange(E, dtype=np.int64), np.diff(indptr))
    key = np.unique(ep_of * num_anchors + anchors)  # sorted, deduplicated (episode, anchor)
    ep_u = key // max(num_anchors, 1)
    an_u = key - ep_u * num_anchors
    new_indptr = np.zeros(E + 1, np.int64)
    np.cumsum(np.bincount(ep_u, minlength=E), out=new_indptr[1:])
    order = np.argsort(an_u, kind="stable")  # episodes stay ascending within an anchor
    an_indptr = np.zeros(num_anchors + 1, np.int64)
    np.cumsum(np.bincount(an_u, minlength=num_anchors), out=an_indptr[1:])
    return AnchorIndex(new_indptr, an_u, an_indptr, ep_u[order], E, num_anchors)
