"""The service layer: ``c3m serve`` (HTTP API + inspector page, ``app``) and ``c3m mcp`` (``mcp``), both thin
layers over ``Memory`` through one ``Engine`` per process. Needs the ``server`` extra; importing this package
imports none of FastAPI or the MCP SDK (the submodules do)."""
