"""Decoy candidates (awm_rl.training.decoys): one argument value changed, in a fixed order of plausibility.

Pure functions; that each kept decoy fails the task's verifier through the real loop and pool is checked by the
bench's plumbing test (tests/training/test_learn_bench.py).
"""

from __future__ import annotations

import json

from awm_rl.training.decoys import alternative_values, candidate_changes


def test_alternatives_enum_then_results_then_neighbours_same_type_only():
    results = [json.dumps({"items": [{"id": 7, "album_id": 3, "title": "x"}, {"id": 1}, {"id": "9"}], "total": 2})]
    assert alternative_values("track_id", 1, {}, results) == [7, 2, 3]  # `id`s shown (not 1, not "9"), then 1+1, 1+2
    assert alternative_values("state", "open", {"enum": ["open", "closed", "all"]}, []) == ["closed", "all"]
    assert alternative_values("is_public", False, {}, []) == [True]
    assert alternative_values("title", "a", {}, results) == ["x"]  # a string: only values shown under its key
    assert alternative_values("name", "a", {}, results) == []
    assert alternative_values("track_ids", [1, 2], {}, results) == []  # lists are left alone
    assert alternative_values("party_size", 4, {}, ["not json"]) == [5, 6, 3]


def test_candidates_change_one_value_of_the_last_call_first():
    calls = [{"tool": "search_tracks", "arguments": {"q": "Golden Hour"}},
             {"tool": "save_track", "arguments": {"track_id": 1}}]
    tools = [{"name": "search_tracks", "input_schema": {"properties": {"q": {"type": "string"}}}},
             {"name": "save_track", "input_schema": {"properties": {"track_id": {"type": "integer"}}}}]
    results = [json.dumps({"tracks": [{"id": 1, "q": "Golden Hour"}, {"id": 4}]}), "{}"]
    found = list(candidate_changes(calls, tools, results))
    assert [c for _, c in found] == [
        {"call": 1, "tool": "save_track", "argument": "track_id", "reference": 1, "decoy": 4},
        {"call": 1, "tool": "save_track", "argument": "track_id", "reference": 1, "decoy": 2},
        {"call": 1, "tool": "save_track", "argument": "track_id", "reference": 1, "decoy": 3},
    ]  # the search call has no earlier result to draw its `q` from, and strings get no neighbours
    changed, _ = found[0]
    assert changed[0] == calls[0] and changed[1]["arguments"] == {"track_id": 4}
    assert calls[1]["arguments"] == {"track_id": 1}  # the reference is not modified
