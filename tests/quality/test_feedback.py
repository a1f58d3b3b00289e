"""Feedback that says why a reference solution did not pass (issue 22, item 3): the rows the agent's
calls changed in the tables the verifier reads, next to the calls and the verifier's own dict."""

from __future__ import annotations

import shutil
import sqlite3

from awm_rl.quality.solutions import changed_rows, solution_feedback, tables_read

VERIFIER = '''
def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    # a LEFT JOIN that repeats rows: the kind of defect the feedback must make visible
    rows = q(final_db_path, "SELECT o.id FROM orders o LEFT JOIN order_items i ON i.order_id = o.id")
    return {"result": "others", "reason": "total mismatch", "total_seen": 3}
'''


def test_feedback_shows_calls_the_verifier_dict_and_changed_rows(tmp_path):
    initial, final = tmp_path / "initial.db", tmp_path / "final.db"
    conn = sqlite3.connect(initial)
    conn.executescript("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT);"
                       "CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
                       "CREATE TABLE audit_log (id INTEGER PRIMARY KEY, note TEXT);"
                       "INSERT INTO orders VALUES (1, 'open'), (2, 'open');"
                       "INSERT INTO order_items VALUES (1, 1, 2);")
    conn.commit()
    conn.close()
    shutil.copyfile(initial, final)
    conn = sqlite3.connect(final)
    conn.executescript("UPDATE orders SET status = 'shipped' WHERE id = 1; DELETE FROM orders WHERE id = 2;"
                       "INSERT INTO order_items VALUES (2, 1, 5); INSERT INTO audit_log VALUES (1, 'x');")
    conn.commit()
    conn.close()
    assert tables_read(VERIFIER, final) == ["order_items", "orders"]
    changes = changed_rows(initial, final, ["order_items", "orders"])
    assert changes["orders"]["changed"] == [{"before": (1, "open"), "after": (1, "shipped")}]
    assert changes["orders"]["removed"] == [(2, "open")] and changes["order_items"]["added"] == [(2, 1, 5)]
    run = {"calls": [{"tool": "ship_order", "arguments": {"order_id": 1}, "status": 200, "text": '{"id": 1}'},
                     {"tool": "add_item", "arguments": {"order_id": 1, "qty": 5}, "status": 200, "text": "x" * 900},
                     {"tool": "list_items", "arguments": {}, "status": 200, "text": "y" * 3000, "text_chars": 7000}],
           "initial_db": str(initial), "final_db": str(final), "final_answer": "Done"}
    text = solution_feedback(run, VERIFIER, "others", {"result": "others", "reason": "total mismatch",
                                                        "total_seen": 3})
    assert 'ship_order({"order_id": 1}) -> HTTP 200: {"id": 1}' in text and "(all answered 2xx)" in text
    assert "x" * 900 in text  # an answer up to 3,000 characters is shown whole (ids and totals are not guessed)
    # a longer one is cut saying how much is left and how to read it
    assert "y" * 3000 + " ...(cut: 4000 of 7000 characters not shown; to read them, call the tool again" in text
    assert '"total_seen": 3' in text and '"shipped"' in text
    assert "audit_log" not in text  # a table the verifier does not read
