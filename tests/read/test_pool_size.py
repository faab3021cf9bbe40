"""The index pool grows with the expansion (``bmer.pool_size``, issue #43): a spill entry can point at most of a
long history, and a fixed top-48 by cosine of ~2,000 expanded turns dropped gold turns the reranker would have put
first. A small expansion keeps the pool the reranker was trained on."""
from __future__ import annotations

import pytest

from c3m.methods.c3m import PAPER, C3MConfig
from c3m.read.bmer import BmerConfig, pool_size
from c3m.errors import InvalidInput


@pytest.mark.parametrize("expanded, want", [(0, 48), (1, 48), (360, 48), (480, 48), (481, 49), (1200, 120),
                                            (1920, 192), (5000, 192)])
def test_pool_is_a_tenth_of_the_expansion_between_pool_and_pool_max(expanded, want):
    assert pool_size(BmerConfig(pool=48, pool_share=0.1, pool_max=192), expanded) == want


def test_share_zero_keeps_the_fixed_pool_and_the_paper_preset_keeps_it():
    assert pool_size(BmerConfig(pool=48, pool_share=0.0), 5000) == 48
    assert PAPER.bmer().pool_share == 0.0
    assert C3MConfig().bmer().pool_share == 0.1  # the c3m default
    assert pool_size(BmerConfig(pool=300, pool_share=0.1, pool_max=192), 5000) == 300  # never below pool


def test_a_negative_share_names_the_option():
    with pytest.raises(InvalidInput, match="pool_share"):
        C3MConfig.from_options({"pool_share": -0.1}).validate()
