"""The code location loads with no secrets set, and the real embedder is the bundled MiniLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg
import pytest

from tests.conftest import PROJECT_ROOT


def test_definitions_validate_without_secrets():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWM_LLM", "OPENAI", "ANTHROPIC"))}
    code = ("import dagster as dg; from awm_assets.definitions import defs; dg.Definitions.validate_loadable(defs); "
            "print(sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    for key in ("scenario_generation", "tasks", "db_schema", "sample_data", "api_spec", "env_code", "verifiers",
                "environment_quality", "environment_catalog"):
        assert f"'{key}'" in out.stdout


def test_stage_assets_share_partitions_pool_and_retry_policy():
    from awm_assets.definitions import defs
    from awm_assets.defs.shared.partitions import scenario_partitions

    graph = defs.resolve_asset_graph()
    for stage in ("tasks", "db_schema", "sample_data", "api_spec", "env_code", "verifiers"):
        node = graph.get(dg.AssetKey(stage))
        assert node.partitions_def == scenario_partitions
        assert node.pools == {"llm_api"}
        assets_def = node.assets_def
        assert assets_def.op.retry_policy.max_retries == int(os.environ.get("AWM_MAX_RETRIES", "5"))
        assert {c.name for c in assets_def.check_specs} == {f"{stage}_valid", f"{stage}_quality"}


def test_in_process_runs_take_the_bound_jobs_and_store():
    """`awm synth`, `awm catalog --refresh` and `awm repair` run the code location's own jobs, resolved with their
    resources (no Dagster warning about unresolved asset jobs), against the store its `store` resource names."""
    import warnings
    from pathlib import Path

    from awm_assets.inprocess import bound_store, named_job

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        jobs = {name: named_job(name) for name in ("generate_scenarios", "synthesize_scenario", "refresh_catalog",
                                                   "repair_environment")}
    for name, job in jobs.items():
        assert {"store", "llm"} <= set(job.resource_defs), name
    assert bound_store().root == Path(os.environ["AWM_HOME"]).resolve()


def test_bundled_embedder_loads_offline_and_separates_domains():
    from awm_resources.embedder import Embedder, bundled_model_path

    assert (bundled_model_path() / "model.safetensors").is_file()
    vecs = Embedder().embed(["An online shop selling shoes and handbags", "An e-commerce store for footwear and bags",
                             "A fitness tracker logging workouts"])
    assert vecs.shape == (3, 384)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.6 and sims[0, 2] < 0.4


SHOP, STORE, GYM = ("An online shop selling shoes and handbags", "An e-commerce store for footwear and bags",
                    "A fitness tracker logging workouts")


class CountingEmbedder:
    """The real embedder, with the texts it was asked for recorded."""

    def __init__(self, inner):
        self.inner, self.name, self.asked = inner, inner.name, []

    @property
    def cache_key(self):
        return self.inner.cache_key

    def embed(self, texts):
        self.asked.append(list(texts))
        return self.inner.embed(texts)


def test_cached_embedder_asks_the_model_only_for_new_texts_and_a_known_batch_never_loads_it(tmp_path):
    from awm_resources.embedder import ApiEmbedder, CachedEmbedder, Embedder

    cache = tmp_path / "embedding_cache.sqlite"
    model = CountingEmbedder(Embedder())
    first = CachedEmbedder(model, cache).embed([SHOP, STORE, SHOP])
    assert model.asked == [[SHOP, STORE]]  # each text once
    assert first.shape == (3, 384) and (first[0] == first[2]).all()
    assert abs(first - model.inner.embed([SHOP, STORE, SHOP])).max() < 1e-6
    again = CachedEmbedder(model, cache).embed([STORE, GYM])
    assert model.asked[1:] == [[GYM]] and (again[0] == first[1]).all()

    # another process with the same file: every text known, so sentence-transformers is never imported
    code = ("import json, sys; from awm_resources.embedder import CachedEmbedder, Embedder; "
            f"v = CachedEmbedder(Embedder(), {str(cache)!r}).embed(json.loads(sys.argv[1])); "
            "print(json.dumps({'loaded': 'sentence_transformers' in sys.modules, 'vecs': v.tolist()}))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps([GYM, SHOP])], cwd=PROJECT_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["loaded"] is False
    assert report["vecs"] == [again[1].tolist(), first[0].tolist()]

    # another model is another key: an API model's vectors never come from the local model's rows
    api = CachedEmbedder(ApiEmbedder("openai/text-embedding-3-large", timeout_s=5), cache)
    assert api.inner.cache_key != model.cache_key
    with pytest.raises(RuntimeError, match="text-embedding-3-large"):  # no key, no network: asked, not cached
        api.embed([SHOP])

    # a cache file that is not SQLite: an error naming it and the setting, and the file left as it was
    bad = tmp_path / "notes.txt"
    bad.write_text("my notes")
    with pytest.raises(RuntimeError, match=r"embedding cache .*notes.txt \(AWM_EMBEDDING_CACHE\) cannot be used"):
        CachedEmbedder(model, bad).embed([SHOP])
    assert bad.read_text() == "my notes"


def test_catalog_refreshes_declaratively_over_partially_synthesized_scenarios():
    """One scenario complete, another with no stage at all (still synthesizing, given up or imported
    partially): eager() would never fire over AllPartitionMapping; catalog_refresh_condition does, once."""
    from awm_assets.definitions import defs
    from awm_resources.store import PIPELINE_STAGES

    sensor = defs.resolve_sensor_def("catalog_automation")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert not any(s.name == "catalog_refresh_sensor" for s in defs.sensors)
    targets = {"environment_quality", "environment_catalog", "synthesis_statistics"}
    graph = defs.resolve_asset_graph()
    for key in targets:
        assert graph.get(dg.AssetKey(key)).automation_condition.get_label() == "catalog_refresh"
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("scenarios", ["done", "pending"])
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert first.total_requested == 0  # nothing updated yet
        for stage in PIPELINE_STAGES:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=stage, partition="done"))
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        requested = {k.to_user_string() for k in map(dg.AssetKey, targets) if tick.get_num_requested(k)}
        assert requested == targets
        again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        assert again.total_requested == 0  # handled: requested once per update, not on every tick


@pytest.mark.slow
def test_executor_selected_by_configuration():
    """Local by default (synthesize_scenario in process, as before); AWM_EXECUTOR=ray puts every job's steps
    on dagster-ray's executor with the store and instance locations forwarded to the steps."""
    code = ("import json; from awm_assets.definitions import defs; from awm_assets.defs.shared.executors import ray_executor_config; "
            "print(json.dumps({j: defs.resolve_job_def(j).executor_def.name for j in "
            "['generate_scenarios', 'synthesize_scenario', 'refresh_catalog']} | {'cfg': ray_executor_config(), "
            "'default': defs.resolve_implicit_global_asset_job_def().executor_def.name}))")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWM_RAY")}
    local = subprocess.run([sys.executable, "-c", code], env={**base, "AWM_EXECUTOR": "local"}, cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=180)
    assert local.returncode == 0, local.stderr
    jobs = __import__("json").loads(local.stdout.strip().splitlines()[-1])
    assert jobs["synthesize_scenario"] == "in_process" and jobs["refresh_catalog"] == jobs["generate_scenarios"] == "in_process"
    assert jobs["default"] == "multiprocess_forkserver"  # automation and UI asset runs: steps forked, not spawned
    env = {**base, "AWM_EXECUTOR": "ray", "AWM_HOME": "/shared/awm", "DAGSTER_HOME": "/shared/dagster",
           "AWM_RAY_JOBS_ADDRESS": "http://head:8265", "AWM_RAY_STEP_RESOURCES": '{"cpu_worker": 1}'}
    ray = subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                         timeout=180)
    assert ray.returncode == 0, ray.stderr
    jobs = __import__("json").loads(ray.stdout.strip().splitlines()[-1])
    cfg = jobs.pop("cfg")["ray"]
    assert set(jobs.values()) == {"ray_cluster"}
    assert cfg["address"] == "http://head:8265" and cfg["resources"] == {"cpu_worker": 1.0} and cfg["num_cpus"] == 1
    assert {"AWM_HOME", "DAGSTER_HOME"} <= set(cfg["env_vars"])
    bad = subprocess.run([sys.executable, "-c", "from awm_assets.defs.shared.executors import executor_mode; executor_mode()"],
                         env={**base, "AWM_EXECUTOR": "k8s"}, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "AWM_EXECUTOR" in bad.stderr


def test_numeric_settings_from_the_environment(monkeypatch):
    """AWM_* numbers: the default when unset, the value when set, and a clear error naming a bad one."""
    import pytest

    from awm_assets.defs.shared.resources import max_retries, sensor_interval_s
    from awm_resources.settings import SettingsError

    monkeypatch.delenv("AWM_MAX_RETRIES", raising=False)
    assert max_retries() == 5
    monkeypatch.setenv("AWM_MAX_RETRIES", "2")
    assert max_retries() == 2
    monkeypatch.setenv("AWM_SENSOR_INTERVAL_S", "thirty")
    with pytest.raises(SettingsError, match="AWM_SENSOR_INTERVAL_S must be an integer, got 'thirty'"):
        sensor_interval_s()
