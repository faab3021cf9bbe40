"""``local`` backends: transformers models from a folder the user gives, on GPU or CPU.

* ``LocalTextEmbedder`` — any encoder (BERT, MiniLM, E5, BGE...): mean or CLS pooling, L2-normalised.
* ``LocalImageEmbedder`` — a CLIP/SigLIP-style dual encoder: image vectors in its own text space
  (``embed_texts`` gives the text side, for zero-shot visual anchors such as "a photo of a red mug").
* ``LocalAnswerer`` — a causal LM or a vision-language model (Qwen2-VL, LLaVA...): SmolLM's prompt and
  reply clean-up; a VLM also sees the context's original images through ``image_loader``.
* ``LocalExtractor`` — a VLM for captions, visual anchors (validated JSON), grounding boxes and summaries.

Nothing is downloaded: every ``from_pretrained`` gets ``local_files_only=True`` and a folder that is
checked first, so a wrong path fails at once with a ``C3MError`` naming the folder. ``device="auto"``
picks CUDA when present; on CUDA the weights are placed with accelerate's ``device_map="auto"`` (a model
larger than one GPU spreads over GPUs, then CPU), in bf16 unless ``dtype`` says otherwise; on CPU fp32.
Names carry the folder name and a fingerprint of its config and weights, so they key caches safely.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import C3MError
from ..types import Answer, Context, ImageRef, chain_lines
from .answer import REFUSAL
from .api import item_header, parse_json_reply, validate
from .base import VisualAnchor
from .judge import is_refusal
from .smollm import _CITE, _PREFIX, SYSTEM, SmolLMAnswerer, _citations, _grounded

log = logging.getLogger(__name__)

EXTRACT_PROMPT_VERSION = "c3m-local-extract-v1"
VISION_SYSTEM = SYSTEM + " Images follow the excerpt they belong to."
_WEIGHTS = ("*.safetensors", "*.bin", "*.pt")
_SAMPLE = 1 << 20  # bytes hashed at each end of a weights file


# ---------------------------------------------------------------------------------------------
# Folders, names, devices
# ---------------------------------------------------------------------------------------------
def model_folder(path: str | Path) -> Path:
    """The folder, checked: it must exist and hold a transformers ``config.json`` (never a hub id)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise C3MError(f"local model folder {str(folder)!r} does not exist",
                       fix="pass the path of a folder saved with save_pretrained (c3m never downloads; fetch it "
                           "first, e.g. `huggingface-cli download <repo> --local-dir <folder>`)")
    if not (folder / "config.json").is_file():
        raise C3MError(f"{str(folder)!r} has no config.json, so it is not a transformers model folder",
                       fix="point at the folder that holds config.json and the weights (model.save_pretrained)")
    return folder.resolve()


def fingerprint(folder: Path) -> str:
    """Short hash of config.json plus each weights file's name, size and first/last MiB.

    Cheap on a 15 GB checkpoint (a full hash takes minutes) yet changes when a fine-tune replaces the weights.
    """
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for pattern in _WEIGHTS:
        for file in sorted(folder.glob(pattern)):
            size = file.stat().st_size
            h.update(f"{file.name}:{size}".encode())
            with open(file, "rb") as f:
                h.update(f.read(_SAMPLE))
                if size > 2 * _SAMPLE:
                    f.seek(size - _SAMPLE)
                    h.update(f.read())
    return h.hexdigest()[:10]


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise C3MError(f"device {device!r} asked for but CUDA is not available", fix="pass device='cpu' or 'auto'")
    return device


def resolve_dtype(dtype: Any, device: str):
    """bf16 on CUDA, fp32 on CPU (bf16 matmuls are slow on most CPUs); accepts a torch dtype or its name."""
    import torch

    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if isinstance(dtype, str):
        value = getattr(torch, dtype.removeprefix("torch."), None)
        if not isinstance(value, torch.dtype):
            raise C3MError(f"unknown dtype {dtype!r}", fix="use 'float32', 'bfloat16' or 'float16'")
        return value
    return dtype


def load_weights(auto_class: Any, folder: Path, *, device: str = "auto", dtype: Any = None,
                 device_map: Any = None) -> Any:
    """``auto_class.from_pretrained`` offline; bare ``cuda`` goes through accelerate's ``device_map="auto"``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # as in minilm.py: a weights bar per load is noise in CLI output
    device = resolve_device(device)
    if device_map is None and device == "cuda":
        device_map = "auto"
    kwargs: dict[str, Any] = {"local_files_only": True, "dtype": resolve_dtype(dtype, device)}
    if device_map is not None:
        kwargs["device_map"] = device_map
    try:
        model = auto_class.from_pretrained(folder, **kwargs)
    except (OSError, ValueError) as exc:
        raise C3MError(f"could not load {auto_class.__name__} from {str(folder)!r}: {exc}",
                       fix="check the folder holds the weights for this kind of model (and a transformers "
                           "version that knows its architecture)") from exc
    if device_map is None:
        model = model.to(device)
    return model.eval()


def _to_model(enc: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """Move a processor's output to the model's first device; float tensors (pixels) to its dtype."""
    import torch

    out = {}
    for key, value in enc.items():
        if isinstance(value, torch.Tensor):
            value = value.to(model.device, dtype=model.dtype) if value.is_floating_point() else value.to(model.device)
        out[key] = value
    return out


def _features(output: Any):
    """transformers 5 returns a ModelOutput from ``get_*_features`` (projected vectors in ``pooler_output``)."""
    return output if hasattr(output, "norm") else output.pooler_output


def decode_image(data: bytes):
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image.convert("RGB")


def _batches(n: int, size: int, progress: bool, desc: str):
    starts = range(0, n, size)
    if progress and n > size:
        try:
            from tqdm import tqdm

            return tqdm(starts, desc=desc, unit="batch")
        except ImportError:
            pass
    return starts


# ---------------------------------------------------------------------------------------------
# Embedders
# ---------------------------------------------------------------------------------------------
class LocalTextEmbedder:
    """TextEmbedder over an encoder folder; ``pooling="mean"`` (sentence-transformers style) or ``"cls"``."""

    def __init__(self, path: str | Path, *, device: str = "auto", dtype: Any = None, device_map: Any = None,
                 batch_size: int = 64, pooling: str = "mean", max_length: int = 512, progress: bool = False):
        from transformers import AutoModel, AutoTokenizer

        if pooling not in ("mean", "cls"):
            raise C3MError(f"unknown pooling {pooling!r}", fix="use pooling='mean' or 'cls'")
        self.folder = model_folder(path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
        self.model = load_weights(AutoModel, self.folder, device=device, dtype=dtype, device_map=device_map)
        self.batch_size, self.pooling, self.progress = batch_size, pooling, progress
        self.max_length = min(max_length, getattr(self.model.config, "max_position_embeddings", max_length))
        self.dim = int(self.model.config.hidden_size)
        self.name = f"local:{self.folder.name}-{fingerprint(self.folder)}-{pooling}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in _batches(len(texts), self.batch_size, self.progress, "embed texts"):
                batch = [t if t.strip() else "[empty]" for t in texts[start:start + self.batch_size]]
                enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length,
                                     return_tensors="pt")
                enc = _to_model(enc, self.model)
                hidden = self.model(**enc).last_hidden_state.float()
                if self.pooling == "cls":
                    pooled = hidden[:, 0]
                else:
                    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[start:start + len(batch)] = torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy()
        return out


class LocalImageEmbedder:
    """ImageEmbedder over a CLIP/SigLIP folder; ``embed_texts`` embeds prompts into the same space.

    ``text_space`` is this embedder's own name: its vectors compare with its own text side, not with the
    store's text embedder.
    """

    text_aligned = True

    def __init__(self, path: str | Path, *, device: str = "auto", dtype: Any = None, device_map: Any = None,
                 batch_size: int = 32, progress: bool = False):
        from transformers import AutoModel

        self.folder = model_folder(path)
        self.model = load_weights(AutoModel, self.folder, device=device, dtype=dtype, device_map=device_map)
        if not (hasattr(self.model, "get_image_features") and hasattr(self.model, "get_text_features")):
            raise C3MError(f"{str(self.folder)!r} holds a {type(self.model).__name__}, not an image-text dual encoder",
                           fix="use a CLIP or SigLIP folder (its model has get_image_features/get_text_features)")
        self.image_processor, self.tokenizer = _processor_parts(self.folder)
        config = self.model.config
        self.dim = int(getattr(config, "projection_dim", None) or config.vision_config.hidden_size)
        self.batch_size, self.progress = batch_size, progress
        self.name = f"local:{self.folder.name}-{fingerprint(self.folder)}"
        self.text_space = self.name
        # SigLIP was trained on texts padded to a fixed length; padding them otherwise skews its vectors.
        self._siglip = "siglip" in str(getattr(config, "model_type", ""))
        self._text_max = int(getattr(config.text_config, "max_position_embeddings", 77))

    def embed_images(self, images: Sequence[bytes]) -> np.ndarray:
        import torch

        out = np.zeros((len(images), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in _batches(len(images), self.batch_size, self.progress, "embed images"):
                batch = [decode_image(b) for b in images[start:start + self.batch_size]]
                enc = _to_model(self.image_processor(images=batch, return_tensors="pt"), self.model)
                vecs = _features(self.model.get_image_features(pixel_values=enc["pixel_values"])).float()
                out[start:start + len(batch)] = torch.nn.functional.normalize(vecs, dim=-1).cpu().numpy()
        return out

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Texts in the image space (zero-shot anchors: compare an image with "a photo of a red mug")."""
        import torch

        padding = "max_length" if self._siglip else True
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in _batches(len(texts), self.batch_size, self.progress, "embed prompts"):
                batch = list(texts[start:start + self.batch_size])
                enc = self.tokenizer(batch, padding=padding, truncation=True, max_length=self._text_max,
                                     return_tensors="pt")
                enc = {k: v for k, v in _to_model(enc, self.model).items() if k in ("input_ids", "attention_mask")}
                if self._siglip:
                    enc.pop("attention_mask", None)  # SigLIP's text tower attends to the padding it was trained on
                vecs = _features(self.model.get_text_features(**enc)).float()
                out[start:start + len(batch)] = torch.nn.functional.normalize(vecs, dim=-1).cpu().numpy()
        return out


def _processor_parts(folder: Path) -> tuple[Any, Any]:
    """(image processor, tokenizer): from a saved processor, else from their own files."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    image_processor = tokenizer = None
    try:
        processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
        image_processor = getattr(processor, "image_processor", None)
        tokenizer = getattr(processor, "tokenizer", None)
    except (OSError, ValueError, TypeError, KeyError) as exc:  # no processor_config: the parts load on their own
        log.debug("AutoProcessor failed for %s (%s); loading image processor and tokenizer separately", folder, exc)
    try:
        image_processor = image_processor or AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise C3MError(f"{str(folder)!r} lacks an image processor or tokenizer ({exc})",
                       fix="save both into the folder: processor.save_pretrained(folder)") from exc
    return image_processor, tokenizer


# ---------------------------------------------------------------------------------------------
# Generation: answerer (causal LM or VLM) and extractor (VLM)
# ---------------------------------------------------------------------------------------------
def load_generator(folder: Path, *, device: str = "auto", dtype: Any = None,
                   device_map: Any = None) -> tuple[Any, Any, Any]:
    """(model, tokenizer, processor): a VLM if the config has a ``vision_config`` (processor set), else a causal LM."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    processor = None
    if getattr(config, "vision_config", None) is not None:
        processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
        if getattr(processor, "image_processor", None) is None or getattr(processor, "tokenizer", None) is None:
            raise C3MError(f"{str(folder)!r} is a vision-language model but has no saved processor "
                           "(image processor + tokenizer)", fix="run processor.save_pretrained(folder) for this model")
        tokenizer = processor.tokenizer
        model = load_weights(AutoModelForImageTextToText, folder, device=device, dtype=dtype, device_map=device_map)
    else:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = load_weights(AutoModelForCausalLM, folder, device=device, dtype=dtype, device_map=device_map)
    if not (getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)):
        raise C3MError(f"{str(folder)!r} has no chat template", fix="use an instruct/chat model folder (it ships "
                       "chat_template.jinja or a chat_template in tokenizer_config.json)")
    return model, tokenizer, processor


def _parts(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


class LocalAnswerer(SmolLMAnswerer):
    """Answerer over a local chat model: SmolLM's prompt, greedy decoding and reply clean-up.

    A VLM (detected from the config) also gets the context's original images through ``image_loader``, up
    to ``max_images`` of them from the highest-scored items; an answer given with images shown skips the
    grounding check, since what it names may be visible only in an image. ``chat()`` accepts multimodal
    messages (content parts ``{"type": "image", "image": PIL.Image}``), which ``LocalExtractor`` uses.
    """

    def __init__(self, path: str | Path, *, device: str = "auto", dtype: Any = None, device_map: Any = None,
                 max_new_tokens: int = 32, max_prompt_tokens: int = 4096, grounding_check: bool = True,
                 max_images: int = 4, threads: int | None = None):
        self.folder = model_folder(path)
        self.fingerprint = fingerprint(self.folder)
        model, tokenizer, self.processor = load_generator(self.folder, device=device, dtype=dtype,
                                                          device_map=device_map)
        super().__init__(model, tokenizer, max_new_tokens=max_new_tokens, max_prompt_tokens=max_prompt_tokens,
                         grounding_check=grounding_check, threads=threads,
                         name=f"local:{self.folder.name}-{self.fingerprint}")
        self.vision = self.processor is not None
        self.sees_images = self.vision  # a text-only folder gets images as captions (Memory.ask)
        self.max_images = max_images

    def answer(self, question: str, context: Context, *,
               image_loader: Callable[[ImageRef], bytes] | None = None) -> Answer:
        images = self._images(context, image_loader)
        result = self.chat(self._fit(question, context, images))
        self.last_raw, self.last_usage, self.last_seconds = result.text, result.usage, result.seconds
        text = _PREFIX.sub("", " ".join(_CITE.sub(" ", result.text).split())).strip("\"' ")
        grounded = bool(images) or not self.grounding_check or _grounded(text, question, context)
        if is_refusal(text) or not grounded:
            return Answer(REFUSAL, context, self.name)
        return Answer(text, context, self.name, cited=_citations(result.text, text, context))

    def _images(self, context: Context, image_loader: Callable[[ImageRef], bytes] | None) -> dict[str, Any]:
        """sha256 -> decoded image, best-scored items first; an unreadable image is named, not shown."""
        if not self.vision or image_loader is None:
            return {}
        images: dict[str, Any] = {}
        for item in sorted(context.items, key=lambda i: -i.score):
            for ref in item.images:
                if len(images) >= self.max_images:
                    return images
                if ref.sha256 not in images:
                    try:
                        images[ref.sha256] = decode_image(image_loader(ref))
                    except Exception as exc:  # missing original, corrupt bytes: answer from the text
                        log.warning("image %s not shown to %s: %s", ref.sha256[:12], self.name, exc)
        return images

    def _fit(self, question: str, context: Context, images: Mapping[str, Any] | None = None):
        """As SmolLM's, but a VLM's messages carry the loaded images after their excerpts."""
        if not self.vision:
            return super()._fit(question, context)
        items = list(context.items)
        while True:
            msgs = self._vision_messages(question, items, images or {}, context.chains)
            if not items or self._encode(msgs)["input_ids"].shape[1] <= self.max_prompt_tokens:
                return msgs
            items.remove(min(items, key=lambda i: i.score))

    @staticmethod
    def _vision_messages(question: str, items: Sequence[Any], images: Mapping[str, Any],
                         chains: Sequence[Any] = ()) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = [{"type": "text", "text": "Memory excerpts:"}]
        sent: set[str] = set()
        for item in items:
            parts.append({"type": "text", "text": f"{item_header(item)} {item.text}"})
            for ref in item.images:
                if ref.sha256 in images and ref.sha256 not in sent:
                    sent.add(ref.sha256)
                    parts += [{"type": "text", "text": f"<image {ref.sha256[:12]}>"},
                              {"type": "image", "image": images[ref.sha256]}]
                else:
                    shown = " (shown above)" if ref.sha256 in sent else " (not shown)"
                    parts.append({"type": "text", "text": f"<image {ref.sha256[:12]}{shown}>"})
        if not items:
            parts.append({"type": "text", "text": "(none)"})
        parts += [{"type": "text", "text": line}  # chains of items dropped to fit the prompt go too
                  for line in chain_lines(chains, shown=items)]
        parts.append({"type": "text", "text": f"Question: {question}"})
        return [{"role": "system", "content": [{"type": "text", "text": VISION_SYSTEM}]},
                {"role": "user", "content": parts}]

    def _encode(self, messages):
        if not self.vision:
            return super()._encode(messages)
        images, clean = [], []
        for message in messages:
            parts = []
            for part in _parts(message["content"]):
                if part.get("type") == "image":
                    images.append(part["image"])
                    part = {"type": "image"}  # the template only marks the place; pixels go to the processor
                parts.append(part)
            clean.append({**message, "content": parts})
        prompt = self.processor.apply_chat_template(clean, add_generation_prompt=True, tokenize=False)
        enc = self.processor(text=[prompt], images=images or None, return_tensors="pt")
        return _to_model(enc, self.model)


CAPTION_SYSTEM = ("Describe the image in one or two factual sentences: the main objects, their colours and "
                  "positions, and any readable text. No speculation.")
SUMMARY_SYSTEM = ("Summarise the text in at most {words} words. Keep names, dates, numbers, places and any "
                  "change of state (moved, sold, renamed). Reply with the summary only.")
ANCHORS_SYSTEM = ("List the distinct objects visible in the image (at most 20). The image is {w}x{h} pixels. "
                  "Reply with ONLY a JSON list, no prose: [{{\"label\": \"mug\", \"attribute\": \"colour\", "
                  "\"value\": \"red\", \"bbox\": [x0, y0, x1, y1]}}, ...]. attribute/value may be null; bbox is "
                  "in pixels (or null).")
GROUND_SYSTEM = ("Find \"{phrase}\" in the image, which is {w}x{h} pixels. Reply with ONLY JSON: "
                 "{{\"bbox\": [x0, y0, x1, y1]}} in pixels, or {{\"bbox\": null}} if it is not visible.")
_BOX = {"type": ["array", "null"], "items": {"type": "number"}, "minItems": 4, "maxItems": 4}
ANCHORS_SCHEMA = {"type": "array", "maxItems": 50,
                  "items": {"type": "object", "required": ["label"],
                            "properties": {"label": {"type": "string", "minLength": 1, "maxLength": 80},
                                           "attribute": {"type": ["string", "null"]},
                                           "value": {"type": ["string", "null"]},
                                           "score": {"type": "number", "minimum": 0, "maximum": 1},
                                           "bbox": _BOX}}}
GROUND_SCHEMA = {"type": "object", "required": ["bbox"], "properties": {"bbox": _BOX}}


def find_json(text: str) -> Any:
    """JSON in a reply: the whole reply (code fence allowed), else its outermost [...] or {...} span."""
    try:
        return parse_json_reply(text)
    except ValueError:
        starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
        if not starts:
            raise
        start = min(starts)
        end = text.rfind("]" if text[start] == "[" else "}")
        return json.loads(text[start:end + 1])


def valid_box(box: Sequence[float] | None, size: tuple[int, int],
              tolerance: float = 0.02) -> tuple[int, int, int, int] | None:
    """Integer pixel box inside ``size`` (w, h), or None: off-image by more than ``tolerance`` or empty."""
    if box is None or len(box) != 4 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in box):
        return None
    w, h = size
    x0, y0, x1, y1 = box
    if min(x0, y0) < -tolerance * max(w, h) or x1 > w * (1 + tolerance) or y1 > h * (1 + tolerance):
        return None
    x0, x1 = (int(round(min(max(v, 0), w))) for v in (x0, x1))
    y0, y1 = (int(round(min(max(v, 0), h))) for v in (y0, y1))
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


class LocalExtractor:
    """Extractor over a local VLM; JSON replies are validated and re-asked once, then dropped (logged).

    Pass ``answerer=`` to share a ``LocalAnswerer``'s weights (one copy of a VLM on the GPU). ``version``
    combines the weights fingerprint with ``EXTRACT_PROMPT_VERSION``, so the store's extraction cache
    misses whenever either changes. Boxes are asked for in the original image's pixels and checked
    against its size; models that emit another frame (e.g. 0-1000 grids) fail that check and give None.
    """

    prompt_version = EXTRACT_PROMPT_VERSION

    def __init__(self, path: str | Path | None = None, *, answerer: LocalAnswerer | None = None,
                 device: str = "auto", dtype: Any = None, device_map: Any = None, attempts: int = 2,
                 caption_tokens: int = 96, json_tokens: int = 384):
        if (path is None) == (answerer is None):
            raise C3MError("pass a model folder or answerer=, not both or neither",
                           fix="LocalExtractor('/models/qwen2.5-vl') or LocalExtractor(answerer=LocalAnswerer(...))")
        self.llm = answerer or LocalAnswerer(path, device=device, dtype=dtype, device_map=device_map,
                                             grounding_check=False)
        if not self.llm.vision:
            raise C3MError(f"{str(self.llm.folder)!r} is a text-only model; captions, visual anchors and boxes "
                           "need a vision-language model", fix="point at a VLM folder (e.g. Qwen2.5-VL, LLaVA)")
        self.attempts, self.caption_tokens, self.json_tokens = attempts, caption_tokens, json_tokens
        self.name = self.llm.name
        self.version = f"{self.llm.fingerprint}+{EXTRACT_PROMPT_VERSION}"

    def _ask(self, system: str, user: list[dict[str, Any]], max_new_tokens: int) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.llm.chat(messages, max_new_tokens=max_new_tokens).text.strip()

    def caption(self, image: bytes) -> str:
        return self._ask(CAPTION_SYSTEM, [{"type": "image", "image": decode_image(image)},
                                          {"type": "text", "text": "Caption this image."}], self.caption_tokens)

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        words = max(5, int(max_tokens * 0.7))  # ≈0.75 English words per token; the token cap is max_new_tokens
        return self._ask(SUMMARY_SYSTEM.format(words=words), [{"type": "text", "text": text}], max_tokens)

    def _json(self, what: str, system: str, user: list[dict[str, Any]], schema: Mapping[str, Any],
              check: Callable[[Any], str | None] = lambda data: None) -> Any:
        """Validated JSON, re-asking with the problem; None (logged) after ``attempts`` invalid replies."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        problem = ""
        for _ in range(self.attempts):
            reply = self.llm.chat(messages, max_new_tokens=self.json_tokens).text
            try:
                data = find_json(reply)
                errors = validate(data, schema)
                problem = "; ".join(errors[:5]) or check(data) or ""
            except ValueError as exc:
                problem = f"not valid JSON ({exc})"
            if not problem:
                return data
            messages = messages[:2] + [{"role": "assistant", "content": reply},
                                       {"role": "user", "content": f"That reply is invalid: {problem}. Reply again "
                                                                   "with ONLY the JSON asked for."}]
        log.warning("%s: %s gave no valid JSON in %d attempt(s) (%s); nothing extracted",
                    what, self.name, self.attempts, problem)
        return None

    def visual_anchors(self, image: bytes) -> list[VisualAnchor]:
        """Objects with an optional attribute; a box outside the image is dropped, the anchor kept."""
        pil = decode_image(image)
        data = self._json("visual anchors", ANCHORS_SYSTEM.format(w=pil.width, h=pil.height),
                          [{"type": "image", "image": pil}, {"type": "text", "text": "List the objects as JSON."}],
                          ANCHORS_SCHEMA)
        anchors = []
        for row in data or ():
            label = " ".join(row["label"].split()).lower()
            anchors.append(VisualAnchor(label, row.get("attribute") or None, row.get("value") or None,
                                        float(row.get("score", 1.0)), valid_box(row.get("bbox"), pil.size)))
        return anchors

    def ground(self, image: bytes, phrase: str) -> tuple[int, int, int, int] | None:
        pil = decode_image(image)

        def check(data: Any) -> str | None:
            if data["bbox"] is not None and valid_box(data["bbox"], pil.size) is None:
                return f"bbox {data['bbox']} is not a box inside the {pil.width}x{pil.height} image"
            return None

        data = self._json("ground", GROUND_SYSTEM.format(phrase=phrase.replace('"', "'"), w=pil.width, h=pil.height),
                          [{"type": "image", "image": pil}, {"type": "text", "text": f"Where is: {phrase}?"}],
                          GROUND_SCHEMA, check)
        return valid_box(data["bbox"], pil.size) if data else None


__all__ = ["EXTRACT_PROMPT_VERSION", "LocalAnswerer", "LocalExtractor", "LocalImageEmbedder", "LocalTextEmbedder",
           "decode_image", "find_json", "fingerprint", "load_generator", "load_weights", "model_folder",
           "resolve_device", "resolve_dtype", "valid_box"]
