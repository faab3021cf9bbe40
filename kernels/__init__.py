"""c3m_kernels: GPU (Triton) and CPU kernels for c3m, each with a plain PyTorch reference.

Installed under the import name ``c3m_kernels`` (see setup.py for why not ``kernels``).
This package imports nothing from ``c3m``.
"""
