"""``one_thread_each``: BLAS (and torch, when loaded) at one thread while held, restored when the last holder leaves."""
from __future__ import annotations

import threading

import numpy as np  # noqa: F401  (loads OpenBLAS, so threadpoolctl has a library to cap)
import pytest

from c3m.models.threads import one_thread_each, serial

threadpoolctl = pytest.importorskip("threadpoolctl")


def blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


def test_caps_and_restores_across_holders():
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        assert not serial()
        outer = one_thread_each()
        outer.__enter__()
        assert serial() and set(blas_threads()) == {1}
        done = threading.Event()

        def other():  # a second holder on another thread leaves first: the cap stays for the outer one
            with one_thread_each():
                assert serial()
            done.set()

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert done.is_set() and serial() and set(blas_threads()) == {1}
        outer.__exit__(None, None, None)
        assert not serial() and blas_threads() == before


def test_torch_threads_restored():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with one_thread_each():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
