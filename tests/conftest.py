"""Shared fixtures: the real AWM corpus imported into a temporary store, and a safe environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = (PROJECT_ROOT.parent / "shared" / "awm-corpus").resolve()
GENERATED_DIR = CORPUS_DIR / "generated"
AWM1K_DIR = CORPUS_DIR / "awm1k-sample"
GENERATED_SCENARIOS = ["doordash_drive_delivery_tracking", "etsy_digital_downloads", "fortnite_item_shop",
                       "gofundme", "rover"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray's single-node mode: the local cluster binds to loopback, so test traffic never leaves `lo`.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Tests that wait on daemon-launched runs: sensors look every 4 s (30 s by default) and queued runs start
# within a second (Dagster's default checks every 5 s); a serial suite otherwise sits idle between ticks.
TEST_SENSOR_INTERVAL_S = "4"


def daemon_dagster_home(dagster_home: Path) -> Path:
    """`dagster_home` holding the project's dagster.yaml with the run queue checked every second."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = (PROJECT_ROOT / "dagster.yaml").read_text(encoding="utf-8")
    (dagster_home / "dagster.yaml").write_text(config + "\nrun_queue:\n  dequeue_interval_seconds: 1\n",
                                               encoding="utf-8")
    return dagster_home


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory):
    """Never let a test write into the project's own .awm_home or .dagster_home."""
    home = tmp_path_factory.mktemp("awm_home")
    old = os.environ.get("AWM_HOME")
    os.environ["AWM_HOME"] = str(home)
    os.environ.setdefault("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster_home")))
    yield home
    if old is None:
        os.environ.pop("AWM_HOME", None)
    else:
        os.environ["AWM_HOME"] = old


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    if not GENERATED_DIR.is_dir():
        pytest.fail(f"the AWM corpus is missing: expected {GENERATED_DIR} (../shared beside the project)")
    return CORPUS_DIR


@pytest.fixture(scope="session")
def corpus_store(corpus_dir, tmp_path_factory):
    """An ArtifactStore holding the 5 `generated/` scenarios and the awm1k-sample partial ones."""
    from awm_resources.interop import import_awm_dir
    from awm_resources.store import ArtifactStore

    store = ArtifactStore(tmp_path_factory.mktemp("corpus_store"))
    for sub in ("generated", "awm1k-sample"):
        report = import_awm_dir(corpus_dir / sub, store)
        assert report.scenarios, f"nothing imported from {sub}"
    return store


@pytest.fixture(scope="session")
def demo_synthesis(tmp_path_factory):
    """The demo seed batch synthesized once per session through the real Dagster assets (replay LLM): generation,
    the six stages per accepted scenario, the catalog. `pristine` is a copy of its store taken right after, for
    tests that need the store as synthesized whatever other tests did to it since."""
    import shutil

    import dagster as dg

    from awm_assets.defs.catalog.catalog_asset import environment_catalog
    from awm_assets.defs.synthesis.stage_assets import build_stage_assets
    from awm_resources.store import ArtifactStore
    from tests.test_synthesis import DEMO_SEEDS, generate, resources

    root = tmp_path_factory.mktemp("demo_store")
    instance = dg.DagsterInstance.ephemeral()
    gen = generate(instance, root, DEMO_SEEDS)
    runs = {key: dg.materialize(build_stage_assets(), instance=instance, partition_key=key, resources=resources(root))
            for key in instance.get_dynamic_partitions("scenarios")}
    catalog = dg.materialize([environment_catalog], instance=instance, resources=resources(root))
    pristine = tmp_path_factory.mktemp("demo_store_pristine")
    shutil.copytree(root, pristine, dirs_exist_ok=True)
    yield {"instance": instance, "store": ArtifactStore(root), "root": root, "gen": gen, "runs": runs,
           "catalog": catalog, "pristine": pristine}
    instance.dispose()


@pytest.fixture(scope="session")
def ray_address() -> str:
    """The session's local Ray cluster, the one in-process tests share (started here if none is yet): a driver
    in a subprocess joins it with RAY_ADDRESS instead of starting a cluster of its own."""
    import ray

    from awm_resources.ray_cluster import init_ray

    init_ray()
    return ray.get_runtime_context().gcs_address
