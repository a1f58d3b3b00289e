"""The run launcher section of dagster.cluster.yaml, loaded as Dagster loads it (no cluster needed): the Ray
launcher with its address from the environment and the project's variables forwarded; an instance without it
is refused by `awm synth --cluster` with an error naming the instance."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import PROJECT_ROOT


def _instance_with_launcher(dagster_home, monkeypatch):
    import dagster as dg

    config = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text(encoding="utf-8"))
    config["run_launcher"] = yaml.safe_load((PROJECT_ROOT / "dagster.cluster.yaml").read_text(encoding="utf-8"))["run_launcher"]
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return dg.DagsterInstance.from_config(str(dagster_home))


def test_cluster_yaml_launches_runs_on_ray_with_the_forwarded_variables(tmp_path, monkeypatch):
    from awm_assets.cluster_runs import check_launcher, launches_on_ray
    from awm_assets.defs.shared.run_launcher import AwmRayRunLauncher

    monkeypatch.setenv("AWM_RAY_JOBS_ADDRESS", "http://head.example:8265")
    monkeypatch.setenv("AWM_LLM_MODEL", "replay")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with _instance_with_launcher(tmp_path / "dagster_home", monkeypatch) as instance:
        launcher = instance.run_launcher
        assert isinstance(launcher, AwmRayRunLauncher) and launches_on_ray(instance)
        check_launcher(instance)
        assert launcher.address == "http://head.example:8265"
        assert launcher.resources == {"awm_runs": 1.0} and launcher.num_cpus == 1
        # Read at launch from the launching process: a variable set later travels too.
        assert {"AWM_RAY_JOBS_ADDRESS", "AWM_LLM_MODEL", "DAGSTER_HOME", "HF_HUB_OFFLINE"} <= set(launcher.env_vars)
        monkeypatch.setenv("AWM_MAX_RETRIES", "2")
        assert "AWM_MAX_RETRIES" in launcher.env_vars


def test_cluster_mode_refuses_an_instance_without_the_ray_launcher(tmp_path, monkeypatch):
    import dagster as dg

    from awm_assets.cluster_runs import ClusterRunError, check_launcher, launches_on_ray

    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text(encoding="utf-8"))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        assert not launches_on_ray(instance)
        with pytest.raises(ClusterRunError, match=f"{dagster_home}.*DefaultRunLauncher.*dagster.cluster.yaml"):
            check_launcher(instance)


def test_a_run_command_starts_with_the_code_locations_interpreter():
    """The daemon's code server reports the bare `dagster` entry point, which a Ray node's job may not have on
    its PATH: the command uses the origin's interpreter instead, and its JSON argument survives the shell."""
    import shlex
    import sys

    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._grpc.types import ExecuteRunArgs
    from dagster._serdes import deserialize_value

    from awm_assets.defs.shared.run_launcher import run_command

    for entry_point, expected in ((["dagster"], [sys.executable, "-m", "dagster"]),
                                  (["/opt/venv/bin/python", "-m", "dagster"], ["/opt/venv/bin/python", "-m", "dagster"])):
        origin = JobPythonOrigin("synthesize_scenario", RepositoryPythonOrigin(
            executable_path=sys.executable, code_pointer=ModuleCodePointer("awm_assets.definitions", "defs", None),
            entry_point=entry_point))
        args = ExecuteRunArgs(job_origin=origin, run_id="run-with-'quote'", instance_ref=None)
        argv = shlex.split(run_command(args))
        assert argv[:3] == expected and argv[3:5] == ["api", "execute_run"], argv
        assert deserialize_value(argv[5], ExecuteRunArgs).run_id == "run-with-'quote'"
