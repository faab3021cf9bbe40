"""A LightGBM model file evaluated in numpy: the reranker's inference without importing LightGBM.

Why: ``import lightgbm`` pulls in scipy (and scikit-learn when it is installed) — about 0.8 s and ~57,000 more
objects for the garbage collector on every process that reads — for what is, at inference, a sum of small decision
trees. Training stays with LightGBM (``training/train_reranker.py``), and LightGBM's own ``Booster.predict`` is the
reference this module is tested against (``tests/read/test_trees.py``: random rows, NaNs, zeros, values on thresholds).

Supported: the text format's numerical splits with every missing-value mode (``decision_type``: bit 1 = default
left, bits 2-3 = missing type None / Zero / NaN), one tree per iteration, no linear trees, no categorical splits
(a model with them is refused, naming the fix). Semantics follow LightGBM's predictor and
``Tree::NumericalDecision``: a value within ±1e-35 of 0 is read as 0 (the predictor stores rows sparsely); a NaN
counts as 0 unless the split's missing type is NaN; a missing value (NaN, or ±1e-35 around 0 for type Zero) goes
the default way; otherwise ``x <= threshold`` goes left. Values are compared in float64, as LightGBM does.

Evaluation walks every tree at once: each step gathers, for every (row, tree), the current node's feature and
threshold and moves to a child; leaves are negative node ids. A 200-tree, 15-leaf model over 100 rows takes well
under a millisecond.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InvalidInput

ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold: the float 1e-35f, as a double


class TreeEnsemble:
    """Every tree of a model as padded arrays [trees, nodes] (internal nodes) and [trees, leaves]."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        header, trees = _parse(self.path.read_text())
        if int(header.get("num_tree_per_iteration", "1")) != 1:
            raise InvalidInput("reranker", f"{path}: a model with several trees per iteration is not supported",
                               fix="train a single-output model (LambdaRank, regression or binary)")
        self.feature_names = tuple(header.get("feature_names", "").split())
        T = len(trees)
        N = max([len(t["left_child"]) for t in trees] + [1])
        L = max([len(t["leaf_value"]) for t in trees] + [1])
        self.feature = np.zeros((T, N), np.int64)
        self.threshold = np.zeros((T, N))
        self.default_left = np.zeros((T, N), bool)
        self.missing = np.zeros((T, N), np.int64)
        self.left = np.full((T, N), -1, np.int64)
        self.right = np.full((T, N), -1, np.int64)
        self.leaf = np.zeros((T, L))
        self.single = np.zeros(T, bool)  # a one-leaf tree: its value, no split
        for i, t in enumerate(trees):
            n = len(t["left_child"])
            self.leaf[i, :len(t["leaf_value"])] = t["leaf_value"]
            if n == 0:
                self.single[i] = True
                continue
            decision = np.asarray(t["decision_type"], np.int64)
            if (decision & 1).any() or int(t.get("num_cat", [0])[0]):
                raise InvalidInput("reranker", f"{path}: categorical splits are not supported",
                                   fix="train the reranker on numerical features only")
            self.feature[i, :n] = t["split_feature"]
            self.threshold[i, :n] = t["threshold"]
            self.default_left[i, :n] = (decision & 2) > 0
            self.missing[i, :n] = (decision >> 2) & 3
            self.left[i, :n] = t["left_child"]
            self.right[i, :n] = t["right_child"]
        # flat, global ids: internal node (tree, k) -> tree * N + k; leaf (tree, k) -> -1 - (tree * L + k)
        base_n, base_l = (np.arange(T) * N)[:, None], (np.arange(T) * L)[:, None]
        glob = lambda child: np.where(child >= 0, base_n + child, -1 - (base_l + (-child - 1)))  # noqa: E731
        self._child = np.stack([glob(self.left).ravel(), glob(self.right).ravel()], 1).ravel()  # [2 g + went right]
        self._feature, self._threshold = self.feature.ravel(), self.threshold.ravel()
        # where a NaN goes: the default way for types Zero and NaN, else as 0 would
        self._nan_left = np.where(self.missing > 0, self.default_left, 0.0 <= self.threshold).ravel()
        self._zero_type = (self.missing == 1).ravel()
        self._has_zero_type = bool(self._zero_type.any())
        self._default_left = self.default_left.ravel()
        self._roots = np.where(self.single, -1 - np.arange(T) * L, np.arange(T) * N)
        self._leaf = self.leaf.ravel()

    @property
    def num_trees(self) -> int:
        return len(self.leaf)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The raw score of every row (the sum of its leaf values over the trees). Every (row, tree) pair walks
        down together; the pairs that reached a leaf drop out of the next step."""
        X = np.ascontiguousarray(X, np.float64)
        R, T = len(X), self.num_trees
        if R == 0 or T == 0:
            return np.zeros(R)
        flat = np.where(np.abs(X) <= ZERO, 0.0, X).ravel()  # LightGBM reads |x| <= 1e-35 as an absent 0
        walk = _compiled_walk()
        if walk is not None:  # the same walk, one (row, tree) at a time in compiled code (~10x faster)
            leaf = np.empty(R * T, np.int64)
            walk(flat, X.shape[1], self._roots, self._feature, self._threshold, self._child, self._nan_left,
                 self._zero_type, self._default_left, self._has_zero_type, leaf)
            return self._leaf[leaf].reshape(R, T).sum(1)
        cur = np.tile(self._roots, R)                                  # [R * T] global node ids
        offset = np.repeat(np.arange(R) * X.shape[1], T)
        leaf = np.where(cur < 0, -1 - cur, 0)
        live = np.flatnonzero(cur >= 0)
        while live.size:
            g = cur[live]
            x = flat[offset[live] + self._feature[g]]
            nan = np.isnan(x)
            go_left = np.where(nan, self._nan_left[g], x <= self._threshold[g])
            if self._has_zero_type:  # type Zero: a value within ±1e-35 of 0 goes the default way
                zero = self._zero_type[g] & (np.abs(x) <= ZERO)
                go_left = np.where(zero, self._default_left[g], go_left)
            nxt = self._child[2 * g + ~go_left]
            done = nxt < 0
            leaf[live[done]] = -1 - nxt[done]
            cur[live] = nxt
            live = live[~done]
        return self._leaf[leaf].reshape(R, T).sum(1)


_WALK: list = []


def _compiled_walk():
    """The numba walk of every (row, tree) (``_walk_body``), or None without numba (then numpy walks them)."""
    if not _WALK:
        try:
            from c3m_kernels._compat import have_numba, njit
        except ImportError:
            _WALK.append(None)
        else:
            _WALK.append(njit(_walk_body) if have_numba()[0] else None)
    return _WALK[0]


def _walk_body(flat, ncol, roots, feature, threshold, child, nan_left, zero_type, default_left, has_zero, out):
    """``TreeEnsemble.predict``'s walk for one (row, tree) pair at a time: the leaf each reaches, into ``out``."""
    T = len(roots)
    R = len(out) // T if T else 0
    for r in range(R):
        base = r * ncol
        for t in range(T):
            g = roots[t]
            while g >= 0:
                x = flat[base + feature[g]]
                if np.isnan(x):
                    left = nan_left[g]
                else:
                    left = x <= threshold[g]
                if has_zero and zero_type[g] and abs(x) <= ZERO:
                    left = default_left[g]
                g = child[2 * g + (0 if left else 1)]
            out[r * T + t] = -1 - g


def _parse(text: str) -> tuple[dict, list[dict]]:
    """(header key=values, [tree key=values]) of a LightGBM text model; tree fields as lists of numbers."""
    header: dict[str, str] = {}
    trees: list[dict] = []
    current: dict | None = None
    for line in text.splitlines():
        if line.startswith("Tree="):
            current = {}
            trees.append(current)
            continue
        if line.startswith("end of trees"):
            break
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        if current is None:
            header[key] = value
        elif key in ("split_feature", "left_child", "right_child", "decision_type", "num_cat", "num_leaves"):
            current[key] = [int(v) for v in value.split()]
        elif key in ("threshold", "leaf_value"):
            current[key] = [float(v) for v in value.split()]
        elif key == "is_linear" and value.strip() not in ("", "0"):
            raise InvalidInput("reranker", "linear trees are not supported", fix="train with linear_tree=false")
    for t in trees:
        for key in ("split_feature", "left_child", "right_child", "decision_type", "threshold"):
            t.setdefault(key, [])
        t.setdefault("leaf_value", [0.0])
    return header, trees
