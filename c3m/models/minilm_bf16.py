"""``minilm-bf16`` text embedder: the same all-MiniLM-L6-v2, its matrix products in bfloat16 through torch.

Why: MiniLM's float32 products already run near a CPU core's float32 peak (``minilm.py``), so embedding is most of
a long history's ingest (a 128K-token history: ~14 CPU seconds of ~30). CPUs with AVX-512 BF16 or AMX do twice
the float32 multiply-adds in bfloat16; here the products take bfloat16 inputs and weights and accumulate in
float32, while the embeddings, layer norms, softmax, GELU and pooling stay in float32. On the 2-core AMD EPYC
(AVX-512 BF16) it embeds 1.9x faster than ``minilm``, with cosine >= 0.9999 to its vectors
(``tests/test_minilm_bf16.py``; ``benchmarks/results/write-cost-cpu`` has the ingest and retrieval numbers).

Opt-in, not the default: its vectors differ from ``minilm``'s in the fourth decimal and with the CPU (oneDNN picks
its kernels per machine), and on a CPU without bfloat16 instructions it runs slower than ``minilm``. It has its
own name, so a store's vector cache never mixes the two. It needs torch (``pip install 'c3m[models]'``), which
adds ~1 s of start-up; ``minilm`` does not.
"""
from __future__ import annotations

import numpy as np

from .minilm import MiniLMEmbedder


class MiniLMBF16Embedder(MiniLMEmbedder):
    name = "minilm-l6-v2-bf16"

    def __init__(self, path=None, *, device: str = "cpu", batch_size: int = 64, max_length: int = 256):
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise ImportError("the 'minilm-bf16' embedder needs torch; pip install 'c3m[models]' "
                              "(or use the 'minilm' embedder, which does not)") from exc
        super().__init__(path, device=device, batch_size=batch_size, max_length=max_length)
        self._torch_layers = None

    def _load_weights(self) -> None:
        import torch

        super()._load_weights()
        f32 = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        bf16 = lambda w: f32(w.T).to(torch.bfloat16)  # (in, out) -> linear's (out, in)  # noqa: E731
        self._torch_emb = (f32(self.word), f32(self.pos), f32(self.type), *map(f32, self.emb_ln))
        self._torch_layers = [
            ((bf16(wqkv), f32(bqkv)), (bf16(wo), f32(bo)), tuple(map(f32, ln1)), (bf16(wi), f32(bi)),
             (bf16(wf), f32(bf)), tuple(map(f32, ln2)))
            for (wqkv, bqkv), (wo, bo), ln1, (wi, bi), (wf, bf), ln2 in self.layers]

    def _encode(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        if self._torch_layers is None:
            self._load_weights()
        (b, n), h, nh = ids.shape, self.dim, self.heads

        def linear(x, weight, bias):
            return F.linear(x.to(torch.bfloat16), weight).float() + bias

        with torch.inference_mode():
            word, pos, typ, gamma, beta = self._torch_emb
            x = word[torch.from_numpy(ids)] + pos[:n] + typ[torch.from_numpy(types)]
            x = F.layer_norm(x, (h,), gamma, beta, self.eps)
            keep = torch.from_numpy(mask)[:, None, None, :]
            bias = None if mask.all() else torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
            for (wqkv, bqkv), (wo, bo), ln1, (wi, bi), (wf, bf), ln2 in self._torch_layers:
                q, k, v = linear(x, wqkv, bqkv).view(b, n, 3, nh, h // nh).permute(2, 0, 3, 1, 4)
                # the query projection carries 1/sqrt(head dim) already (MiniLMEmbedder._load_weights)
                ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)
                x = F.layer_norm(linear(ctx.transpose(1, 2).reshape(b, n, h), wo, bo) + x, (h,), *ln1, self.eps)
                x = F.layer_norm(linear(F.gelu(linear(x, wi, bi)), wf, bf) + x, (h,), *ln2, self.eps)
            return x.numpy()
