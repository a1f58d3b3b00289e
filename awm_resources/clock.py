"""A fixed clock per environment version: the "now" an environment was synthesized or imported for.

Generated servers read the wall clock (`datetime.utcnow()`, `date.today()`), sample data is written relative
to it (`datetime('now', '-130 days')`) and verifiers compare against it, so without a fixed clock the same
environment holds different rows when imported on two days and behaves differently as the calendar moves.

The environment's "now" (UTC, to the minute) is stored in its database itself, in the SQLite header's
`application_id` (minutes since 1970), so every copy carries it: the template, each instance, each snapshot a
verifier reads. `clock.json` beside `initial.db` says the same for people. Where a database carries one:

- building it (`sqlite_build.build_database(now=...)`): SQLite's date functions see that time for 'now';
- serving it (`awm_rl.runtime.db`, `awm_rl.runtime.envcode`): the instance connections' date functions and, in
  the generated code (its imports of `datetime` give `datetime_module()`), `datetime.now()/utcnow()/today()`
  and `date.today()` return it;
- judging it (`awm_rl/isolation/verifier_worker.py` loads this file by path: it imports no project module): the
  verifier's `sqlite3` connections and `datetime`.

SQLite's `CURRENT_TIMESTAMP`/`CURRENT_DATE`/`CURRENT_TIME` keywords have no hook short of a VFS: where a database
is built they are written as the equivalent calls (`fixed_clock_sql`: DDL defaults, triggers, sample inserts);
in SQL the generated code sends at run time (SQLAlchemy's `func.now()`) they, and `time.time()`, still read the
wall clock. This module imports only the standard library.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import json
import re
import sqlite3
import threading
import types
from pathlib import Path
from typing import Any

CLOCK_FILE = "clock.json"
HEADER_OFFSET = 68  # SQLite database header: application_id, 4 bytes big-endian
# Imported environments get this "now" unless told otherwise: AgentWorldModel-1K's publication (arXiv 2602.10090),
# the same on every import, so an import is reproducible.
IMPORT_NOW = _dt.datetime(2026, 2, 10, 12, 0)
SQL_DATE_FUNCTIONS = ("date", "time", "datetime", "julianday", "strftime", "unixepoch", "timediff")
_EPOCH = _dt.datetime(1970, 1, 1)


def to_minutes(now: _dt.datetime) -> int:
    if now.tzinfo is not None:
        now = now.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    minutes = int((now - _EPOCH).total_seconds() // 60)
    if not 0 < minutes < 2**31:
        raise ValueError(f"an environment clock must lie after 1970 (got {now.isoformat()})")
    return minutes


def from_minutes(minutes: int) -> _dt.datetime | None:
    return _EPOCH + _dt.timedelta(minutes=minutes) if minutes > 0 else None


def image_clock(data: bytes) -> _dt.datetime | None:
    """The clock a database image carries (None: none, the wall clock applies)."""
    if len(data) < 100 or not data.startswith(b"SQLite format 3\0"):
        return None
    return from_minutes(int.from_bytes(data[HEADER_OFFSET:HEADER_OFFSET + 4], "big", signed=True))


def file_clock(path: Path | str) -> _dt.datetime | None:
    try:
        with open(path, "rb") as fh:
            return image_clock(fh.read(100))
    except OSError:
        return None


def stamp(conn: sqlite3.Connection, now: _dt.datetime) -> None:
    """Write `now` into the database's header (kept by every copy, serialize/deserialize included)."""
    conn.execute(f"PRAGMA application_id = {to_minutes(now)}")


def sql_now(now: _dt.datetime) -> str:
    return now.strftime("%Y-%m-%d %H:%M:%S")


def fix_sqlite(conn: sqlite3.Connection, now: _dt.datetime | None) -> None:
    """SQLite's date functions on `conn` read `now` for 'now' (and for no argument, as `datetime()` does)."""
    if now is None:
        return
    text = sql_now(now)
    if text not in _CALLS:  # one helper connection per clock and process: the built-ins, with 'now' replaced
        helper, lock = sqlite3.connect(":memory:", check_same_thread=False), threading.Lock()
        _CALLS[text] = {name: _fixed(helper, lock, name, text) for name in _available(helper)}
    for name, call in _CALLS[text].items():
        conn.create_function(name, -1, call, deterministic=True)


_CALLS: dict[str, dict[str, Any]] = {}


_AVAILABLE: list[str] = []


def _available(helper: sqlite3.Connection) -> list[str]:
    """The date functions this SQLite has (unixepoch: 3.38, timediff: 3.43), found once per process."""
    if not _AVAILABLE:
        for name in SQL_DATE_FUNCTIONS:
            try:
                helper.execute(f"SELECT {name}('2000-01-01')" if name != "strftime" else "SELECT strftime('%s', 'now')")
                _AVAILABLE.append(name)
            except sqlite3.OperationalError:
                continue
    return _AVAILABLE


def _fixed(helper: sqlite3.Connection, lock: threading.Lock, name: str, text: str):
    def call(*args: Any) -> Any:
        values = [text if isinstance(a, str) and a.strip().lower() == "now" else a for a in args]
        if not values and name != "strftime":
            values = [text]
        with lock:
            return helper.execute(f"SELECT {name}({', '.join('?' * len(values))})", values).fetchone()[0]
    return call


_STRING = re.compile(r"('(?:[^']|'')*')")
_KEYWORD = re.compile(r"\bCURRENT_(TIMESTAMP|DATE|TIME)\b", re.I)
_AS_CALL = {"timestamp": "(datetime('now'))", "date": "(date('now'))", "time": "(time('now'))"}


def fixed_clock_sql(sql: str) -> str:
    """`sql` with SQLite's CURRENT_TIMESTAMP/CURRENT_DATE/CURRENT_TIME (which no hook reaches) written as the
    same-valued calls `datetime('now')`, `date('now')`, `time('now')`, which `fix_sqlite` reaches; string
    literals are left alone. Used where a database is built (DDL defaults and triggers, sample inserts)."""
    parts = _STRING.split(sql)
    return "".join(part if i % 2 else _KEYWORD.sub(lambda m: _AS_CALL[m.group(1).lower()], part)
                   for i, part in enumerate(parts))


# ------------------------------------------------------------------------------ Python's datetime
_REAL_DATETIME, _REAL_DATE = _dt.datetime, _dt.date
_NOW: list[_dt.datetime | None] = [None]
_REAL = {"FixedDatetime": _REAL_DATETIME, "FixedDate": _REAL_DATE}


class _Lenient(type):
    """isinstance/issubclass against the fixed classes accept the real ones (objects made before the swap)."""

    def __instancecheck__(cls, obj: object) -> bool:
        real = _REAL.get(cls.__name__)
        return isinstance(obj, real) if real and cls.__module__ == __name__ else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub: type) -> bool:
        real = _REAL.get(cls.__name__)
        return issubclass(sub, real) if real and cls.__module__ == __name__ else type.__subclasscheck__(cls, sub)


def _as_real_type(real: type) -> Any:
    """pydantic's schema hook: a field annotated with a fixed class validates as the real one (pydantic knows
    `datetime`/`date` by identity; without this, generated models with date fields fail to import)."""

    def hook(_cls: type, _source: Any, handler: Any) -> Any:
        return handler.generate_schema(real)

    return classmethod(hook)


class FixedDatetime(_dt.datetime, metaclass=_Lenient):
    """`datetime.datetime` whose now/utcnow/today read the environment's clock when one is set."""

    __get_pydantic_core_schema__ = _as_real_type(_dt.datetime)

    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> _dt.datetime:  # type: ignore[override]
        fixed = _NOW[0]
        if fixed is None:
            return _REAL_DATETIME.now(tz)
        return fixed if tz is None else fixed.replace(tzinfo=_dt.timezone.utc).astimezone(tz)

    @classmethod
    def utcnow(cls) -> _dt.datetime:  # type: ignore[override]
        return _REAL_DATETIME.utcnow() if _NOW[0] is None else _NOW[0]

    @classmethod
    def today(cls) -> _dt.datetime:  # type: ignore[override]
        return cls.now()


class FixedDate(_dt.date, metaclass=_Lenient):
    __get_pydantic_core_schema__ = _as_real_type(_dt.date)

    @classmethod
    def today(cls) -> _dt.date:  # type: ignore[override]
        return _REAL_DATE.today() if _NOW[0] is None else _NOW[0].date()


def set_now(now: _dt.datetime | None) -> None:
    """The "now" the fixed classes return in this process (None: the wall clock)."""
    _NOW[0] = None if now is None else now.replace(tzinfo=None, second=0, microsecond=0)


def today() -> _dt.date:
    """The environment's day where this process has its clock (see `set_now`), else the wall clock's."""
    return _REAL_DATE.today() if _NOW[0] is None else _NOW[0].date()


_PROXY: list[types.ModuleType] = []


def datetime_module() -> types.ModuleType:
    """The `datetime` module as code under the environment's clock imports it: the real one with the fixed
    `datetime` and `date` (only that code: libraries keep the real module, their subclasses of it work)."""
    if not _PROXY:
        proxy = types.ModuleType("datetime", _dt.__doc__)
        proxy.__dict__.update({k: v for k, v in vars(_dt).items() if not k.startswith("__")})
        proxy.__dict__.update(datetime=FixedDatetime, date=FixedDate)
        _PROXY.append(proxy)
    return _PROXY[0]


def clock_builtins() -> dict[str, Any]:
    """Builtins for generated code: `import datetime` / `from datetime import ...` give `datetime_module()`."""
    real_import = builtins.__import__

    def _import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name == "datetime":
            return datetime_module()
        return real_import(name, globals, locals, fromlist, level)

    return {**vars(builtins), "__import__": _import}


# ------------------------------------------------------------------------------ stored with the environment
def write_clock_file(folder: Path, now: _dt.datetime, source: str) -> None:
    (Path(folder) / CLOCK_FILE).write_text(json.dumps({"now": sql_now(now), "source": source}) + "\n",
                                           encoding="utf-8")


def read_clock_file(folder: Path) -> _dt.datetime | None:
    path = Path(folder) / CLOCK_FILE
    if not path.is_file():
        return None
    try:
        return _REAL_DATETIME.fromisoformat(json.loads(path.read_text(encoding="utf-8"))["now"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a clock file ({exc})") from exc


def environment_now(folder: Path, *, source: str = "synthesized") -> _dt.datetime:
    """The scenario folder's clock; the first time, the current minute (UTC), stored in `clock.json`."""
    found = read_clock_file(folder)
    if found is not None:
        return found
    now = _REAL_DATETIME.now(_dt.timezone.utc).replace(tzinfo=None, second=0, microsecond=0)
    write_clock_file(folder, now, source)
    return now
