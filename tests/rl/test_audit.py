"""The verifier audit over the real AWM corpus and the demo batch, and the do-nothing agent."""

from __future__ import annotations

import json
import shutil

import pytest

from awm_rl.agent import Episode
from awm_rl.reward import Judge, audit_verifiers, excluded_tasks, load_tasks, score_episode, summarize
from awm_rl.reward.audit import AUDIT_FILE, write_audit
from awm_rl.reward.commands import audit_main
from tests.conftest import GENERATED_SCENARIOS


@pytest.fixture(scope="module")
def corpus_audit(corpus_store):
    return audit_verifiers(corpus_store)


def test_corpus_audit_finds_the_vacuous_verifier(corpus_audit):
    by_key = {(e.scenario, e.task_idx, e.mode): e for e in corpus_audit}
    vacuous = [e for e in corpus_audit if e.verdict == "vacuous"]
    # fortnite_item_shop task 0 accepts "no offers" because, on its own seed data, no offer is current.
    assert [(e.scenario, e.task_idx) for e in vacuous] == [("fortnite_item_shop", 0)]
    assert "final_answer=" in vacuous[0].detail
    # Every other generated/ verifier runs and answers "others" for the do-nothing agent.
    generated = [e for e in corpus_audit if e.scenario in GENERATED_SCENARIOS]
    assert len(generated) == 50
    assert sum(e.verdict == "ok" for e in generated) == 49, [(e.scenario, e.task_idx, e.verdict, e.detail[:500])
                                                             for e in generated if e.verdict != "ok"]
    assert all(e.mode == "code" for e in generated)
    # awm1k-sample: e_commerce_33 has an sql-mode and code-mode verifiers; content_platform_1 none.
    assert by_key[("e_commerce_33", 0, "sql")].verdict == "ok"
    assert "top_candidate_under_200_initial" in by_key[("e_commerce_33", 0, "sql")].detail
    assert by_key[("e_commerce_33", 1, "code")].verdict == "ok"
    assert by_key[("content_platform_1", 0, "none")].verdict == "missing"
    assert not any(e.verdict == "crash" for e in corpus_audit)


def test_excluded_tasks_and_summary(corpus_audit):
    excluded = excluded_tasks(corpus_audit)
    assert excluded["fortnite_item_shop"] == [0]
    assert excluded["content_platform_1"] == list(range(10))
    assert "rover" not in excluded
    summary = summarize(corpus_audit)
    assert summary["vacuous"] == 1 and summary["crash"] == 0
    assert summary["verifiers"] == len(corpus_audit)


def test_audit_cli_json(corpus_store, capsys):
    assert audit_main(["verifiers", "--store", str(corpus_store.root), "--scenario", "fortnite_item_shop", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 10
    assert set(rows[0]) == {"scenario", "task_idx", "mode", "verdict", "detail"}
    assert {r["verdict"] for r in rows} == {"ok", "vacuous"}
    assert audit_main(["verifiers", "--store", str(corpus_store.root), "--scenario", "nope"]) == 2
    assert "unknown scenario" in capsys.readouterr().err


def test_audit_written_to_store(corpus_store, tmp_path):
    entries = audit_verifiers(corpus_store, ["rover"])
    [path] = write_audit(corpus_store, entries)
    assert path.name == AUDIT_FILE
    doc = json.loads(path.read_text())
    assert doc["summary"]["ok"] == 10 and len(doc["entries"]) == 10


def _do_nothing_episode(store, scenario, record, tmp_path, answer) -> Episode:
    """The state an agent that changed nothing leaves: both databases equal the initial one."""
    folder = tmp_path / f"{scenario}.{record.task_idx}"
    folder.mkdir(parents=True)
    initial, final = folder / "initial.db", folder / "final.db"
    shutil.copyfile(store.path(scenario, "initial.db"), initial)
    shutil.copyfile(store.path(scenario, "initial.db"), final)
    return Episode(scenario=scenario, task_idx=record.task_idx, task=record.task, policy="do-nothing", window=10,
                   max_turns=20, termination="final_answer", final_answer=answer,
                   initial_db=str(initial), final_db=str(final))


@pytest.mark.parametrize("store_name", ["corpus_store", "demo_store"])
def test_do_nothing_agent_is_never_completed_where_the_audit_passes(store_name, request, tmp_path):
    store = request.getfixturevalue(store_name)
    # The corpus's audit is the module's (the same call, already made); the demo store's is made here.
    entries = request.getfixturevalue("corpus_audit") if store_name == "corpus_store" else audit_verifiers(store)
    passing = {(e.scenario, e.task_idx) for e in entries if e.mode == "code" and e.verdict == "ok"}
    assert len(passing) >= (49 if store_name == "corpus_store" else 30)
    items = []
    for scenario in sorted({s for s, _ in passing}):
        for record in load_tasks(store, scenario):
            if (scenario, record.task_idx) in passing:
                for answer in (None, "I completed the task as requested."):
                    items.append((_do_nothing_episode(store, scenario, record, tmp_path / str(len(items)), answer), record))
    verdicts = Judge("code").judge_many(items)
    assert len(verdicts) == len(items)
    for (episode, _), verdict in zip(items, verdicts, strict=True):
        assert verdict.classification == "Agent Error", (episode.scenario, episode.task_idx, verdict)
        assert score_episode(episode, verdict).reward == 0.0
