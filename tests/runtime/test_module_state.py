"""Module-level mutable state in generated code is detected by the env check and the environment rejected
(`awm_rl.quality.envcheck`: a global changed by a call, or two fresh instances that diverge after identical
calls while a freshly imported module reproduces the first); randomness alone is not rejected."""

from __future__ import annotations

import sqlite3

import pytest

from awm_rl.quality.envcheck import check_env_code

BASE = '''
import os, random, itertools, uuid
from fastapi import FastAPI
from pydantic import BaseModel, Field
from sqlalchemy import Column, Integer, String, create_engine
from sqlalchemy.orm import declarative_base, sessionmaker

engine = create_engine(os.getenv("DATABASE_PATH", "sqlite:///x.db"))
SessionLocal = sessionmaker(bind=engine)
Base = declarative_base()
app = FastAPI()


class Item(Base):
    __tablename__ = "items"
    id = Column(Integer, primary_key=True)
    name = Column(String, nullable=False)


Base.metadata.create_all(engine)


class ItemIn(BaseModel):
    name: str = Field(..., example="pen")


@app.get("/items", operation_id="list_items")
def list_items():
    s = SessionLocal()
    out = [{"id": i.id, "name": i.name} for i in s.query(Item).order_by(Item.id)]
    s.close()
    return {"items": out}
'''

DICT_STATE = BASE + '''
CARTS = {}


@app.post("/cart", operation_id="add_to_cart")
def add_to_cart(body: ItemIn):
    CARTS.setdefault("me", []).append(body.name)
    return {"cart": CARTS["me"]}
'''

COUNTER_STATE = BASE + '''
_next_order = 100


@app.post("/orders", operation_id="place_order")
def place_order(body: ItemIn):
    global _next_order
    _next_order += 1
    return {"order": _next_order}
'''

HIDDEN_STATE = BASE + '''
class _Registry:
    def __init__(self):
        self.seen = []

    def __repr__(self):  # hides its contents from a repr-based look
        return "<registry>"


REGISTRY = _Registry()


@app.post("/visits", operation_id="record_visit")
def record_visit(body: ItemIn):
    REGISTRY.seen.append(body.name)
    return {"visits": len(REGISTRY.seen)}
'''

CLOSURE_STATE = BASE + '''
def _make():
    box = []

    def bump():
        box.append(1)
        return len(box)
    return bump


_bump = _make()


@app.post("/bumps", operation_id="bump")
def bump(body: ItemIn):
    return {"bumps": _bump()}
'''

RANDOM_ONLY = BASE + '''
@app.post("/items", operation_id="create_item")
def create_item(body: ItemIn):
    s = SessionLocal()
    item = Item(name=f"{body.name}-{random.randint(0, 10**6)}-{uuid.uuid4().hex[:6]}")
    s.add(item)
    s.commit()
    out = {"id": item.id, "name": item.name, "lucky": random.random()}
    s.close()
    return out
'''


def _db(tmp_path):
    db = tmp_path / "initial.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    conn.execute("INSERT INTO items (name) VALUES ('book')")
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize("code, expect", [
    (DICT_STATE, "global(s) CARTS changed during the call of 'add_to_cart'"),
    (COUNTER_STATE, "global(s) _next_order changed during the call of 'place_order'"),
    (HIDDEN_STATE, "global(s) REGISTRY changed"),  # an object of a class the code defines: its attributes
    (CLOSURE_STATE, "identical calls on two fresh instances diverge at 'bump'"),  # invisible in globals
], ids=["dict", "counter", "object", "closure"])
def test_module_state_is_rejected_with_the_reason(tmp_path, code, expect):
    r = check_env_code(code, _db(tmp_path))
    assert not r.ok
    assert r.module_state and expect in r.module_state, r.module_state
    assert "module-level mutable state" in r.error


def test_randomness_alone_is_not_module_state(tmp_path):
    r = check_env_code(RANDOM_ONLY, _db(tmp_path))
    assert r.ok, r.error
    assert r.module_state is None
