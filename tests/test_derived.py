"""Derived perception in the Cold Store: immutable records and grounded-crop blobs with provenance back to the
source image and Raw Node, redacted by forget, checked by verify; and the write-time perception runner."""
from __future__ import annotations

import hashlib
import io
from dataclasses import replace
from datetime import datetime

import pytest
from PIL import Image

from c3m.errors import InvalidInput
from c3m.models.base import Extractor
from c3m.store import ColdStore, verify_store
from c3m.types import ImagePerception, Session, Turn, VisualAnchor
from c3m.write.perception import choose_anchor, pad_box, perceive, perception_text
from factories import BOOK, DB_INTEGRITY_ERRORS, H, MUG, TABLE, W, scene_png


@pytest.fixture
def store_path(store_location):
    """Every test here runs on both store backends (a folder, a PostgreSQL schema)."""
    return store_location


class FakeExtractor:
    """Fixed perception of the drawn scene: a mug, a book and the table under both."""

    name = "fake"
    version = "fake.1"

    def __init__(self, anchors=None):
        self.anchors = anchors if anchors is not None else [
            VisualAnchor("table", None, None, 1.0, TABLE),
            VisualAnchor("mug", None, None, 0.9, MUG),
            VisualAnchor("mug", "colour", "red", 0.8, MUG),
            VisualAnchor("book", None, None, 0.7, BOOK),
        ]
        self.grounded: list[str] = []

    def caption(self, image: bytes) -> str:
        return f"a mug and a book on a table ({hashlib.sha256(image).hexdigest()[:6]})"

    def visual_anchors(self, image: bytes) -> list[VisualAnchor]:
        return list(self.anchors)

    def ground(self, image: bytes, phrase: str):
        self.grounded.append(phrase)
        for a in self.anchors:
            if a.label in phrase:
                return a.bbox
        return None

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        return text


def session(sid: str, text: str, **colours) -> Session:
    return Session(sid, datetime(2026, 3, 1, 9), (Turn("user", text, (scene_png(**colours),)),
                                                  Turn("assistant", "Nice.")))


def commit(store: ColdStore, ns: str, s: Session, extractor=None, *, perceived: bool = True):
    """Insert a session and its perception in one transaction (as the session commit does)."""
    prepared = store.prepare_session(ns, s)
    items, n = [], 0
    with store.transaction():
        store.insert_session(prepared)
        if perceived:
            items = perceive(prepared.nodes, extractor or FakeExtractor(), store.image_bytes)
            n = store.put_perceptions(ns, items)
    return prepared.nodes, items, n


def test_extractor_fake_satisfies_protocol():
    assert isinstance(FakeExtractor(), Extractor)


def test_put_get_roundtrip_inside_the_session_transaction(store_path):
    with ColdStore(store_path) as store:
        nodes, items, n = commit(store, "alice", session("s1", "Here is my red mug."))
        assert n == 1 and len(items) == 1  # one image in the session
        rec, crop = items[0]
        assert rec.node_id == nodes[0].node_id and rec.image == nodes[0].images[0]
        assert (rec.backend, rec.version) == ("fake", "fake.1")
        assert rec.crop is not None and crop is not None and rec.crop_phrase == "red mug"
        got = store.perceptions([n.node_id for n in nodes])
        assert got == {nodes[0].node_id: [rec]}
        assert store.perceptions([nodes[0].node_id], backend="fake", version="fake.1") == got
        assert store.perceptions([nodes[0].node_id], backend="other") == {}
        assert store.perceptions([nodes[0].node_id], version="fake.2") == {}
        assert store.namespace_stats("alice")["derived_records"] == 1
        assert verify_store(store).ok


def test_records_of_two_backends_are_kept_side_by_side_in_position_order(store_path):
    with ColdStore(store_path) as store:
        s = Session("s1", datetime(2026, 3, 1), (Turn("user", "my book and my mug",
                                                      (scene_png(), scene_png(mug=(0, 200, 0)))),))
        nodes, _, n = commit(store, "alice", s)
        other = FakeExtractor()
        other.name, other.version = "alt", "alt.1"
        assert n == 2
        assert store.put_perceptions("alice", perceive(nodes, other, store.image_bytes)) == 2
        recs = store.perceptions([nodes[0].node_id])[nodes[0].node_id]
        assert [(r.image.sha256, r.backend) for r in recs] == [
            (nodes[0].images[0].sha256, "alt"), (nodes[0].images[0].sha256, "fake"),
            (nodes[0].images[1].sha256, "alt"), (nodes[0].images[1].sha256, "fake")]


def test_records_are_immutable(store_path):
    with ColdStore(store_path) as store:
        nodes, items, _ = commit(store, "alice", session("s1", "Here is my red mug."))
        assert store.put_perceptions("alice", items) == 0  # second put: a no-op
        changed = replace(items[0][0], caption="something else")
        assert store.put_perceptions("alice", [(changed, items[0][1])]) == 0
        assert store.perceptions([nodes[0].node_id])[nodes[0].node_id][0].caption == items[0][0].caption
        for sql in ("UPDATE derived_records SET caption='tampered'", "DELETE FROM derived_records",
                    "UPDATE derived_records SET caption='', anchors='[]', crop_phrase=NULL, redacted=1",  # no log
                    "UPDATE derived_blobs SET box='[0,0,1,1]'", "UPDATE derived_blobs SET redacted=1",
                    "DELETE FROM derived_blobs"):
            with pytest.raises(DB_INTEGRITY_ERRORS, match="append-only"):
                store.conn.execute(sql)
        assert store.conn.execute("SELECT COUNT(*) FROM derived_records").fetchone()[0] == 1


def test_crop_is_a_derived_blob_with_provenance_to_its_source_and_node(store_path):
    with ColdStore(store_path) as store:
        nodes, items, _ = commit(store, "alice", session("s1", "Here is my red mug."))
        rec, crop = items[0]
        info = store.derived_blob(rec.crop.sha256)
        assert info["node_id"] == nodes[0].node_id and info["namespace"] == "alice"
        assert info["source_sha256"] == rec.image.sha256 and info["kind"] == "grounded_crop"
        assert info["box"] == rec.crop_box and info["node_ids"] == [nodes[0].node_id]
        assert (info["backend"], info["version"]) == ("fake", "fake.1")
        node = store.get_nodes([info["node_id"]])[info["node_id"]]
        assert info["source_sha256"] in {im.sha256 for im in node.images}
        assert store.derived_blob(rec.crop.sha256, namespace="bob") is None
        assert store.derived_blob("0" * 64) is None
        data = store.image_bytes(rec.crop)
        assert data == crop and hashlib.sha256(data).hexdigest() == rec.crop.sha256
        x0, y0, x1, y1 = rec.crop_box
        with Image.open(io.BytesIO(data)) as im:
            assert im.size == (x1 - x0, y1 - y0) == (rec.crop.width, rec.crop.height)
            assert im.convert("RGB").getpixel(((x1 - x0) // 2, (y1 - y0) // 2)) == (200, 30, 30)  # the mug
        assert x0 <= MUG[0] and y0 <= MUG[1] and x1 >= MUG[2] and y1 >= MUG[3]  # padded around it


def test_crop_never_replaces_the_original(store_path):
    with ColdStore(store_path) as store:
        prepared = store.prepare_session("alice", session("s1", "Here is my red mug."))
        with store.transaction():
            store.insert_session(prepared)
        before = store.get_nodes([n.node_id for n in prepared.nodes])
        original = store.image_bytes(prepared.nodes[0].images[0])
        store.put_perceptions("alice", perceive(prepared.nodes, FakeExtractor(), store.image_bytes))
        assert store.get_nodes(list(before)) == before
        assert store.image_bytes(prepared.nodes[0].images[0]) == original
        assert store.namespace_stats("alice")["images"] == 1
        assert verify_store(store).counts["blobs"] == 1  # node images only; the crop is counted apart


def test_derived_records_survive_reopen(store_path):
    with ColdStore(store_path) as store:
        nodes, items, _ = commit(store, "alice", session("s1", "Here is my red mug."))
    with ColdStore(store_path) as store:
        assert store.perceptions([nodes[0].node_id]) == {nodes[0].node_id: [items[0][0]]}
        assert store.image_bytes(items[0][0].crop) == items[0][1]
        assert verify_store(store).ok


def test_a_v1_store_is_upgraded_in_place(store_path):
    with ColdStore(store_path) as store:
        commit(store, "alice", session("s1", "Here is my red mug."))
        for table in ("derived_records", "derived_blobs"):  # back to what a v1 store had
            store.conn.execute(f"DROP TABLE {table}")
        store.conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    with ColdStore(store_path) as store:
        from c3m.store.schema import SCHEMA_VERSION

        assert store.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == \
            str(SCHEMA_VERSION)  # upgraded to the current version (v3: snapshot deltas)
        node = store.nodes_for_session("alice", "s1")[0]
        assert store.put_perceptions("alice", perceive([node], FakeExtractor(), store.image_bytes)) == 1
        assert verify_store(store).ok


def test_forget_redacts_records_and_deletes_crops_of_that_node_only(store_path):
    with ColdStore(store_path) as store:
        nodes1, items1, _ = commit(store, "alice", session("s1", "My red mug.", mug=(200, 30, 30)))
        nodes2, items2, _ = commit(store, "alice", session("s2", "My green mug.", mug=(30, 200, 30)))
        crop1, crop2 = items1[0][0].crop.sha256, items2[0][0].crop.sha256
        assert crop1 != crop2
        rep = store.forget("alice", session_id="s1", reason="user request")
        assert rep.derived_redacted == 1 and rep.crops_deleted == 1 and rep.blobs_deleted == 1
        assert store.perceptions([nodes1[0].node_id]) == {}
        row = store.conn.execute("SELECT caption, anchors, crop_phrase, redacted FROM derived_records WHERE node_id=?",
                                 (nodes1[0].node_id,)).fetchone()
        assert tuple(row) == ("", "[]", None, 1)
        assert not store.blobs.exists(crop1) and store.derived_blob(crop1) is None
        assert store.perceptions([nodes2[0].node_id]) == {nodes2[0].node_id: [items2[0][0]]}
        assert store.blobs.exists(crop2) and store.derived_blob(crop2)["node_id"] == nodes2[0].node_id
        assert store.namespace_stats("alice")["derived_records"] == 1
        with pytest.raises(InvalidInput, match="forgotten"):
            store.put_perceptions("alice", items1)  # no perception of a forgotten node
        rep = verify_store(store)
        assert rep.ok, rep.errors
        assert not any("orphan" in w for w in rep.warnings)


def test_forget_keeps_a_crop_shared_with_another_node(store_path):
    with ColdStore(store_path) as store:
        nodes1, items1, _ = commit(store, "alice", session("s1", "My red mug."))
        nodes2, items2, _ = commit(store, "alice", session("s2", "My red mug again."))
        sha = items1[0][0].crop.sha256
        assert items2[0][0].crop.sha256 == sha  # identical inputs, identical crop bytes
        assert store.derived_blob(sha)["node_ids"] == sorted([nodes1[0].node_id, nodes2[0].node_id])
        rep = store.forget("alice", session_id="s1", reason="user request")
        assert rep.crops_deleted == 0 and store.blobs.exists(sha)
        assert store.derived_blob(sha)["node_ids"] == [nodes2[0].node_id]
        assert verify_store(store).ok


def test_verify_reports_a_tampered_crop_blob(store_path):
    with ColdStore(store_path) as store:
        _, items, _ = commit(store, "alice", session("s1", "Here is my red mug."))
        assert verify_store(store).ok
        rep = verify_store(store)
        assert rep.counts["derived_records"] == 1 and rep.counts["derived_blobs"] == 1
        store.blobs.path_for(items[0][0].crop.sha256).write_bytes(b"not the crop")
        rep = verify_store(store)
        assert any("crop blob" in e and "hash mismatch" in e for e in rep.errors), rep.errors
        assert verify_store(store, check_blob_hashes=False).ok  # present, hashes not read
        store.blobs.path_for(items[0][0].crop.sha256).unlink()
        assert any("crop blob" in e and "missing" in e for e in verify_store(store, check_blob_hashes=False).errors)


def test_verify_reports_a_record_pointing_at_another_nodes_image(store_path):
    with ColdStore(store_path) as store:
        nodes1, _, _ = commit(store, "alice", session("s1", "Here is my red mug.", mug=(200, 30, 30)))
        nodes2, _, _ = commit(store, "alice", session("s2", "Here is my green mug.", mug=(30, 200, 30)))
        # INSERT is allowed by the triggers (append-only); put_perceptions would refuse this row.
        store.conn.execute(
            "INSERT INTO derived_records(namespace, node_id, position, sha256, backend, version, caption, anchors,"
            " created_at) VALUES ('alice', ?, 0, ?, 'rogue', 'r.1', 'a caption', '[]', '2026-01-01T00:00:00')",
            (nodes1[0].node_id, nodes2[0].images[0].sha256))
        rep = verify_store(store)
        assert any("rogue" in e and "is not image #0" in e for e in rep.errors), rep.errors
        # and a crop row whose node is in another namespace
        store.conn.execute(
            "INSERT INTO derived_records(namespace, node_id, position, sha256, backend, version, caption, anchors,"
            " created_at) VALUES ('bob', ?, 0, ?, 'rogue2', 'r.1', 'x', '[]', '2026-01-01T00:00:00')",
            (nodes1[0].node_id, nodes1[0].images[0].sha256))
        assert any("rogue2" in e and "namespace" in e for e in verify_store(store).errors)


def test_bad_input_names_the_field(store_path):
    with ColdStore(store_path) as store:
        nodes, _, _ = commit(store, "alice", session("s1", "Here is my red mug."), perceived=False)
        nodes_b, _, _ = commit(store, "bob", session("s9", "Bob's blue mug.", mug=(0, 0, 255)), perceived=False)
        items = perceive(nodes, FakeExtractor(), store.image_bytes)
        with pytest.raises(InvalidInput) as exc:
            store.put_perceptions("bob", items)  # alice's node
        assert exc.value.field == "items[0].node_id" and "alice" in str(exc.value) and exc.value.fix
        rec, crop = items[0]
        with pytest.raises(InvalidInput) as exc:
            store.put_perceptions("alice", [(replace(rec, image=nodes_b[0].images[0]), crop)])
        assert exc.value.field == "items[0].image"
        with pytest.raises(InvalidInput) as exc:
            store.put_perceptions("alice", [(replace(rec, crop=replace(rec.crop, sha256="ab" * 32)), crop)])
        assert exc.value.field == "items[0].crop.sha256"
        with pytest.raises(InvalidInput) as exc:
            store.put_perceptions("alice", [(rec, None)])
        assert exc.value.field == "items[0].crop"
        with pytest.raises(InvalidInput) as exc:
            store.put_perceptions("alice", [(replace(rec, crop_box=(0, 0, W + 5, H)), crop)])
        assert exc.value.field == "items[0].crop_box"
        with pytest.raises(InvalidInput) as exc:  # a good item before a bad one: nothing is written
            store.put_perceptions("alice", [(rec, crop), (replace(rec, node_id="n-nope"), crop)])
        assert exc.value.field == "items[1].node_id"
        assert store.perceptions([nodes[0].node_id]) == {}
        assert verify_store(store).ok


def test_a_failed_session_commit_leaves_no_derived_rows(store_path):
    with ColdStore(store_path) as store:
        prepared = store.prepare_session("alice", session("s1", "Here is my red mug."))
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.insert_session(prepared)
                store.put_perceptions("alice", perceive(prepared.nodes, FakeExtractor(), store.image_bytes))
                raise RuntimeError("crash before commit")
        assert store.conn.execute("SELECT COUNT(*) FROM derived_records").fetchone()[0] == 0
        assert store.conn.execute("SELECT COUNT(*) FROM derived_blobs").fetchone()[0] == 0
        assert verify_store(store).ok  # the crop blob written first is only an orphan


def test_perceive_is_deterministic_and_query_blind(store_path):
    with ColdStore(store_path) as store:
        prepared = store.prepare_session("alice", session("s1", "I keep my books here."))
        a = perceive(prepared.nodes, FakeExtractor(), store.image_bytes)
        b = perceive(prepared.nodes, FakeExtractor(), store.image_bytes)
        assert a == b and a[0][1] is not None
        assert a[0][0].crop_phrase == "book"  # "books" folded to "book": from the turn's own text
        assert [r.node_id for r, _ in a] == [prepared.nodes[0].node_id]  # the text-only turn has no record
        none = perceive(prepared.nodes, FakeExtractor(), store.image_bytes, crops=False)
        assert none[0][1] is None and none[0][0].crop is None and none[0][0].caption == a[0][0].caption


def test_perceive_never_crops_most_of_the_image(store_path):
    big = (5, 5, W - 5, H - 5)
    ex = FakeExtractor([VisualAnchor("poster", None, None, 1.0, big)])
    with ColdStore(store_path) as store:
        prepared = store.prepare_session("alice", session("s1", "Look at this poster."))
        (rec, crop), = perceive(prepared.nodes, ex, store.image_bytes)
        assert rec.crop is None and crop is None and rec.caption
    for box in [(0, 0, 10, 10), (20, 20, 60, 60), (0, 0, 170, 90), (100, 10, 190, 90), (3, 3, 197, 97)]:
        padded = pad_box(box, W, H)
        if padded is not None:
            x0, y0, x1, y1 = padded
            assert (x1 - x0) * (y1 - y0) <= 0.8 * W * H and min(x1 - x0, y1 - y0) >= 16
            assert 0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H
    assert pad_box((0, 0, 10, 10), W, H) is None  # under 16 px a side even padded
    assert pad_box((20, 20, 60, 60), W, H) == (16, 16, 64, 64)


def test_anchor_choice_falls_back_to_the_largest_subject():
    anchors = [VisualAnchor("table", None, None, 1.0, TABLE), VisualAnchor("mug", None, None, 0.9, MUG),
               VisualAnchor("book", None, None, 0.2, BOOK)]
    assert choose_anchor("what a day", anchors)[1] == "book"  # largest box that is not background
    assert choose_anchor("on the table", anchors)[1] == "table"  # named by the text: chosen even if background
    assert choose_anchor("my mug", anchors)[1] == "mug"
    assert choose_anchor("anything", [VisualAnchor("wall", None, None, 1.0, TABLE)]) is None
    assert choose_anchor("anything", []) is None


def test_perception_text():
    ref = replace(ImagePerception("n", None, "b", "v", ""), caption="a red mug")  # type: ignore[arg-type]
    assert perception_text([ref, replace(ref, caption="a book"), replace(ref, caption="")]) == \
        "[image: a red mug] [image: a book]"


def test_oracle_perception_of_a_synthetic_history(tmp_path):
    """The runner over a real backend (oracle perception: the synthetic scenes' hidden ground truth)."""
    from c3m.dataset import load_dataset
    from c3m.eval.synth import generate_dataset
    from c3m.models.oracle import OracleExtractor

    ds = generate_dataset(tmp_path / "ds", length=3000, episodes=1, seed=0, progress=False)
    oracle = OracleExtractor(ds)
    sessions = [s for s in load_dataset(ds)[0].sessions if any(t.images for t in s.turns)][:3]
    assert sessions
    seen = []
    with ColdStore(tmp_path / "store") as store:
        for s in sessions:
            prepared = store.prepare_session("synth", s)
            with store.transaction():
                store.insert_session(prepared)
                items = perceive(prepared.nodes, oracle, store.image_bytes)
                assert items == perceive(prepared.nodes, oracle, store.image_bytes)
                assert store.put_perceptions("synth", items) == len(items)
            seen += items
            for rec, crop in items:
                assert rec.backend == "oracle" and rec.caption == oracle.caption(store.image_bytes(rec.image))
                if rec.crop is not None:
                    assert rec.crop.width * rec.crop.height <= 0.8 * rec.image.width * rec.image.height
                    assert store.derived_blob(rec.crop.sha256)["source_sha256"] == rec.image.sha256
        assert any(rec.crop is not None for rec, _ in seen)
        rep = verify_store(store)
        assert rep.ok, rep.errors
        assert rep.counts["derived_records"] == store.namespace_stats("synth")["derived_records"] > 0


def test_a_value_that_repeats_the_label_is_not_doubled():
    sign = (10, 10, 120, 60)
    anchors = [VisualAnchor("Pixel Hut", None, None, 1.0, sign),
               VisualAnchor("Pixel Hut", "text", "Pixel Hut", 1.0, sign),
               VisualAnchor("Pixel Hut", "colour", "red", 0.5, sign)]
    assert choose_anchor("the Pixel Hut sign is red", anchors)[1] == "red Pixel Hut"
    assert choose_anchor("a shop called Pixel Hut", anchors)[1] == "Pixel Hut"
