"""Shared fixtures: the real AWM corpus imported into a temporary store, and a safe environment."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = (PROJECT_ROOT.parent / "shared" / "awm-corpus").resolve()
GENERATED_DIR = CORPUS_DIR / "generated"
AWM1K_DIR = CORPUS_DIR / "awm1k-sample"
GENERATED_SCENARIOS = ["doordash_drive_delivery_tracking", "etsy_digital_downloads", "fortnite_item_shop",
                       "gofundme", "rover"]
# A strong model's answers as the agent (recordings/) on two AgentWorldModel-1K environments (awm1k/).
REAL_AGENT_DIR = (PROJECT_ROOT.parent / "shared" / "real-model-agent").resolve()
REAL_AGENT_SCENARIOS = ["banking_fintech_2", "crowdfunding_platform_1"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray's single-node mode: the local cluster binds to loopback, so test traffic never leaves `lo`.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Ray runs its workers at nice 15 by default: beside a second pytest worker (make test runs two) the actors and
# the sandboxed environment workers under them would get the CPU last and meet their call timeouts.
os.environ.setdefault("RAY_worker_niceness", "0")

# make test's two pytest workers share 2 cores: torch in a trainer or policy takes one thread (AWM_TORCH_THREADS),
# as every core each, their idle threads spin and took twice the CPU for the same training (measured: a trainer
# actor 106 s of CPU alone, 200 s beside the other worker).
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("AWM_TORCH_THREADS", "1")

# One embedding cache for the whole run (both xdist workers, every store and subprocess), as a user's runs share
# theirs: the first scenario generation loads the model, the others find their texts (the cache is tested in
# tests/test_definitions.py). Without it each `awm synth`, `dagster dev` or cluster run paid the model's load.
# Set in the controller, which loads this file first; the workers inherit it.
EMBEDDING_CACHE_DIR = Path(tempfile.gettempdir()) / f"awm-tests-{os.getpid()}"
os.environ.setdefault("AWM_EMBEDDING_CACHE", str(EMBEDDING_CACHE_DIR / "embedding_cache.sqlite"))


def pytest_sessionfinish(session):
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller (or a run without xdist), after every worker
        shutil.rmtree(EMBEDDING_CACHE_DIR, ignore_errors=True)


# Tests that wait on daemon-launched runs: sensors look every 4 s (30 s by default) and queued runs start
# within a second (Dagster's default checks every 5 s); a serial suite otherwise sits idle between ticks.
TEST_SENSOR_INTERVAL_S = "4"


# Parallel runs: `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadscope`, the Makefile). A
# work unit is one test file (its module fixtures are built once), except the files under PROCESS_TREES: they start a
# Dagster daemon, `dagster dev`, a multi-node Ray cluster or a whole `awm synth`, process trees whose timing must not
# depend on another one growing beside them, so they form one unit and run one after another. Units holding a test
# marked `slow` are handed out first, so no long unit starts last. (Paths, not xdist_group markers: xdist 3.8 cannot
# rename a test under pytest 9, so its loadgroup ignores the marker.) Every worker has its own AWM_HOME, DAGSTER_HOME,
# temp folders, Ray cluster and session fixtures: a test needing anything fixed (a port, a path outside tmp_path)
# must take it per worker.
PROCESS_TREES = ("tests/cluster/", "tests/faults/test_daemon_kill.py", "tests/llm_conformance/test_synth_e2e.py",
                 "tests/test_e2e_dagster_dev.py")


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or "process_trees" for the files under PROCESS_TREES."""
    path = nodeid.split("::", 1)[0]
    return "process_trees" if path.startswith(PROCESS_TREES) else path


def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope with work_unit as the scope, in the order pytest_collection_modifyitems chose."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return WorkUnitScheduling(config, log)


# The longest units outside the chain, in seconds (rounded, from make test runs on 2 cores: CI simulations of
# 2026-12-02, each under the other worker's load): handed out longest first, so that none of them starts last and
# leaves the other worker idle at the end (in alphabetical order the 220 s training run came last). Only the order;
# a unit missing here is merely handed out later. (An order by later, shorter figures measured no better: 16:47
# against 15:43, its demo synthesis meeting dagster dev's.)
UNIT_SECONDS = {
    "tests/training/test_train_e2e.py": 220, "tests/quality/test_repair.py": 80, "tests/test_evolve.py": 75,
    "tests/training/test_training_asset.py": 75, "tests/benchmarks/test_scale.py": 65,
    "tests/rl/test_judge_and_evaluation.py": 60, "tests/test_synthesis.py": 60, "tests/faults/test_kill_ray.py": 55,
    "tests/runtime/test_bench_failures.py": 50, "tests/training/test_data_parallel.py": 50,
    "tests/runtime/test_bench.py": 45, "tests/rl/test_audit.py": 45, "tests/test_real_model_replay.py": 40,
    "tests/benchmarks/test_rollout.py": 45,
    "tests/bfcl/test_bfcl_harness.py": 40, "tests/quality/test_quality_gate.py": 35,
    "tests/integrations/test_trl_env.py": 40,
    "tests/quality/test_agent_proofs.py": 60, "tests/quality/test_repair_keeps_best.py": 50,
    "tests/integrations/test_openenv_server.py": 45, "tests/rl/test_eval_catalog.py": 45,
    "tests/integrations/test_verifiers_env.py": 55,
}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """In an xdist worker: the process_trees unit first, then the units of UNIT_SECONDS longest first, then the
    other units holding a slow test, then the rest (collection order within each)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    slow = {work_unit(item.nodeid) for item in items if item.get_closest_marker("slow")}

    def order(item) -> tuple[bool, int, bool]:
        unit = work_unit(item.nodeid)
        return unit != "process_trees", -UNIT_SECONDS.get(unit, 0), unit not in slow

    items.sort(key=order)


def kill_process_groups(procs) -> None:
    """SIGKILL the whole process group of each of `procs` (started with start_new_session) and reap them: a test's
    daemons or nodes leave no child behind, whatever the test did to them."""
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


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
    # `make test` exports both as the project's own folders; each pytest process (an xdist worker too) gets its own.
    old = {name: os.environ.get(name) for name in ("AWM_HOME", "DAGSTER_HOME")}
    os.environ["AWM_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(tmp_path_factory.mktemp("dagster_home"))
    yield home
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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


def run_shared_dir(tmp_path_factory) -> Path | None:
    """A folder every xdist worker of this run sees (the parent of their base temp folders, new per run); None
    outside xdist."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    shared = tmp_path_factory.getbasetemp().parent / "shared"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def demo_pristine(request, tmp_path_factory) -> Path:
    """The demo store's files as synthesized (demo_synthesis' `pristine`; read it, copy it before changing it), made
    once per run: the first xdist worker that needs them synthesizes the batch, the other copies the result instead
    of synthesizing it again (the same files: replay answers, the same stage code)."""
    import shutil

    from filelock import FileLock

    shared = run_shared_dir(tmp_path_factory)
    if shared is None:
        return request.getfixturevalue("demo_synthesis")["pristine"]
    store, done = shared / "demo_store_pristine", shared / "demo_store_pristine.done"
    with FileLock(str(shared / "demo_store_pristine.lock")):
        if not done.is_file():
            shutil.rmtree(store, ignore_errors=True)
            shutil.copytree(request.getfixturevalue("demo_synthesis")["pristine"], store)
            done.touch()
    return store


@pytest.fixture(scope="session")
def agent_awm1k(tmp_path_factory) -> Path:
    """The two AgentWorldModel-1K environments of ../shared/real-model-agent imported once per worker, as `awm import`
    does: read it, or take a private `agent_store_copy` before anything writes to it."""
    from awm_resources.interop import import_awm_dir
    from awm_resources.store import ArtifactStore

    if not (REAL_AGENT_DIR / "recordings").is_dir():
        pytest.fail(f"the real model's agent recordings are missing: expected {REAL_AGENT_DIR} (../shared beside the "
                    "project)")
    root = tmp_path_factory.mktemp("agent_awm1k")
    report = import_awm_dir(REAL_AGENT_DIR / "awm1k", ArtifactStore(root))
    assert sorted(report.scenarios) == REAL_AGENT_SCENARIOS, report
    return root


def agent_store_copy(agent_awm1k: Path, target: Path):
    """A private ArtifactStore copy of the `agent_awm1k` import (evaluations, proofs and repairs write to a store)."""
    from awm_resources.store import ArtifactStore

    shutil.copytree(agent_awm1k, target, dirs_exist_ok=True)
    return ArtifactStore(target)


@pytest.fixture(scope="session")
def ray_address() -> str:
    """The session's local Ray cluster, the one in-process tests share (started here if none is yet): a driver
    in a subprocess joins it with RAY_ADDRESS instead of starting a cluster of its own."""
    import ray

    from awm_resources.ray_cluster import init_ray

    init_ray()
    return ray.get_runtime_context().gcs_address
