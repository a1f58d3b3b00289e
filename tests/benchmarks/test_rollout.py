"""`awm bench rollout`, small: 24 concurrent episodes replaying a real model's recorded answers on its two AWM-1K
environments (`../shared/real-model-agent`), through the agent loop, the pool and the sandboxed verifiers.

No timed assertions: speed is what the benchmark reports; the test checks that its figures agree with each other
and with the recordings (every recorded episode completes its task, per that folder's README)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.rollout import main, recorded_scripts, run_benchmark
from tests.conftest import REAL_AGENT_DIR as REAL_AGENT
from tests.conftest import agent_store_copy

EPISODES = 24


@pytest.fixture(scope="module")
def agent_store(agent_awm1k, tmp_path_factory):
    return agent_store_copy(agent_awm1k, tmp_path_factory.mktemp("rollout_bench_store"))


def test_figures_agree_with_the_recordings(agent_store, ray_address, tmp_path):  # ray_address: the session Ray
    plot = tmp_path / "latency.png"
    report = run_benchmark(agent_store.root, episodes=EPISODES, recordings=REAL_AGENT / "recordings", num_hosts=2,
                           plot=plot)
    scripts = recorded_scripts(REAL_AGENT / "recordings", {"banking_fintech_2", "crowdfunding_platform_1"})
    assert len(scripts) == 3 and report["sources"] == {"recorded": 3}  # no reference solution is for these two
    assert report["episodes"] == EPISODES and report["os_isolation"]

    # Every episode ran its script to the end on a freshly reset instance, and its verifier says complete.
    per = {(e["scenario"], e["task_idx"]): e for e in report["per_script"]}
    assert set(per) == set(scripts) and sum(e["episodes"] for e in per.values()) == EPISODES
    assert report["consistent"] and all(e["consistent"] for e in per.values())
    assert report["completed"] == report["expected_completed"] == EPISODES, report["outcomes"]
    assert report["terminations"] == {"final_answer": EPISODES}
    assert report["turns"] == sum(len(scripts[k]) * e["episodes"] for k, e in per.items())
    calls = {k: sum('"call_tool"' in turn for turn in turns) for k, turns in scripts.items()}
    assert report["tool_calls"] == sum(calls[k] * e["episodes"] for k, e in per.items()) > 0
    assert report["verdicts"] == EPISODES and report["verdict_ms_p50"] > 0
    # the in-run baseline replays the same calls without the loop, every one answered as in the episodes
    direct = report["direct_baseline"]
    assert direct["calls"] == report["tool_calls"] and direct["ok"] == report["tool_calls_ok"] > 0
    assert report["rollout_vs_direct_calls_per_s"] > 0
    # CPU accounting covers the driver, the host actors and their workers: more than the driver alone
    assert report["rollout_cpu_s"] > report["rollout_driver_cpu_s"] > 0 and direct["cpu_s"] > 0
    assert math.isclose(report["episodes_per_s_on_2_idle_cores"], 2 * EPISODES / report["rollout_cpu_s"], rel_tol=0.02)
    assert direct["processes"] >= 3 and direct["calls_per_s_on_2_idle_cores"] > 0

    # Rates and per-episode costs are the totals divided out.
    assert math.isclose(report["episodes_per_s"], EPISODES / report["rollout_s"], rel_tol=0.01)
    assert math.isclose(report["turns_per_s"], report["turns"] / report["rollout_s"], rel_tol=0.01)
    assert math.isclose(report["verify_ms_per_episode"], report["verify_s"] * 1000 / EPISODES, rel_tol=0.01)
    assert 0 < report["tool_call_ms_p50"] <= report["tool_call_ms_p99"] <= report["tool_call_ms_max"]
    assert 0 < report["reset_ms_p50"] <= report["reset_ms_p99"]
    assert set(report["cold_start_ms"]) == set(report["scenarios"])

    memory = report["memory"]
    assert memory["hosts_rss_mb"] > 0 and set(memory["scenario_workers_rss_mb"]) == set(report["scenarios"])

    proj = report["projection"]
    turns_per_episode = report["turns"] / EPISODES
    assert math.isclose(proj["generation_s_per_step"], EPISODES * turns_per_episode * proj["tokens_per_turn_measured"]
                        / proj["gen_tokens_per_s_assumed"], rel_tol=0.01)
    assert proj["source"] and 0 < proj["environment_share"] < 1 and proj["tokenizer"]
    assert report["plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_named(agent_store, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["--home", str(agent_store.root), "--recordings", str(missing), "--episodes", "4"]) == 2
    assert f"no folder {missing}" in capsys.readouterr().err
    # a store none of the answers is for: it says what it looked for and what the store serves
    assert main(["--home", str(agent_store.root), "--episodes", "4"]) == 2
    err = capsys.readouterr().err
    assert "nothing to replay" in err and "banking_fintech_2" in err


def test_the_command_is_registered():
    awm = Path(sys.executable).with_name("awm")
    res = subprocess.run([str(awm), "bench", "rollout", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "--episodes" in res.stdout and "--recordings" in res.stdout
