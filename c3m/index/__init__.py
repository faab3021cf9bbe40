"""The active index's data structure, shared by the write path (RAMU, capacity) and the read path (BMER).

It lives apart from both so that ``read/`` never imports ``write/``: ``write`` maintains it, ``read`` routes
over it, ``methods`` compose the two.
"""
from .active import ActiveIndex, IndexEntry, IndexPage, Version, idf, normalize

__all__ = ["ActiveIndex", "IndexEntry", "IndexPage", "Version", "idf", "normalize"]
