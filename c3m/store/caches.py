"""The Cold Store's derived data (``ColdStore``'s part ``DerivedStore``): write-time perception records and
grounded-crop blobs, the vector cache and the extraction cache. All of it can be dropped and rebuilt."""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidInput
from ..types import ImagePerception, ImageRef, VisualAnchor
from .records import _anchor_dict, _anchor_from, check_namespace, now_iso, read_image


class DerivedStore:
    """Perception records, crops and caches (a part of ``ColdStore``: ``self.conn``, ``self.blobs``, ``transaction``)."""

    # -- derived perception records and grounded-crop blobs ------------------------------------
    def put_perceptions(self, namespace: str, items: Sequence[tuple[ImagePerception, bytes | None]]) -> int:
        """Store write-time perception of stored images (derived records) and their grounded crops (derived
        blobs); returns the number of records inserted.

        Each item is an ``ImagePerception`` and the crop's encoded bytes (None when it has no crop). Records
        are immutable: an item whose (backend, version, node, source image) is already stored is a no-op,
        crop included. Everything is checked before anything is written; a bad item raises ``InvalidInput``
        naming it. Runs in its own transaction, or inside the caller's (e.g. the session commit, right after
        ``insert_session``).
        """
        check_namespace(namespace)
        items = list(items)
        checked = []
        for i, item in enumerate(items):
            checked.append(self._check_perception(namespace, i, item))
        with self.transaction(namespace):
            infos = self._node_image_info([rec.node_id for rec, _, _ in checked])
            positions = [self._source_position(namespace, i, rec, infos) for i, (rec, _, _) in enumerate(checked)]
            inserted = 0
            at = now_iso()
            for pos, (rec, data, crop_ref) in zip(positions, checked):
                if self.conn.execute("SELECT 1 FROM derived_records WHERE backend=? AND version=? AND node_id=? AND"
                                     " sha256=?", (rec.backend, rec.version, rec.node_id,
                                                   rec.image.sha256)).fetchone():
                    continue  # immutable: already stored
                box = json.dumps(list(rec.crop_box)) if rec.crop_box is not None else None
                if crop_ref is not None:
                    self.blobs.put(data)  # before the row that references it: a crash leaves an orphan, no dangle
                    self.conn.execute(
                        "INSERT INTO derived_blobs(sha256, node_id, source_sha256, namespace, kind, box,"
                        " backend, version, mime, width, height, nbytes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
                        " ON CONFLICT DO NOTHING",
                        (crop_ref.sha256, rec.node_id, rec.image.sha256, namespace, "grounded_crop", box,
                         rec.backend, rec.version, crop_ref.mime, crop_ref.width, crop_ref.height, crop_ref.nbytes))
                anchors = json.dumps([_anchor_dict(a) for a in rec.anchors], separators=(",", ":"), sort_keys=True)
                cur = self.conn.execute(
                    "INSERT INTO derived_records(namespace, node_id, position, sha256, backend, version,"
                    " caption, anchors, crop_sha256, crop_box, crop_phrase, created_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                    (namespace, rec.node_id, pos, rec.image.sha256, rec.backend, rec.version, rec.caption, anchors,
                     crop_ref.sha256 if crop_ref is not None else None, box, rec.crop_phrase, at))
                inserted += cur.rowcount
        return inserted

    @staticmethod
    def _check_perception(namespace: str, i: int, item: Any) -> tuple[ImagePerception, bytes | None, ImageRef | None]:
        """Shape checks of one put_perceptions item that need no database (crop bytes decoded and hashed)."""
        f = f"items[{i}]"
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], ImagePerception)):
            raise InvalidInput(f, f"expected (ImagePerception, crop bytes or None), got {type(item).__name__}",
                               fix="pass the pairs c3m.write.perception.perceive() returns")
        rec, data = item
        for name in ("backend", "version"):
            if not isinstance(getattr(rec, name), str) or not getattr(rec, name).strip():
                raise InvalidInput(f"{f}.{name}", "must be a non-empty string",
                                   fix=f"set {name} from the extractor (extractor.{name})")
        if not isinstance(rec.caption, str):
            raise InvalidInput(f"{f}.caption", f"must be a string, got {type(rec.caption).__name__}",
                               fix="pass the extractor's caption text")
        if not isinstance(rec.image, ImageRef):
            raise InvalidInput(f"{f}.image", f"must be an ImageRef, got {type(rec.image).__name__}",
                               fix="use one of the node's stored images (RawNode.images)")
        if any(not isinstance(a, VisualAnchor) for a in rec.anchors):
            raise InvalidInput(f"{f}.anchors", "must be VisualAnchor objects", fix="pass extractor.visual_anchors()")
        if rec.crop_box is not None:
            box = rec.crop_box
            ok = (len(box) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in box)
                  and 0 <= box[0] < box[2] <= rec.image.width and 0 <= box[1] < box[3] <= rec.image.height)
            if not ok:
                raise InvalidInput(f"{f}.crop_box", f"{box!r} is not a box (x0, y0, x1, y1) inside the "
                                   f"{rec.image.width}x{rec.image.height} source image",
                                   fix="give integer pixel coordinates with x0 < x1 <= width, y0 < y1 <= height")
        if rec.crop is None:
            if data is not None:
                raise InvalidInput(f"{f}.crop", "crop bytes given but the record has no crop ImageRef",
                                   fix="set ImagePerception.crop to the crop's ImageRef, or pass None as bytes")
            return rec, None, None
        if data is None:
            raise InvalidInput(f"{f}.crop", "the record has a crop but no crop bytes were given",
                               fix="pass the crop's encoded bytes beside the record")
        if rec.crop_box is None:
            raise InvalidInput(f"{f}.crop_box", "a crop needs the box it was cut from",
                               fix="set crop_box to the (x0, y0, x1, y1) the crop covers in the source image")
        data, ref = read_image(bytes(data) if isinstance(data, (bytearray, memoryview)) else data, f"{f}.crop")
        if ref.sha256 != rec.crop.sha256:
            raise InvalidInput(f"{f}.crop.sha256", f"{rec.crop.sha256[:12]}… is not the SHA-256 of the crop bytes "
                               f"({ref.sha256[:12]}…)", fix="build the crop ImageRef from the bytes you pass")
        if ref != rec.crop:
            raise InvalidInput(f"{f}.crop", f"crop ImageRef {rec.crop} does not describe the bytes ({ref})",
                               fix="build the crop ImageRef (mime, width, height, nbytes) from the bytes you pass")
        return rec, data, ref

    def _node_image_info(self, node_ids: Sequence[str]) -> dict[str, tuple[str, bool, list[str]]]:
        """node id -> (namespace, redacted, non-redacted image shas by position); not counted as a node read."""
        out: dict[str, tuple[str, bool, list[str]]] = {}
        ids = list(dict.fromkeys(node_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for r in self.conn.execute(f"SELECT node_id, namespace, redacted FROM raw_nodes WHERE node_id IN ({marks})",
                                       chunk):
                out[r[0]] = (r[1], bool(r[2]), [])
            for r in self.conn.execute(f"SELECT node_id, sha256 FROM node_images WHERE node_id IN ({marks}) AND"
                                       " redacted=0 ORDER BY node_id, position", chunk):
                out[r[0]][2].append(r[1])
        return out

    @staticmethod
    def _source_position(namespace: str, i: int, rec: ImagePerception,
                         infos: dict[str, tuple[str, bool, list[str]]]) -> int:
        info = infos.get(rec.node_id)
        if info is None or info[0] != namespace:
            where = "is not a stored Raw Node" if info is None else f"belongs to namespace {info[0]!r}"
            raise InvalidInput(f"items[{i}].node_id", f"{rec.node_id!r} {where}, not of namespace {namespace!r}",
                               fix="perceive nodes of this namespace after their session is inserted "
                                   "(insert_session), and pass that namespace")
        if info[1]:
            raise InvalidInput(f"items[{i}].node_id", f"{rec.node_id!r} was forgotten (redacted)",
                               fix="do not store perception of forgotten nodes")
        if rec.image.sha256 not in info[2]:
            raise InvalidInput(f"items[{i}].image", f"image {rec.image.sha256[:12]}… is not one of node "
                               f"{rec.node_id!r}'s images", fix="perceive the node's own RawNode.images")
        return info[2].index(rec.image.sha256)

    def perceptions(self, node_ids: Sequence[str], *, backend: str | None = None,
                    version: str | None = None) -> dict[str, list[ImagePerception]]:
        """Non-redacted derived records of these nodes (only nodes that have some), each list ordered by
        image position, then backend and version; ``backend``/``version`` None means any."""
        out: dict[str, list[ImagePerception]] = {}
        ids = list(dict.fromkeys(node_ids))
        extra, extra_args = "", []
        if backend is not None:
            extra, extra_args = extra + " AND d.backend=?", extra_args + [backend]
        if version is not None:
            extra, extra_args = extra + " AND d.version=?", extra_args + [version]
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self.conn.execute(
                "SELECT d.*, i.mime AS i_mime, i.width AS i_width, i.height AS i_height, i.nbytes AS i_nbytes,"
                " b.mime AS b_mime, b.width AS b_width, b.height AS b_height, b.nbytes AS b_nbytes"
                " FROM derived_records d JOIN node_images i ON i.node_id=d.node_id AND i.position=d.position"
                " LEFT JOIN derived_blobs b ON b.sha256=d.crop_sha256 AND b.node_id=d.node_id"
                "  AND b.source_sha256=d.sha256 AND b.redacted=0"
                f" WHERE d.redacted=0 AND d.node_id IN ({','.join('?' * len(chunk))}){extra}"
                " ORDER BY d.node_id, d.position, d.backend, d.version", [*chunk, *extra_args]).fetchall()
            for r in rows:
                crop = (ImageRef(r["crop_sha256"], r["b_mime"], r["b_width"], r["b_height"], r["b_nbytes"])
                        if r["crop_sha256"] is not None and r["b_mime"] is not None else None)
                out.setdefault(r["node_id"], []).append(ImagePerception(
                    node_id=r["node_id"],
                    image=ImageRef(r["sha256"], r["i_mime"], r["i_width"], r["i_height"], r["i_nbytes"]),
                    backend=r["backend"], version=r["version"], caption=r["caption"],
                    anchors=tuple(_anchor_from(a) for a in json.loads(r["anchors"])),
                    crop=crop, crop_box=tuple(json.loads(r["crop_box"])) if r["crop_box"] else None,
                    crop_phrase=r["crop_phrase"]))
        return out

    def derived_blob(self, sha256: str, *, namespace: str | None = None) -> dict | None:
        """Provenance of a non-redacted derived blob (a grounded crop): the node and source image it was cut
        from, or None. ``node_ids`` lists every node whose identical crop shares these bytes (the other
        fields describe the first; ``links`` lists every (node, source image) pair — identical crops can come from
        different source images); ``namespace`` restricts to one namespace."""
        rows = self.conn.execute(
            "SELECT * FROM derived_blobs WHERE sha256=? AND redacted=0" + (" AND namespace=?" if namespace else "")
            + " ORDER BY node_id, source_sha256", (sha256, namespace) if namespace else (sha256,)).fetchall()
        if not rows:
            return None
        r = rows[0]
        return {"sha256": r["sha256"], "node_id": r["node_id"], "namespace": r["namespace"],
                "source_sha256": r["source_sha256"], "kind": r["kind"], "box": tuple(json.loads(r["box"])),
                "backend": r["backend"], "version": r["version"], "mime": r["mime"], "width": r["width"],
                "height": r["height"], "nbytes": r["nbytes"],
                "node_ids": list(dict.fromkeys(x["node_id"] for x in rows)),
                "links": [(x["node_id"], x["source_sha256"]) for x in rows]}

    # -- vector cache (derived data; safe to drop) ---------------------------------------------
    def get_vectors(self, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        hashes = list(dict.fromkeys(text_hashes))
        for start in range(0, len(hashes), 500):
            chunk = hashes[start:start + 500]
            rows = self.conn.execute(f"SELECT text_sha256, vector FROM vector_cache WHERE model=? AND text_sha256 IN "
                                     f"({','.join('?' * len(chunk))})", [model, *chunk])
            out.update((r[0], np.frombuffer(r[1], dtype="<f4").copy()) for r in rows)
        return out

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [(model, h, int(v.shape[0]), np.asarray(v, dtype="<f4").tobytes()) for h, v in vectors.items()]
        with self.transaction():
            self.conn.executemany("INSERT INTO vector_cache VALUES (?,?,?,?) ON CONFLICT DO NOTHING", sorted(rows))

    # -- extraction cache (derived data; survives restarts, shared by processes) --------------
    def get_extraction(self, backend: str, version: str, kind: str, input_sha256: str) -> Any | None:
        """A cached extractor output (JSON-decoded), or None."""
        row = self.conn.execute("SELECT output FROM extraction_cache WHERE backend=? AND version=? AND kind=? AND"
                                " input_sha256=?", (backend, version, kind, input_sha256)).fetchone()
        return json.loads(row[0]) if row else None

    def put_extraction(self, backend: str, version: str, kind: str, input_sha256: str, output: Any) -> None:
        with self.transaction():
            self.conn.execute("INSERT INTO extraction_cache VALUES (?,?,?,?,?) ON CONFLICT (backend, version, kind,"
                              " input_sha256) DO UPDATE SET output=excluded.output",
                              (backend, version, kind, input_sha256, json.dumps(output, sort_keys=True)))
