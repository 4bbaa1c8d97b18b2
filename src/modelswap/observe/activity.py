"""The persistent activity log: one SQLite row per finished request.

Writing is off the request path. :meth:`ActivityLog.record` only appends to a bounded in-memory
queue (no I/O, never blocks); :meth:`ActivityLog.run`, a background task, writes the queue in one
transaction every ``batch_seconds`` on a worker thread (``asyncio.to_thread``) so SQLite never
blocks the event loop, and applies retention at most once per :data:`RETENTION_INTERVAL`.

The database carries a schema version in ``meta``; :data:`MIGRATIONS` brings an older file up to
:data:`SCHEMA_VERSION` (rows kept), and a file from a newer modelswap is refused with
:class:`ActivityError` rather than written to.

One connection, guarded by a lock, serves writes and queries (``check_same_thread=False``); a
file database uses WAL. :meth:`query` and :meth:`stats` block on that lock and on disk I/O:
call them from a thread (``asyncio.to_thread``) when on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from modelswap.errors import ModelswapError
from modelswap.observe.records import RequestRecord
from modelswap.statefile import FILE_MODE, make_private_dir, move_aside, tighten_path

log = logging.getLogger(__name__)

MEMORY = ":memory:"
COMPANIONS = ("-wal", "-shm")  # SQLite's files beside the database, moved aside with it
SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26
REOPEN_FIRST = 1.0  # seconds before an unavailable database is opened again, doubled ...
REOPEN_MAX = 60.0  # ... up to this
MAX_QUERY_LIMIT = 1000
RETENTION_INTERVAL = 60.0
"""Seconds between two retention passes in :meth:`ActivityLog.run`."""


class ActivityError(ModelswapError):
    """The activity database cannot be used (newer schema, not a database, write failure)."""


def _migrate_to_v1(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE requests ("
        " id INTEGER PRIMARY KEY, at REAL NOT NULL, key_name TEXT, model TEXT,"
        " route TEXT NOT NULL, status INTEGER NOT NULL, streamed INTEGER NOT NULL,"
        " prompt_tokens INTEGER, completion_tokens INTEGER, ttft REAL, duration REAL NOT NULL,"
        " bytes_in INTEGER NOT NULL, bytes_out INTEGER NOT NULL, error_code TEXT)"
    )
    conn.execute("CREATE INDEX requests_at ON requests(at)")
    conn.execute("CREATE INDEX requests_model ON requests(model)")


def _migrate_to_v2(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE requests ADD COLUMN tokens_per_second REAL")
    conn.execute("ALTER TABLE requests ADD COLUMN request_body TEXT")
    conn.execute("ALTER TABLE requests ADD COLUMN response_body TEXT")


def _migrate_to_v3(conn: sqlite3.Connection) -> None:
    # Until v3 ``ttft`` was the first byte; older rows keep it, and say so in ``first_byte``.
    conn.execute("ALTER TABLE requests ADD COLUMN first_byte REAL")
    conn.execute("ALTER TABLE requests ADD COLUMN load REAL")
    conn.execute("UPDATE requests SET first_byte = ttft")


def _migrate_to_v4(conn: sqlite3.Connection) -> None:
    # The X-Request-Id the client got; older rows have none (NULL).
    conn.execute("ALTER TABLE requests ADD COLUMN request_id TEXT")
    conn.execute("CREATE INDEX requests_request_id ON requests(request_id)")


def _migrate_to_v5(conn: sqlite3.Connection) -> None:
    # The model the client asked for (bounded, redacted): what a 404 row names.
    conn.execute("ALTER TABLE requests ADD COLUMN requested TEXT")


def _migrate_to_v6(conn: sqlite3.Connection) -> None:
    # With capture, the headers too (JSON objects, credentials masked): llama-swap's captures.
    conn.execute("ALTER TABLE requests ADD COLUMN request_headers TEXT")
    conn.execute("ALTER TABLE requests ADD COLUMN response_headers TEXT")


def _migrate_to_v7(conn: sqlite3.Connection) -> None:
    # Prompt tokens the backend took from its cache; older rows have none (NULL).
    conn.execute("ALTER TABLE requests ADD COLUMN cached_tokens INTEGER")


def _migrate_to_v8(conn: sqlite3.Connection) -> None:
    # Whether the client got an error: a status >= 400, or an error event inside a 200 stream
    # (``error_code`` set). Older rows are judged by what they stored; a stream whose start
    # failed after its loading comments was stored then as a plain 200 and stays "ok".
    conn.execute("ALTER TABLE requests ADD COLUMN outcome TEXT")
    conn.execute(
        "UPDATE requests SET outcome = CASE"
        " WHEN status >= 400 OR error_code IS NOT NULL THEN 'error' ELSE 'ok' END"
    )


def _migrate_to_v9(conn: sqlite3.Connection) -> None:
    # The Swap Policy Language's context.<key> values, as a JSON object; older rows have none.
    conn.execute("ALTER TABLE requests ADD COLUMN metadata TEXT")


def _migrate_to_v10(conn: sqlite3.Connection) -> None:
    # Why a request was refused or failed (issue 41): its method (OPTIONS: a preflight), the
    # error's message, and the rule that refused it (a JSON object). A client's own stop (499
    # with no error of the gateway's) is "stopped" now, not an error; older rows are judged
    # again by what they stored (their method was not kept: none is a preflight).
    conn.execute("ALTER TABLE requests ADD COLUMN method TEXT")
    conn.execute("ALTER TABLE requests ADD COLUMN error_message TEXT")
    conn.execute("ALTER TABLE requests ADD COLUMN rule TEXT")
    conn.execute(
        "UPDATE requests SET outcome = 'stopped' WHERE status = 499 AND error_code IS NULL"
    )


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _migrate_to_v1,
    _migrate_to_v2,
    _migrate_to_v3,
    _migrate_to_v4,
    _migrate_to_v5,
    _migrate_to_v6,
    _migrate_to_v7,
    _migrate_to_v8,
    _migrate_to_v9,
    _migrate_to_v10,
]
"""``MIGRATIONS[i]`` takes a database from version ``i`` to ``i + 1`` (0 = empty)."""
SCHEMA_VERSION = len(MIGRATIONS)

_COLUMNS = (
    "at",
    "request_id",
    "key_name",
    "model",
    "route",
    "status",
    "streamed",
    "prompt_tokens",
    "completion_tokens",
    "ttft",
    "first_byte",
    "load",
    "requested",
    "duration",
    "tokens_per_second",
    "bytes_in",
    "bytes_out",
    "error_code",
    "outcome",
    "request_body",
    "response_body",
    "request_headers",
    "response_headers",
    "cached_tokens",
    "metadata",
    "method",
    "error_message",
    "rule",
)
_JSON_COLUMNS = frozenset({"metadata", "rule"})
_CAPTURED = frozenset({"request_body", "response_body", "request_headers", "response_headers"})
_INSERT = (
    f"INSERT INTO requests ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"
)
_SELECT = f"SELECT id, {', '.join(_COLUMNS)} FROM requests"


def _row_values(rec: RequestRecord) -> tuple[object, ...]:
    return (
        rec.at,
        rec.request_id,
        rec.key_name,
        rec.model,
        rec.route,
        rec.status,
        int(rec.streamed),
        rec.prompt_tokens,
        rec.completion_tokens,
        rec.ttft,
        rec.first_byte,
        rec.load,
        rec.requested,
        rec.duration,
        rec.tokens_per_second,
        rec.bytes_in,
        rec.bytes_out,
        rec.error_code,
        rec.outcome,
        rec.request_body,
        rec.response_body,
        rec.request_headers,
        rec.response_headers,
        rec.cached_tokens,
        json.dumps(dict(rec.metadata), sort_keys=True) if rec.metadata else None,
        rec.method,
        rec.error_message,
        json.dumps(dict(rec.rule), sort_keys=True) if rec.rule is not None else None,
    )


def _row_dict(row: tuple[object, ...]) -> dict[str, object]:
    out: dict[str, object] = {"id": row[0]}
    for name, value in zip(_COLUMNS, row[1:], strict=True):
        if name in _CAPTURED and value is None:
            continue
        if name in _JSON_COLUMNS:
            if isinstance(value, str):
                out[name] = json.loads(value)
            elif name == "rule":
                out[name] = None  # the row says "no rule" rather than leaving it out
            continue
        out[name] = bool(value) if name == "streamed" else value
    return out


def stored_version(conn: sqlite3.Connection) -> int:
    """The schema version recorded in ``conn`` (0 for a database without one). Read-only."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta is None:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return 0
    try:
        return int(row[0])
    except (TypeError, ValueError) as exc:
        raise ActivityError(
            f"activity database has an unreadable schema_version {row[0]!r}"
        ) from exc


def _check_version(conn: sqlite3.Connection, where: str) -> int:
    version = stored_version(conn)
    if version > SCHEMA_VERSION:
        raise ActivityError(
            f"activity database {where} has schema version {version}, newer than this modelswap"
            f" understands ({SCHEMA_VERSION}); upgrade modelswap or point activity at another file"
        )
    return version


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _migrate(conn: sqlite3.Connection, where: str) -> None:
    """Apply :data:`MIGRATIONS` from the stored version up, one transaction per step."""
    version = _check_version(conn, where)
    for target in range(version + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            MIGRATIONS[target - 1](conn)
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(target),),
            )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        log.info("activity database %s migrated to schema version %d", where, target)


def _connect(path: str | Path) -> tuple[sqlite3.Connection, str]:
    if str(path) == MEMORY:
        conn = sqlite3.connect(MEMORY, check_same_thread=False, isolation_level=None)
        return conn, MEMORY
    file = Path(path).expanduser()
    make_private_dir(file.parent)
    if not file.exists():
        # Key names (and, with capture, bodies) live here: readable by the owner only. SQLite
        # gives the -wal and -shm files the same permissions as the database file.
        os.close(os.open(file, os.O_CREAT | os.O_WRONLY, FILE_MODE))
    for suffix in ("", *COMPANIONS):  # one an older modelswap left looser (issue 38)
        with contextlib.suppress(OSError):
            tighten_path(Path(f"{file}{suffix}"))
    conn = sqlite3.connect(file, check_same_thread=False, isolation_level=None)
    return conn, str(file)


def _corrupt(exc: sqlite3.Error) -> bool:
    """SQLITE_NOTADB or SQLITE_CORRUPT: the file is not (or no longer) a database."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB)
    text = str(exc)
    return "file is not a database" in text or "malformed" in text


# The columns a page may be sorted by (never the client's text in the SQL).
SORT_COLUMNS = frozenset(
    {"id", "at", "model", "route", "status", "streamed", "prompt_tokens", "completion_tokens"}
    | {"tokens_per_second", "duration", "cached_tokens"}
)


@dataclass(frozen=True, slots=True)
class PageQuery:
    """A page of rows: filters (each optional, all ANDed), order, and where the page starts."""

    models: tuple[str, ...] = ()
    start: float | None = None  # unix time, inclusive
    end: float | None = None
    min_id: int | None = None
    max_id: int | None = None
    sort: str = "id"  # one of SORT_COLUMNS
    ascending: bool = False
    limit: int = 25
    offset: int = 0

    def __post_init__(self) -> None:
        if self.sort not in SORT_COLUMNS:
            raise ValueError(f"cannot sort by {self.sort!r}")


def _page_where(query: PageQuery) -> tuple[str, list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if query.models:
        clauses.append(f"model IN ({', '.join('?' for _ in query.models)})")
        params.extend(query.models)
    for clause, value in (
        ("at >= ?", query.start),
        ("at <= ?", query.end),
        ("id >= ?", query.min_id),
        ("id <= ?", query.max_id),
    ):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), params


class ActivityLog:
    """Batched, bounded, versioned SQLite log of finished requests.

    ``record`` is safe from any thread and never blocks. ``run`` is the writer task; ``close``
    (or ``close_now``) writes whatever is still pending and closes the database. Records that
    arrive after closing, that overflow the pending queue, or that cannot be written are
    counted in ``dropped``, by reason (:meth:`dropped_by`).

    Never off for the rest of the run (issue 38): a corrupt file (not a database, malformed)
    is moved aside, kept as ``<name>.corrupt-<UTC time>``, and a fresh one started; a database
    that cannot be opened or set up (a full disk at start) leaves the log *unavailable*: its
    rows are dropped and counted, and ``run`` opens it again after a backoff
    (:data:`REOPEN_FIRST` doubling to :data:`REOPEN_MAX`) until it can. Only a file of a newer
    schema is refused (:class:`ActivityError`), to be left untouched.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_age_days: float = 30,
        max_rows: int = 100_000,
        batch_seconds: float = 0.5,
        max_pending: int = 10_000,
    ) -> None:
        if max_age_days <= 0 or max_rows < 1 or batch_seconds <= 0 or max_pending < 1:
            raise ValueError(
                "max_age_days and batch_seconds must be > 0, max_rows and max_pending >= 1"
            )
        self.max_age_days = max_age_days
        self.max_rows = max_rows
        self.batch_seconds = batch_seconds
        self.max_pending = max_pending
        # Rows, not records: the row is built on the loop (a few µs) so the batch writer's
        # thread runs almost only sqlite's C code, which releases the GIL the loop needs.
        self._pending: deque[tuple[object, ...]] = deque()
        self._pending_lock = threading.Lock()
        self._conn_lock = threading.Lock()
        self._dropped = 0
        self._dropped_by: dict[str, int] = {}
        self._closed = False
        self._stop = asyncio.Event()
        self._last_retention: float | None = None
        self._failing = False  # the last write failed (logged once until one succeeds)
        self._path = path
        self.where = MEMORY if str(path) == MEMORY else str(Path(path).expanduser())
        self._conn: sqlite3.Connection | None = None
        self.problem: str | None = None  # why the database is unavailable now
        self.moved_aside: list[str] = []  # corrupt files kept, in order
        self._reopen_at = 0.0  # monotonic: when run() tries to open it again
        self._reopen_delay = REOPEN_FIRST
        self._open()

    # -- opening ------------------------------------------------------------------------------

    def _open(self) -> bool:
        """Open and set up the database (a corrupt file moved aside and a fresh one made);
        False when it cannot be now (the reason in :attr:`problem`, said once). Raises
        :class:`ActivityError` for a newer schema only."""
        for attempt in (1, 2):  # a second time after a corrupt file was moved aside
            try:
                conn, self.where = _connect(self._path)
            except (OSError, sqlite3.Error) as exc:
                return self._unavailable(f"cannot open activity database {self._path}: {exc}")
            try:
                self._setup(conn)
            except sqlite3.Error as exc:
                conn.close()
                corrupt = attempt == 1 and self.where != MEMORY and _corrupt(exc)
                if corrupt and self._set_aside(exc):
                    continue
                return self._unavailable(f"cannot use activity database {self.where}: {exc}")
            except BaseException:
                conn.close()
                raise
            with self._conn_lock:
                self._conn = conn
            if self.problem is not None:
                log.warning(
                    "activity log: recording again in %s (%d rows dropped while it could not)",
                    self.where,
                    self._dropped_by.get("unavailable", 0),
                )
            self.problem = None
            self._reopen_delay = REOPEN_FIRST
            return True
        return False  # pragma: no cover - the loop returns

    def _set_aside(self, why: sqlite3.Error) -> bool:
        """Move a corrupt database (with its -wal and -shm) aside; True when it was."""
        try:
            kept = move_aside(Path(self.where), companions=COMPANIONS)
        except OSError as exc:
            log.warning("activity database %s is corrupt (%s): %s", self.where, why, exc)
            return False
        self.moved_aside.append(str(kept))
        log.warning(
            "activity database %s is corrupt (%s): moved aside to %s; a fresh one is started",
            self.where,
            why,
            kept,
        )
        return True

    def _unavailable(self, why: str) -> bool:
        if self.problem is None:
            log.warning(
                "activity log: %s; its rows are dropped (counted) until it can be opened again,"
                " tried by itself",
                why,
            )
        self.problem = why
        self._reopen_at = time.monotonic() + self._reopen_delay
        self._reopen_delay = min(self._reopen_delay * 2, REOPEN_MAX)
        return False

    @property
    def state(self) -> str:
        """``recording``, or ``unavailable`` (:attr:`problem` says why) until reopened."""
        return "recording" if self.problem is None else "unavailable"

    def dropped_by(self) -> dict[str, int]:
        """Rows lost, by reason: ``unavailable`` (the database could not be opened),
        ``write_failed`` (a batch failed: a full disk), ``queue_full``, ``closed``."""
        with self._pending_lock:
            return dict(self._dropped_by)

    def _setup(self, conn: sqlite3.Connection) -> None:
        # The version is checked before anything is written, so a newer file is left untouched.
        _check_version(conn, self.where)
        if self.where != MEMORY:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("activity database %s: journal_mode is %s, not wal", self.where, mode)
            conn.execute("PRAGMA synchronous=NORMAL")
        _migrate(conn, self.where)

    # -- the request path ---------------------------------------------------------------------

    def record(self, rec: RequestRecord) -> None:
        """Queue ``rec`` for the next batch. No I/O; drops the oldest pending record when full."""
        with self._pending_lock:
            if self._closed:
                self._count("closed", 1)
                return
            if len(self._pending) >= self.max_pending:
                self._pending.popleft()
                self._count("queue_full", 1)
            self._pending.append(_row_values(rec))

    def _count(self, reason: str, n: int) -> None:
        """Count ``n`` dropped rows; the caller holds ``_pending_lock``."""
        self._dropped += n
        self._dropped_by[reason] = self._dropped_by.get(reason, 0) + n

    # -- writing ------------------------------------------------------------------------------

    def _write_pending(self, *, closing: bool = False) -> int:
        """Write every pending record in one transaction. Blocks: call it off the event loop."""
        with self._conn_lock:
            with self._pending_lock:
                batch = list(self._pending)
                self._pending.clear()
                if closing:
                    self._closed = True
            if not batch:
                return 0
            conn = self._conn
            if conn is None:
                self._count_dropped(len(batch), "closed" if closing else "unavailable")
                return 0
            try:
                conn.execute("BEGIN")
                try:
                    conn.executemany(_INSERT, batch)
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
            except sqlite3.Error as exc:
                self._count_dropped(len(batch), "write_failed")
                if _corrupt(exc):
                    self._replace_corrupt(exc)
                raise ActivityError(
                    f"writing {len(batch)} activity rows to {self.where} failed: {exc}"
                ) from exc
            return len(batch)

    def _count_dropped(self, n: int, reason: str) -> None:
        with self._pending_lock:
            self._count(reason, n)

    def _replace_corrupt(self, why: sqlite3.Error) -> None:
        """A database found corrupt while running: closed, moved aside, and a fresh one opened
        (now, or by ``run`` later). The caller holds ``_conn_lock``."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._set_aside(why)
        self._unavailable(f"activity database {self.where} was corrupt: {why}")

    def flush_now(self) -> int:
        """Write the pending records now, on this thread; returns how many. For tests and CLI."""
        return self._write_pending()

    def retain(self, now: float | None = None) -> int:
        """Delete rows older than ``max_age_days`` and all but the newest ``max_rows``.

        Returns the number of rows deleted. Blocks: call it off the event loop. ``run`` calls it
        at most once per :data:`RETENTION_INTERVAL`.
        """
        cutoff = (time.time() if now is None else now) - self.max_age_days * 86_400
        with self._conn_lock:
            conn = self._conn
            if conn is None:
                return 0
            conn.execute("BEGIN")
            try:
                deleted = conn.execute("DELETE FROM requests WHERE at < ?", (cutoff,)).rowcount
                deleted += conn.execute(
                    "DELETE FROM requests WHERE id <= ("
                    " SELECT id FROM requests ORDER BY id DESC LIMIT 1 OFFSET ?)",
                    (self.max_rows,),
                ).rowcount
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        if deleted:
            log.debug("activity retention deleted %d rows", deleted)
        return deleted

    def _retention_due(self) -> bool:
        last = self._last_retention
        return last is None or time.monotonic() - last >= RETENTION_INTERVAL

    def _tick(self) -> int:
        if self._conn is None and not self._closed and time.monotonic() >= self._reopen_at:
            self._open()
        written = self._write_pending()
        if self._retention_due():
            self._last_retention = time.monotonic()
            self.retain()
        return written

    async def run(self) -> None:
        """The writer task: every ``batch_seconds`` write the pending batch on a worker thread.

        Returns once :meth:`close` is called; a failed batch is counted in ``dropped``, never
        fatal, and logged once: a full disk fails every batch, so the next warning waits until
        a write has succeeded again. Cancelling it is safe: ``close`` writes what is left.
        """
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.batch_seconds)
            if self._stop.is_set():
                return
            reopen = self._conn is None and time.monotonic() >= self._reopen_at
            if not self._pending and not self._retention_due() and not reopen:
                continue  # idle: no thread hop
            try:
                written = await asyncio.to_thread(self._tick)
            except (ActivityError, sqlite3.Error) as exc:
                if not self._failing:
                    log.warning("activity log: %s (not logged again until a write succeeds)", exc)
                self._failing = True
                continue
            if written and self._failing:
                self._failing = False
                log.warning("activity log: writing again (%d rows dropped so far)", self._dropped)

    def close_now(self) -> None:
        """Write what is pending and close the database, on this thread. Idempotent."""
        try:
            self._write_pending(closing=True)
        finally:
            with self._conn_lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

    async def close(self) -> None:
        """Stop :meth:`run`, write what is pending (off the loop) and close. Idempotent."""
        self._stop.set()
        await asyncio.to_thread(self.close_now)

    # -- reading ------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ActivityError(f"activity log {self.where} is closed")
        return self._conn

    def readable(self) -> bool:
        """Whether the database is open: while it is unavailable, reads find no rows."""
        return self._conn is not None

    def query(
        self,
        *,
        model: str | None = None,
        request_id: str | None = None,
        since: float | None = None,
        status: int | None = None,
        outcome: str | None = None,
        limit: int = 100,
        before_id: int | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, object]]:
        """Stored rows, newest first, as JSON-ready dicts (with ``id``; bodies only if stored).
        ``outcome`` is one of :data:`~modelswap.observe.records.OUTCOMES` (see
        :attr:`RequestRecord.outcome`);
        ``session_id`` the session a request named (``metadata.session_id``).

        Page with ``before_id`` = the smallest ``id`` of the previous page. ``limit`` is capped
        at :data:`MAX_QUERY_LIMIT`. Pending (not yet written) records are not included.
        """
        clauses: list[str] = []
        params: list[object] = []
        if model is not None:
            clauses.append("model = ?")
            params.append(model)
        if request_id is not None:
            clauses.append("request_id = ?")
            params.append(request_id)
        if since is not None:
            clauses.append("at >= ?")
            params.append(since)
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if outcome is not None:
            clauses.append("outcome = ?")
            params.append(outcome)
        if before_id is not None:
            clauses.append("id < ?")
            params.append(before_id)
        if session_id is not None:
            clauses.append("json_extract(metadata, '$.session_id') = ?")
            params.append(session_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        params.append(max(0, min(limit, MAX_QUERY_LIMIT)))
        with self._conn_lock:
            if self._conn is None and not self._closed:
                return []  # unavailable (a full disk at start): nothing to read yet
            rows = (
                self._connection()
                .execute(f"{_SELECT}{where} ORDER BY id DESC LIMIT ?", params)
                .fetchall()
            )
        return [_row_dict(tuple(row)) for row in rows]

    def page(self, query: PageQuery) -> tuple[list[dict[str, object]], int]:
        """One page of stored rows for llama-swap's ``/api/metrics/activity``, and how many rows
        match in all. Pending (not yet written) records are not included."""
        where, params = _page_where(query)
        direction = "ASC" if query.ascending else "DESC"
        order = (
            f"{query.sort} {direction}, id {direction}" if query.sort != "id" else f"id {direction}"
        )
        limit = max(0, min(query.limit, MAX_QUERY_LIMIT))
        with self._conn_lock:
            if self._conn is None and not self._closed:
                return [], 0
            conn = self._connection()
            total = int(conn.execute(f"SELECT COUNT(*) FROM requests{where}", params).fetchone()[0])
            rows = conn.execute(
                f"{_SELECT}{where} ORDER BY {order} LIMIT ? OFFSET ?",
                [*params, limit, max(0, query.offset)],
            ).fetchall()
        return [_row_dict(tuple(row)) for row in rows], total

    def totals(self, model: str | None = None) -> tuple[int, int, int, int, list[float]]:
        """Requests, prompt tokens, completion tokens, cached prompt tokens, and every known
        generation speed (>0) of the stored rows (of ``model`` only, when given)."""
        where, params = (" WHERE model = ?", [model]) if model else ("", [])
        with self._conn_lock:
            if self._conn is None and not self._closed:
                return 0, 0, 0, 0, []
            conn = self._connection()
            count, prompt, completion, cached = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0),"
                " COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cached_tokens), 0)"
                f" FROM requests{where}",
                params,
            ).fetchone()
            extra = " AND" if where else " WHERE"
            speeds = conn.execute(
                f"SELECT tokens_per_second FROM requests{where}{extra} tokens_per_second > 0",
                params,
            ).fetchall()
        speeds_seen = [float(row[0]) for row in speeds]
        return int(count), int(prompt), int(completion), int(cached), speeds_seen

    def stats(self) -> dict[str, int]:
        """``{"rows": stored, "dropped": lost, "pending": queued}``; a snapshot (no rows
        while the database is unavailable)."""
        with self._conn_lock:
            if self._conn is None and not self._closed:
                rows = 0
            else:
                sql = "SELECT COUNT(*) FROM requests"
                rows = int(self._connection().execute(sql).fetchone()[0])
        with self._pending_lock:
            return {"rows": rows, "dropped": self._dropped, "pending": len(self._pending)}
