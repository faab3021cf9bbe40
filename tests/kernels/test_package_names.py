"""``from c3m_kernels import <op>`` must give something callable as the op even after the op's
sub-package was imported directly (which rebinds the package attribute to the module)."""
import subprocess
import sys

import numpy as np
import pytest


@pytest.mark.parametrize("op", ["candidate_topk", "anchor_scores", "budget_solve"])
def test_op_is_callable_after_its_subpackage_was_imported(op):
    code = f"""
import importlib, c3m_kernels
importlib.import_module("c3m_kernels.{op}")
from c3m_kernels import {op}
assert callable({op}), type({op})
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_module_call_gives_the_same_result_as_the_function():
    import c3m_kernels.candidate_topk as mod
    from c3m_kernels.candidate_topk import candidate_topk

    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((20, 8)).astype(np.float32)
    s1, i1 = mod(q, k, 3, backend="reference")
    s2, i2 = candidate_topk(q, k, 3, backend="reference")
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2)
