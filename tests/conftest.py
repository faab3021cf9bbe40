"""Shared fixtures: a cheap model bundle and a store folder (session factories live in factories.py).

Store and API tests use the dependency-free ``hashing`` embedder so they stay fast; the MiniLM path
is exercised in test_models.py and by the demo test.

``store_location`` runs a test on both store backends: a folder (SQLite), and a fresh schema of the PostgreSQL
server named by ``C3M_TEST_PG_URL`` (``.ci/start-postgres`` starts one). Without that variable the PostgreSQL
runs skip, unless ``C3M_REQUIRE_PG=1`` (CI), where they fail.
"""
from __future__ import annotations

import os
import uuid

import pytest

from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, Models


@pytest.fixture
def models() -> Models:
    return Models(HashingEmbedder(64), ApproxTokenCounter(), ExtractiveAnswerer())


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store"


@pytest.fixture(scope="session")
def pg_server_url():
    url = os.environ.get("C3M_TEST_PG_URL")
    if not url:
        if os.environ.get("C3M_REQUIRE_PG") == "1":
            pytest.fail("C3M_REQUIRE_PG=1 but C3M_TEST_PG_URL is not set (start one: .ci/start-postgres DIR)")
        pytest.skip("no PostgreSQL server: set C3M_TEST_PG_URL (.ci/start-postgres DIR prints one)")
    try:
        import psycopg
    except ImportError:
        if os.environ.get("C3M_REQUIRE_PG") == "1":
            pytest.fail("C3M_REQUIRE_PG=1 but psycopg is not installed (pip install -e '.[postgres]')")
        pytest.skip("psycopg is not installed")
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("C3M_REQUIRE_PG") == "1":
            pytest.fail(f"C3M_TEST_PG_URL={url} does not answer: {exc}")
        pytest.skip(f"PostgreSQL at {url} does not answer")
    return url


def pg_schema_url(server_url: str, schema: str, blobs) -> str:
    """A store URL on a schema of its own (search_path) with its blob folder."""
    sep = "&" if "?" in server_url else "?"
    return f"{server_url}{sep}options=-csearch_path%3D{schema}&blobs={blobs}"


@pytest.fixture
def pg_store_url(pg_server_url, tmp_path):
    """A fresh, empty PostgreSQL store (one schema, dropped after the test)."""
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield pg_schema_url(pg_server_url, schema, tmp_path / "pg-blobs")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path):
    """A store location on each backend: a folder path, or a postgresql:// URL of a fresh schema."""
    if request.param == "sqlite":
        return tmp_path / "store"
    return request.getfixturevalue("pg_store_url")


@pytest.fixture(scope="session")
def demo_dataset(tmp_path_factory):
    """The demo history written twice (two users) as a dataset folder, for harness tests."""
    from c3m.dataset import write_dataset
    from c3m.demo import demo_history

    root = tmp_path_factory.mktemp("ds") / "demo"
    h = demo_history()
    write_dataset([h, type(h)("demo-user-2", h.sessions, h.questions)], root)
    return root
