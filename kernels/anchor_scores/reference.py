"""Dense PyTorch references for anchor scoring and the anchor graph (small inputs only).

They build the ``E x A`` incidence matrix X and use matrix products, the textbook formulation:
``U = (onehot(seeds) @ X) > 0`` (the seeds' anchors), ``score = (U * idf * sim) @ X.T``, neighbours =
episodes sharing an anchor with U, minus the seeds; graph weights ``(X * idf) @ X.T``.
"""
from __future__ import annotations

import numpy as np


def _incidence(index):
    import torch

    X = torch.zeros(index.num_episodes, index.num_anchors, dtype=torch.float64)
    rows = np.repeat(np.arange(index.num_episodes), np.diff(index.ep_indptr))
    X[torch.from_numpy(rows), torch.from_numpy(index.ep_anchors)] = 1.0
    return X


def expand_reference(index, idf, sim, seeds, k):
    import torch

    B = seeds.shape[0]
    E = index.num_episodes
    out_s = torch.full((B, k), float("-inf"), dtype=torch.float64)
    out_i = torch.full((B, k), -1, dtype=torch.int64)
    if B == 0 or k == 0 or E == 0:
        return out_s.numpy(), out_i.numpy()
    X = _incidence(index)
    S1 = torch.zeros(B, E, dtype=torch.float64)
    sd = torch.from_numpy(np.asarray(seeds, np.int64))
    for b in range(B):
        for s in sd[b].tolist():
            if s >= 0:
                S1[b, s] = 1.0
    U = (S1 @ X) > 0
    W = U.double() * torch.from_numpy(np.asarray(idf, np.float64))[None, :] * \
        torch.from_numpy(np.asarray(sim, np.float64))
    score = W @ X.T
    nbr = ((U.double() @ X.T) > 0) & (S1 == 0)
    score = torch.where(nbr, score, torch.tensor(float("-inf"), dtype=torch.float64))
    kk = min(k, E)
    ts, ti = torch.topk(score, kk, dim=1)
    ti[torch.isneginf(ts)] = -1
    out_s[:, :kk] = ts
    out_i[:, :kk] = ti
    return out_s.numpy(), out_i.numpy()


def graph_reference(index, idf, k_edge, max_postings=None):
    import torch

    E = index.num_episodes
    out_w = torch.full((E, k_edge), float("-inf"), dtype=torch.float64)
    out_n = torch.full((E, k_edge), -1, dtype=torch.int64)
    if E == 0 or k_edge == 0:
        return out_w.numpy(), out_n.numpy()
    X = _incidence(index)
    idf_t = torch.from_numpy(np.asarray(idf, np.float64)).clone()
    keep = torch.ones_like(idf_t)
    if max_postings:
        keep = (X.sum(0) <= max_postings).double()
    Xk = X * keep[None, :]
    Wm = (Xk * idf_t[None, :]) @ Xk.T
    share = (Xk @ Xk.T) > 0
    share.fill_diagonal_(False)
    Wm = torch.where(share, Wm, torch.tensor(float("-inf"), dtype=torch.float64))
    kk = min(k_edge, E)
    ts, ti = torch.topk(Wm, kk, dim=1)
    ti[torch.isneginf(ts)] = -1
    out_w[:, :kk] = ts
    out_n[:, :kk] = ti
    return out_w.numpy(), out_n.numpy()
