"""Cold Store: immutable Raw Nodes + content-addressed image blobs + versioned index snapshots."""
from .blobs import BlobStore
from .cold import ColdStore, ForgetReport, PreparedSession, SessionRecord, Snapshot, check_namespace, text_sha256
from .verify import VerifyReport, verify_store

__all__ = ["BlobStore", "ColdStore", "ForgetReport", "PreparedSession", "SessionRecord", "Snapshot",
           "VerifyReport", "check_namespace", "text_sha256", "verify_store"]
