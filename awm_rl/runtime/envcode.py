"""Import a generated environment (`server.py`) once per worker process, with its engine re-routed.

The generated code calls `create_engine(DATABASE_PATH, ...)` at import and never again, so we
replace `sqlalchemy.create_engine` (for the whole worker process, which exists only to host
generated code) with one that returns an engine on `InstancePool`: every connection it hands out
belongs to the instance of the current call. The import itself runs against a scratch copy of the
template, so `Base.metadata.create_all(engine)` and any import-time seeding land in it; that copy
becomes the scenario's effective initial database, exactly as if the published server had started
on `initial.db`.

Import-time failures (exceptions, `sys.exit`, a deadline) become `EnvLoadError` with the traceback
tail; nothing is left in `sys.modules`.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
import traceback
import types
from dataclasses import dataclass
from typing import Any

import sqlalchemy
import sqlalchemy.engine

from awm_resources.clock import clock_builtins, image_clock, set_now
from awm_rl.isolation.limits import CallTimeout, deadline, untrusted
from awm_rl.runtime.db import InstancePool, _Slot, current_slot, open_instance_db

# What the generated code sees as DATABASE_PATH: a SQLAlchemy URL that names no real file, so a
# stray `create_engine` we did not intercept fails loudly instead of writing somewhere.
SENTINEL_DATABASE_URL = "sqlite:////nonexistent/awm-instance-routed.db"

_real_create_engine = sqlalchemy.create_engine
_patch_lock = threading.Lock()
_patched = False
# The URLs the code being imported passed to `create_engine` (for `LoadedEnv.database_url`).
_requested_urls: list[str] = []


class EnvLoadError(RuntimeError):
    """The environment code could not be imported (message holds the reason and traceback tail)."""


# The generated code's own engine options are dropped: every engine is the instance-routed SQLite one.
def _routed_create_engine(url: Any = None, *args: Any, **kwargs: Any):  # noqa: ARG001 - dropped on purpose
    text = str(url) if url is not None else ""
    _requested_urls.append(text)
    if text and not (text.startswith("sqlite") or "://" not in text):
        raise EnvLoadError(f"environment code asked for a non-SQLite database ({text.split(':')[0]}); "
                           "only SQLite environments are supported")
    # No rollback when a connection goes back to the pool: a session leaked by a handler and
    # collected later would otherwise roll back whatever the instance is doing at that moment. The
    # host rolls back any transaction still open at the end of each call instead.
    return _real_create_engine("sqlite://", poolclass=InstancePool, pool_reset_on_return=None)


def install_engine_routing() -> None:
    """Make every `create_engine` in this process return an instance-routed SQLite engine."""
    global _patched
    with _patch_lock:
        if _patched:
            return
        sqlalchemy.create_engine = _routed_create_engine
        sqlalchemy.engine.create_engine = _routed_create_engine
        os.environ["DATABASE_PATH"] = SENTINEL_DATABASE_URL
        _patched = True


def traceback_tail(exc: BaseException, *, limit_chars: int = 2500) -> str:
    """The last part of a formatted traceback (where generated-code errors usually are)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text if len(text) <= limit_chars else "...\n" + text[-limit_chars:]


@dataclass
class LoadedEnv:
    module: types.ModuleType
    app: Any  # fastapi.FastAPI
    template: bytes  # the effective initial database (after import-time create_all / seeding)
    lines_of_code: int
    database_url: str | None = None  # what the code passed to create_engine, DATABASE_PATH being SENTINEL_DATABASE_URL

    @property
    def accepts_database_url(self) -> bool | None:
        """Whether the code used DATABASE_PATH as given when it is a `sqlite:///` URL, as the published pipeline
        sets it (code that prefixes `sqlite:///` itself gets `sqlite:///sqlite:///...`). None: no engine made."""
        return None if self.database_url is None else self.database_url == SENTINEL_DATABASE_URL


def load_env(code: str, template: bytes, *, module_name: str, filename: str,
             timeout_s: float | None = 30.0) -> LoadedEnv:
    """Execute `code` as module `module_name` against a scratch copy of `template`."""
    from fastapi import FastAPI

    install_engine_routing()
    try:
        compiled = compile(code, filename, "exec")
    except SyntaxError as exc:
        raise EnvLoadError(f"environment code does not compile: {exc.msg} ({filename}, line {exc.lineno})") from None
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    module.__dict__["__builtins__"] = clock_builtins()
    sys.modules[module_name] = module
    set_now(image_clock(template))  # the generated code's datetime reads the environment's clock, if it has one
    slot = _Slot()
    slot.conn = open_instance_db(template)
    token = current_slot.set(slot)
    ok = False
    _requested_urls.clear()
    try:
        with untrusted(), deadline(timeout_s):
            exec(compiled, module.__dict__)  # noqa: S102 - generated code, in a limited worker process
        app = module.__dict__.get("app")
        if not isinstance(app, FastAPI):
            app = next((v for v in module.__dict__.values() if isinstance(v, FastAPI)), None)
        if app is None:
            raise EnvLoadError("environment code defines no FastAPI app (expected a module-level `app = FastAPI(...)`)")
        new_template = slot.conn.serialize()
        ok = True
        return LoadedEnv(module=module, app=app, template=new_template, lines_of_code=len(code.splitlines()),
                         database_url=_requested_urls[0] if _requested_urls else None)
    except EnvLoadError:
        raise
    except CallTimeout:
        raise EnvLoadError(f"environment code did not finish importing within {timeout_s:.0f}s") from None
    except SystemExit as exc:
        raise EnvLoadError(f"environment code called sys.exit({exc.code!r}) while importing") from None
    except MemoryError:
        raise EnvLoadError("environment code ran out of memory while importing (memory cap reached)") from None
    except BaseException as exc:  # noqa: BLE001 - anything generated code raises is a load error
        raise EnvLoadError(f"environment code failed to import: {type(exc).__name__}: {exc}\n"
                           f"{traceback_tail(exc)}") from None
    finally:
        current_slot.reset(token)
        slot.conn.really_close()
        if not ok:
            sys.modules.pop(module_name, None)
            linecache.cache.pop(filename, None)
