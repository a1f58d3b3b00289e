"""Fixtures for the environment runtime tests: a pool over the imported corpus, and a store of bad envs."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

# Environment code that misbehaves in every way the runtime must survive. Written here (not taken
# from the corpus) so each failure is deliberate and named.
BAD_ENV = '''
import asyncio, os, socket, sys, time
from fastapi import FastAPI, Query
from pydantic import BaseModel, Field
from sqlalchemy import Column, Integer, String, create_engine
from sqlalchemy.orm import declarative_base, sessionmaker

DATABASE_PATH = os.getenv("DATABASE_PATH", "sqlite:///bad.db")
engine = create_engine(DATABASE_PATH, connect_args={"check_same_thread": False})
SessionLocal = sessionmaker(autocommit=False, autoflush=False, bind=engine)
Base = declarative_base()
app = FastAPI(title="bad env")


class Note(Base):
    __tablename__ = "notes"
    id = Column(Integer, primary_key=True)
    text = Column(String, nullable=False)


Base.metadata.create_all(engine)


class NoteIn(BaseModel):
    text: str = Field(..., min_length=1, description="note text", example="hello")


@app.post("/notes", operation_id="add_note", summary="Add a note")
async def add_note(body: NoteIn):
    s = SessionLocal()
    n = Note(text=body.text)
    s.add(n)
    s.commit()
    out = {"id": n.id, "text": n.text}
    s.close()
    return out


@app.get("/notes", operation_id="list_notes", summary="List notes")
async def list_notes(limit: int = Query(50, ge=1, le=500)):
    s = SessionLocal()
    rows = [{"id": n.id, "text": n.text} for n in s.query(Note).order_by(Note.id).limit(limit)]
    s.close()
    return {"notes": rows}


@app.post("/leak", operation_id="leak_session", summary="Write without commit and never close the session")
async def leak_session(body: NoteIn):
    s = SessionLocal()
    s.add(Note(text=body.text))
    s.flush()
    return {"leaked": True}


@app.get("/boom", operation_id="boom")
async def boom():
    raise RuntimeError("handler exploded")


@app.get("/spin", operation_id="spin")
async def spin():
    while True:
        pass


@app.get("/sleep", operation_id="sleep_forever")
async def sleep_forever():
    await asyncio.sleep(3600)


@app.get("/block", operation_id="block_in_thread")
def block_in_thread():
    time.sleep(3600)


@app.get("/alloc", operation_id="alloc")
async def alloc():
    hog = []
    while True:
        hog.append(bytearray(64 * 2**20))


@app.get("/exit", operation_id="exit_process")
async def exit_process():
    sys.exit(3)


@app.get("/net", operation_id="phone_home")
async def phone_home():
    socket.create_connection(("127.0.0.1", 9), timeout=2)  # loopback only: the guard must refuse it
    return {"reached": True}
'''

# Import-time and startup-time writes land in the effective initial database, as they would when the
# published server starts on initial.db.
SEEDED_ENV = BAD_ENV + '''

_s = SessionLocal()
_s.add(Note(text="seeded at import"))
_s.commit()
_s.close()


@app.on_event("startup")
async def seed_on_startup():
    s = SessionLocal()
    s.add(Note(text="seeded at startup"))
    s.commit()
    s.close()
'''

BROKEN_ENV = '''
from fastapi import FastAPI
app = FastAPI()
ratio = 1 / 0
'''


def make_scenario(store_root: Path, key: str, code: str, initial_db: Path | None = None) -> Path:
    folder = store_root / "scenarios" / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.json").write_text('{"name": "%s"}' % key)
    (folder / "server.py").write_text(code)
    if initial_db is not None:
        shutil.copyfile(initial_db, folder / "initial.db")
    else:
        conn = sqlite3.connect(folder / "initial.db")
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
        conn.executemany("INSERT INTO notes (text) VALUES (?)", [("first",), ("second",)])
        conn.commit()
        conn.close()
    return folder


@pytest.fixture(scope="session")
def bad_store(tmp_path_factory, corpus_store):
    """A store with the misbehaving env, an env that fails to import, and one corpus env (rover)."""
    root = tmp_path_factory.mktemp("bad_store")
    make_scenario(root, "bad_env", BAD_ENV)
    make_scenario(root, "broken_env", BROKEN_ENV)
    make_scenario(root, "seeded_env", SEEDED_ENV)
    src = corpus_store.scenario_dir("rover")
    make_scenario(root, "rover", (src / "server.py").read_text(), src / "initial.db")
    return root


@pytest.fixture(scope="module")
def corpus_pool(corpus_store):
    from awm_rl.runtime.pool import EnvironmentPool

    pool = EnvironmentPool(corpus_store.root, num_hosts=2, prefetch=2)
    yield pool
    pool.close()
