"""Small numba helpers shared by the CPU kernels."""
from __future__ import annotations

from ._compat import njit


@njit(inline="always")
def sort_row(out_s, out_i, row, cnt):  # pragma: no cover - numba
    """Insertion-sort the first ``cnt`` slots of one row: score descending, then index ascending (the
    tie rule every top-k here documents). ``cnt`` is at most k, so insertion sort beats anything fancier."""
    for t in range(1, cnt):
        vs = out_s[row, t]
        vi = out_i[row, t]
        u = t - 1
        while u >= 0 and (out_s[row, u] < vs or (out_s[row, u] == vs and out_i[row, u] > vi)):
            out_s[row, u + 1] = out_s[row, u]
            out_i[row, u + 1] = out_i[row, u]
            u -= 1
        out_s[row, u + 1] = vs
        out_i[row, u + 1] = vi
