"""`PageDelta`: a parked instance's database as the pages where it differs from the template, rebuilt byte for
byte, on real SQLite images (writes, growth past the template, a database shrunk below it)."""

from __future__ import annotations

import sqlite3

from awm_rl.runtime.db import PageDelta, build_template, open_instance_db


def _template(tmp_path) -> bytes:
    path = tmp_path / "initial.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT, balance REAL);"
                       "CREATE INDEX accounts_owner ON accounts(owner);"
                       "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT);")
    conn.executemany("INSERT INTO accounts (owner, balance) VALUES (?, ?)",
                     [(f"owner-{i}", i * 10.0) for i in range(2000)])
    conn.commit()
    conn.close()
    return build_template(path)


def _rows(image: bytes) -> list:
    conn = open_instance_db(image)
    try:
        return conn.execute("SELECT * FROM accounts ORDER BY id").fetchall() + \
            conn.execute("SELECT * FROM notes ORDER BY id").fetchall()
    finally:
        conn.really_close()


def test_a_small_write_keeps_a_few_pages_and_rebuilds_exactly(tmp_path):
    template = _template(tmp_path)
    conn = open_instance_db(template)
    conn.execute("UPDATE accounts SET balance = balance - 500 WHERE id = 7")
    conn.execute("INSERT INTO notes (text) VALUES ('moved 500')")
    conn.commit()
    image = conn.serialize()
    conn.really_close()
    delta = PageDelta(template, image)
    assert delta.apply(template) == image
    assert 0 < delta.nbytes <= 8 * 512 < len(template) // 10, (delta.nbytes, len(template))
    assert _rows(delta.apply(template)) == _rows(image) != _rows(template)


def test_growth_and_shrinking_past_the_template(tmp_path):
    template = _template(tmp_path)
    conn = open_instance_db(template)
    conn.executemany("INSERT INTO notes (text) VALUES (?)", [("x" * 300,) for _ in range(500)])
    conn.commit()
    grown = conn.serialize()
    assert len(grown) > len(template)
    assert PageDelta(template, grown).apply(template) == grown
    conn.execute("DELETE FROM accounts")
    conn.execute("DELETE FROM notes")
    conn.commit()
    conn.execute("VACUUM")
    shrunk = conn.serialize()
    conn.really_close()
    assert len(shrunk) < len(template)
    delta = PageDelta(template, shrunk)
    assert delta.apply(template) == shrunk and _rows(delta.apply(template)) == []


def test_an_unchanged_image_keeps_nothing(tmp_path):
    template = _template(tmp_path)
    delta = PageDelta(template, template)
    assert delta.pages == () and delta.nbytes == 0 and delta.apply(template) == template
