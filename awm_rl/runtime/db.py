"""Per-instance SQLite databases: an in-memory copy per instance, restored from a compact template.

Why in memory: copying a scenario's ~100 KB image with `sqlite3.Connection.deserialize` takes
~0.1 ms, needs no files (nothing to leak on a crash), and the image is freed with the connection.
The template is the scenario's `initial.db` re-packed with 512-byte pages (VACUUM), which keeps the
same rows but shrinks each copy 3-5x (a table or index costs one page, and these schemas have many
small tables). An instance opens its connection lazily on first use, so creating one is just
bookkeeping and an untouched instance costs no database memory at all. An instance parked by its host
keeps only the pages where its database differs from the template (`PageDelta`).

`InstancePool` routes the generated code's single engine (created at import) to whichever
instance the current call belongs to, through the `current_instance` context variable.
"""

from __future__ import annotations

import contextvars
import os
import sqlite3
import tempfile
from pathlib import Path

from sqlalchemy.pool import Pool
from sqlalchemy.pool.base import _ConnectionRecord

from awm_resources.clock import fix_sqlite, image_clock

TEMPLATE_PAGE_SIZE = 512
# Prepared statements are per connection and cost memory; the handlers repeat few statements.
STATEMENT_CACHE = 16


class InstanceConnection(sqlite3.Connection):
    """An instance's connection; `close()` from SQLAlchemy or generated code is ignored (we own its life)."""

    closed = False

    def close(self) -> None:  # keeps the instance's database alive
        return None

    def rollback(self) -> None:
        if not self.closed:  # a late rollback from a garbage-collected session after release
            sqlite3.Connection.rollback(self)

    def really_close(self) -> None:
        self.closed = True
        sqlite3.Connection.close(self)


def build_template(initial_db: Path) -> bytes:
    """The serialized initial database with small pages (same content; see module docstring)."""
    if not Path(initial_db).is_file():
        raise FileNotFoundError(f"initial database not found: {initial_db}")
    fd, tmp = tempfile.mkstemp(prefix="awm-template-", suffix=".db")
    os.close(fd)
    try:
        src = sqlite3.connect(f"file:{initial_db}?mode=ro", uri=True)
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            src.close()
        dst.execute(f"PRAGMA page_size={TEMPLATE_PAGE_SIZE}")
        dst.execute("PRAGMA journal_mode=DELETE")
        dst.execute("VACUUM")
        dst.close()
        return Path(tmp).read_bytes()
    finally:
        Path(tmp).unlink(missing_ok=True)


def open_instance_db(template: bytes) -> InstanceConnection:
    """A private in-memory copy of `template`."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, factory=InstanceConnection,
                           cached_statements=STATEMENT_CACHE)
    conn.deserialize(template)
    fix_sqlite(conn, image_clock(template))  # the environment's fixed clock for SQLite's 'now', if it has one
    return conn


class PageDelta:
    """A database image kept as the pages where it differs from its template (what a parked instance holds).

    An episode changes a few rows: a handful of 512-byte pages (the rows' leaves, their indexes, the header)
    of a template of 50-500 KB, so a parked instance costs a few KB instead of a whole copy. `apply` rebuilds the
    exact image (same length, same bytes); comparing in fixed chunks is exact whatever the database's page size."""

    __slots__ = ("size", "pages")

    def __init__(self, template: bytes, image: bytes, chunk: int = TEMPLATE_PAGE_SIZE):
        self.size = len(image)
        common = min(len(template), len(image))
        pages = [(off, image[off:off + chunk]) for off in range(0, common, chunk)
                 if image[off:off + chunk] != template[off:off + chunk]]
        if len(image) > common:  # grown past the template: the tail, whole
            pages.append((common, image[common:]))
        self.pages: tuple[tuple[int, bytes], ...] = tuple(pages)

    def apply(self, template: bytes) -> bytes:
        """The image this delta was taken from (given the same template)."""
        buf = bytearray(template[:self.size])
        for off, data in self.pages:
            buf[off:off + len(data)] = data
        return bytes(buf)

    @property
    def nbytes(self) -> int:
        """What the delta holds (its pages' bytes)."""
        return sum(len(data) for _, data in self.pages)


def write_db_file(conn_or_bytes: sqlite3.Connection | bytes, path: Path, *, read_only: bool = True) -> Path:
    """Write a database image to `path` atomically; read-only file mode by default (for verifiers)."""
    data = conn_or_bytes if isinstance(conn_or_bytes, bytes) else conn_or_bytes.serialize()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    if read_only:
        os.chmod(tmp, 0o444)
    os.replace(tmp, path)
    return path


def database_digest(conn: sqlite3.Connection) -> list[tuple[str, list[tuple]]]:
    """Every table's rows in a canonical order (for equality checks in tests and the benchmark)."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    out = []
    for t in tables:
        rows = conn.execute(f'SELECT * FROM "{t}"').fetchall()
        out.append((t, sorted(rows, key=repr)))
    return out


# --------------------------------------------------------------------------------------------
class _Slot:
    """What the pool needs from an instance: its live connection and its SQLAlchemy record."""

    __slots__ = ("conn", "record")

    def __init__(self) -> None:
        self.conn: InstanceConnection | None = None
        self.record: _ConnectionRecord | None = None


current_slot: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar("awm_current_instance", default=None)


class NoInstanceBound(RuntimeError):
    """The generated code touched its database outside a tool call (e.g. at import time)."""


def _current_conn() -> InstanceConnection:
    slot = current_slot.get()
    if slot is None or slot.conn is None:
        raise NoInstanceBound("database used outside an instance call: no instance database is bound")
    return slot.conn


class InstancePool(Pool):
    """A SQLAlchemy pool with one static connection per instance, chosen by `current_slot`.

    Like `StaticPool`, a checkout hands back the same connection every time (so nested sessions in a
    handler share it), but the connection follows the instance the call belongs to.
    """

    def __init__(self, creator=None, **kw):  # noqa: ARG002 - SQLAlchemy passes it; connections come from the slot
        super().__init__(lambda: _current_conn(), **kw)

    def status(self) -> str:
        return "InstancePool"

    def dispose(self) -> None:
        return None

    def recreate(self) -> "InstancePool":
        return self.__class__(reset_on_return=self._reset_on_return, echo=self.echo,
                              logging_name=self._orig_logging_name, _dispatch=self.dispatch,
                              dialect=self._dialect)

    def _do_return_conn(self, record) -> None:  # noqa: ARG002 - the pool interface; the connection stays open
        return None

    def _do_get(self):
        slot = current_slot.get()
        if slot is None or slot.conn is None:
            raise NoInstanceBound("database used outside an instance call: no instance database is bound")
        rec = slot.record
        if rec is None or rec._is_hard_or_soft_invalidated() or rec.dbapi_connection is not slot.conn:
            rec = slot.record = _ConnectionRecord(self)
        return rec
