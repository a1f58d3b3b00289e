"""Write coverage sees tables an ORM delete cascade writes, which no handler names."""

from __future__ import annotations

import sqlite3

from awm_rl.quality.coverage import static_writable_tables
from awm_rl.quality.dbfacts import read_facts

CODE = '''
from fastapi import FastAPI
from sqlalchemy import Column, ForeignKey, Integer, String
from sqlalchemy.orm import declarative_base, relationship

Base = declarative_base()
app = FastAPI()


class Album(Base):
    __tablename__ = "albums"
    id = Column(Integer, primary_key=True)
    tracks = relationship("Track", cascade="all, delete-orphan")


class Track(Base):
    __tablename__ = "tracks"
    id = Column(Integer, primary_key=True)
    album_id = Column(Integer, ForeignKey("albums.id"))
    plays = relationship("Play", cascade="all, delete")


class Play(Base):
    __tablename__ = "plays"
    id = Column(Integer, primary_key=True)
    track_id = Column(Integer, ForeignKey("tracks.id"))


class Tag(Base):
    __tablename__ = "tags"
    id = Column(Integer, primary_key=True)
    name = Column(String)


@app.delete("/albums/{album_id}")
def delete_album(album_id: int):
    album = SESSION.get(Album, album_id)
    SESSION.delete(album)


@app.get("/tags")
def list_tags():
    return SESSION.query(Tag).all()
'''


def test_orm_delete_cascades_are_writable(tmp_path):
    db = tmp_path / "x.db"
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE albums (id INTEGER PRIMARY KEY);
        CREATE TABLE tracks (id INTEGER PRIMARY KEY, album_id INTEGER);
        CREATE TABLE plays (id INTEGER PRIMARY KEY, track_id INTEGER);
        CREATE TABLE tags (id INTEGER PRIMARY KEY, name TEXT);
    """)
    conn.close()
    # No foreign-key cascade in the database: only the ORM's relationship cascades reach tracks and plays.
    assert static_writable_tables(CODE, read_facts(db)) == {"albums", "tracks", "plays"}
