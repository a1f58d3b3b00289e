"""The probe finds where a tool works: a row in the one state it acts on, a fresh unique name for a create,
an id only a create makes, a state another write tool sets first; "client errors only" is left for a tool
no grounded input reaches, with the answers it got (awm_rl.quality.probe, arguments)."""

from __future__ import annotations

import sqlite3

import pytest

from awm_rl.quality.envcheck import check_env_code

ENV_CODE = '''
import os

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import Column, Integer, String, create_engine
from sqlalchemy.orm import declarative_base, sessionmaker

DATABASE_PATH = os.getenv("DATABASE_PATH", "sqlite:///probe_retries.db")
engine = create_engine(DATABASE_PATH, connect_args={"check_same_thread": False})
SessionLocal = sessionmaker(autocommit=False, autoflush=False, bind=engine)
Base = declarative_base()
app = FastAPI(title="Probe retries test environment")


class Transfer(Base):
    __tablename__ = "transfers"
    id = Column(Integer, primary_key=True)
    amount = Column(Integer, nullable=False)
    status = Column(String, nullable=False)


class Tag(Base):
    __tablename__ = "tags"
    id = Column(Integer, primary_key=True)
    name = Column(String, unique=True, nullable=False)


class Webhook(Base):
    __tablename__ = "webhooks"
    id = Column(Integer, primary_key=True)
    url = Column(String, nullable=False)


class Season(Base):
    __tablename__ = "seasons"
    id = Column(Integer, primary_key=True)
    status = Column(String, nullable=False)


Base.metadata.create_all(engine)


class TagIn(BaseModel):
    name: str


class WebhookIn(BaseModel):
    url: str


class RefundIn(BaseModel):
    manager_pin: str


def _get(s, model, key, what):
    row = s.get(model, key)
    if row is None:
        raise HTTPException(status_code=404, detail=f"{what} {key} not found")
    return row


@app.post("/transfers/{transfer_id}/cancel", operation_id="cancel_transfer")
def cancel_transfer(transfer_id: int):
    with SessionLocal() as s:
        t = _get(s, Transfer, transfer_id, "Transfer")
        if t.status != "scheduled":
            raise HTTPException(status_code=409, detail=f"Transfer {t.id} is {t.status}; only scheduled transfers can be canceled")
        t.status = "canceled"
        s.commit()
        return {"id": t.id, "status": t.status}


@app.post("/tags", operation_id="create_tag", status_code=201)
def create_tag(body: TagIn):
    with SessionLocal() as s:
        if s.query(Tag).filter(Tag.name == body.name).first():
            raise HTTPException(status_code=409, detail=f"Tag {body.name!r} already exists")
        tag = Tag(name=body.name)
        s.add(tag)
        s.commit()
        return {"id": tag.id, "name": tag.name}


@app.post("/webhooks", operation_id="create_webhook", status_code=201)
def create_webhook(body: WebhookIn):
    with SessionLocal() as s:
        hook = Webhook(url=body.url)
        s.add(hook)
        s.commit()
        return {"id": hook.id, "url": hook.url}


@app.delete("/webhooks/{webhook_id}", operation_id="delete_webhook")
def delete_webhook(webhook_id: int):
    with SessionLocal() as s:
        s.delete(_get(s, Webhook, webhook_id, "Webhook"))
        s.commit()
        return {"deleted": webhook_id}


@app.post("/seasons/{season_id}/close", operation_id="close_season")
def close_season(season_id: int):
    with SessionLocal() as s:
        season = _get(s, Season, season_id, "Season")
        if season.status != "active":
            raise HTTPException(status_code=422, detail=f"Season {season_id} is {season.status}; only an active season closes")
        season.status = "closed"
        s.commit()
        return {"id": season_id, "status": "closed"}


@app.post("/seasons/{season_id}/start", operation_id="start_season")
def start_season(season_id: int):
    with SessionLocal() as s:
        season = _get(s, Season, season_id, "Season")
        if season.status != "planned":
            raise HTTPException(status_code=422, detail=f"Season {season_id} is {season.status}; only a planned season starts")
        if s.query(Season).filter(Season.status == "active").first():
            raise HTTPException(status_code=409, detail="Another season is active; close it first")
        season.status = "active"
        s.commit()
        return {"id": season_id, "status": "active"}


@app.post("/transfers/{transfer_id}/refund", operation_id="refund_transfer")
def refund_transfer(transfer_id: int, body: RefundIn):
    with SessionLocal() as s:
        _get(s, Transfer, transfer_id, "Transfer")
        if body.manager_pin != "7319":
            raise HTTPException(status_code=403, detail="Wrong manager PIN")
        return {"refunded": transfer_id}
'''

SCHEMA = """
CREATE TABLE transfers (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, status TEXT NOT NULL);
CREATE TABLE tags (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE webhooks (id INTEGER PRIMARY KEY, url TEXT NOT NULL);
CREATE TABLE seasons (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
"""
ROWS = {
    # the only scheduled transfer is the fifth row: the first three by rowid are all in terminal states
    "transfers": [(1, 120, "completed"), (2, 80, "completed"), (3, 50, "failed"), (4, 75, "completed"),
                  (5, 300, "scheduled")],
    "tags": [(1, "urgent"), (2, "billing"), (3, "later")],
    # a planned season starts only once the active one is closed
    "seasons": [(1, "active"), (2, "planned")],
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    db = tmp_path_factory.mktemp("probe_retries") / "initial.db"
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMA)
    for table, rows in ROWS.items():
        conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.commit()
    conn.close()
    result = check_env_code(ENV_CODE, db, probe=True)
    assert result.probe, result.error
    return result.probe


def test_a_tool_that_acts_on_one_state_meets_a_row_in_it(probed):
    t = probed["cancel_transfer"]
    assert t["status"] == "ok", t
    assert t["accepted"]["args"] == {"transfer_id": 5}


def test_a_create_with_a_unique_name_gets_a_fresh_one(probed):
    t = probed["create_tag"]
    assert t["status"] == "ok", t
    assert t["accepted"]["args"]["name"] not in {name for _, name in ROWS["tags"]}
    assert "fresh" in t["accepted"]["input"]


def test_an_id_only_a_create_makes_is_used_on_the_same_instance(probed):
    t = probed["delete_webhook"]
    assert t["status"] == "ok", t
    assert t["accepted"]["input"] == "valid:after:create_webhook"
    assert "webhooks" in t["writes"]


def test_a_state_another_write_tool_sets_first(probed):
    t = probed["start_season"]
    assert t["status"] == "ok", t
    assert t["accepted"] == {"input": "valid:after:close_season", "args": {"season_id": 2}}


def test_client_errors_only_names_what_was_tried_and_the_answers(probed):
    t = probed["refund_transfer"]
    assert t["status"] == "client_error_only"
    assert t["accepted"] is None
    assert t["errors"] and all(e["status_code"] == 403 for e in t["errors"])
    assert "Wrong manager PIN" in t["note"] and "valid inputs" in t["note"]


def test_a_record_beside_empty_lists_is_an_answer():
    """`get_issue_by_key` answering an issue whose labels and links are empty is no `suspicious_empty` read."""
    from awm_rl.quality.probe import _only_empty_lists

    assert _only_empty_lists('{"issues": [], "total": 0}')
    assert not _only_empty_lists('{"id": 1, "key": "WEB-129", "labels": [], "links": []}')
    assert not _only_empty_lists('{"issues": [{"issue_id": 4, "labels": []}]}')
