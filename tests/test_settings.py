"""The one settings object: names, per-stage overrides, errors, the judge, Ray forwarding, the generated docs."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from awm_resources import settings as S
from awm_resources.llm import judge_client

ROOT = Path(__file__).resolve().parents[1]


def _synthesis_stage_names() -> set[str]:
    """Stage names of awm_assets/synthesis without importing it: each stage class's `name` and each
    `CallTag(stage="...")` literal."""
    names = set()
    for path in (ROOT / "awm_assets" / "synthesis").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Constant, ast.Tuple)):
                        target, value = stmt.targets[0], stmt.value
                        pairs = (zip(target.elts, value.elts, strict=True) if isinstance(target, ast.Tuple)
                                 and isinstance(value, ast.Tuple) else [(target, value)])
                        names |= {v.value for t, v in pairs if isinstance(t, ast.Name) and t.id == "name"
                                  and isinstance(v, ast.Constant)}
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "CallTag":
                names |= {k.value.value for k in node.keywords if k.arg == "stage" and isinstance(k.value, ast.Constant)}
    return names


def test_llm_stages_are_the_synthesis_stages():
    assert set(S.LLM_STAGES) == _synthesis_stage_names()


def test_every_field_at_the_top_level_and_per_stage():
    s = S.load_settings({"AWM_LLM_TEMPERATURE": "0.2", "AWM_LLM_MODEL": "openai/gpt-5",
                         "AWM_LLM_TEMPERATURE_TASKS": "0.9", "AWM_LLM_TIMEOUT_S_ENV_CODE": "60",
                         "AWM_LLM_API_KEY_CLASSIFY": "k2", "AWM_HOME": "", "AWM_SCRATCH_MB": "32",
                         "AWM_SCRATCH_MB_CHECK": "256", "AWM_SANDBOX": "off"})
    assert (s.llm.model, s.llm.temperature, s.paths.home) == ("openai/gpt-5", 0.2, None)  # empty = unset
    assert s.llm.stage_overrides() == {"tasks": {"temperature": 0.9}, "env_code": {"timeout_s": 60.0},
                                       "classify": {"api_key": "k2"}}
    assert (s.isolation.scratch("host"), s.isolation.scratch("check"), s.isolation.sandbox) == (32, 256, False)
    assert len(S.variables()) == len(set(S.variables()))  # no variable names two settings


@pytest.mark.parametrize("environ, message", [
    ({"AWM_LLM_MODEL_ENVCODE": "x"}, "unknown setting AWM_LLM_MODEL_ENVCODE (did you mean AWM_LLM_MODEL_ENV_CODE?)"),
    ({"AWM_MAX_ANSWER_BYTES": "1MB"}, "AWM_MAX_ANSWER_BYTES must be an integer, got '1MB'"),
    ({"AWM_WORKER_FDS": "0"}, "AWM_WORKER_FDS must be a positive integer, got 0"),
    ({"AWM_LLM_MAX_TOKENS_TASKS": "lots"}, "AWM_LLM_MAX_TOKENS_TASKS must be an integer, got 'lots'"),
    ({"AWM_EXECUTOR": "k8s"}, "AWM_EXECUTOR must be 'local' or 'ray', got 'k8s'"),
    ({"AWM_RAY_STEP_RESOURCES": "[1]"}, "AWM_RAY_STEP_RESOURCES='[1]': must be a JSON object"),
])
def test_a_bad_variable_is_an_error_naming_it(environ, message):
    with pytest.raises(S.SettingsError) as info:
        S.load_settings(environ)
    assert message in str(info.value)


def test_internal_signals_are_not_settings():
    assert S.load_settings({"AWM_SECCOMP": "1"}).isolation.sandbox_seccomp is True
    assert "AWM_SECCOMP" not in S.ray_forwarded_env({"AWM_SECCOMP": "1", "AWM_HOME": "/h"})


def test_one_judge_config():
    judge = S.load_settings({"AWM_JUDGE_MODEL": "openai/gpt-5-mini", "AWM_JUDGE_API_KEY": "jk",
                             "AWM_LLM_MODEL": "openai/gpt-5", "AWM_LLM_API_KEY": "lk"})
    for fallback in (False, True):  # a configured judge wins over the synthesis LLM
        cfg = S.judge_llm_config(judge, fallback_to_synthesis=fallback)
        assert (cfg.model, cfg.api_key, cfg.env) == ("openai/gpt-5-mini", "jk",
                                                     {"model": "AWM_JUDGE_MODEL", "api_key": "AWM_JUDGE_API_KEY"})
    synth_only = S.load_settings({"AWM_LLM_MODEL": "openai/gpt-5", "AWM_LLM_API_KEY": "lk"})
    assert S.judge_llm_config(synth_only).model is None  # no fallback: the client replays
    cfg = S.judge_llm_config(synth_only, fallback_to_synthesis=True)
    assert (cfg.model, cfg.api_key) == ("openai/gpt-5", "lk")
    assert S.judge_llm_config(S.load_settings({}), fallback_to_synthesis=True).model is None
    assert judge_client(S.judge_llm_config(synth_only, model="replay")).is_replay


def test_ray_forwarding_is_one_list():
    env = {"AWM_HOME": "/h", "AWM_RAY_STEP_ENV": "MY_VAR, OTHER", "MY_VAR": "1", "OPENAI_API_KEY": "k",
           "TRL_EXPERIMENTAL_SILENCE": "1", "PATH": "/bin"}
    assert list(S.ray_forwarded_env(env)) == ["AWM_HOME", "AWM_RAY_STEP_ENV", "MY_VAR", "OPENAI_API_KEY",
                                              "TRL_EXPERIMENTAL_SILENCE"]


def test_configuration_doc_is_generated_from_the_fields():
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "awm_resources.settings", "--markdown"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == doc, "stale: python -m awm_resources.settings --markdown > docs/configuration.md"
    assert all(f"`{name}`" in doc for name, path in S.variables().items() if path[1] != "stages")


def test_every_variable_the_code_reads_is_a_setting():
    """Each AWM_* name in the code is a setting, a per-stage one, an internal name or a family prefix."""
    found = subprocess.run(["grep", "-rhoE", r"\bAWM_[A-Z0-9_]*[A-Z0-9]\b", "awm_assets", "awm_resources", "awm_rl",
                            "benchmarks", "tests", "Makefile", "scripts", "--include=*.py", "--include=Makefile",
                            "--include=*.sh"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    prefixes = {"AWM_LLM", "AWM_RAY", "AWM_JUDGE", "AWM_EMBEDDING", "AWM_SCRATCH_MB", "AWM_LLM_MODEL_ENVCODE"}
    unknown = sorted(set(found) - set(S.variables()) - set(S.INTERNAL_NAMES) - prefixes)
    assert not unknown, f"AWM_* names read but not settings: {unknown}"


def test_dagster_resources_and_load_time_values_come_from_the_settings():
    """AWM_LLM_TEMPERATURE reaches the LLM resource (it was ignored), per-stage fields too; a value a variable
    set is passed as its EnvVar (the UI shows the variable); the settings read at load are listed."""
    import dagster as dg

    from awm_assets.defs.shared.resources import judge_resource, llm_resource

    s = S.load_settings({"AWM_LLM_MODEL": "openai/gpt-5", "AWM_LLM_TEMPERATURE": "0.2", "AWM_LLM_MAX_TOKENS": "9",
                         "AWM_LLM_TEMPERATURE_CLASSIFY": "0.1", "AWM_LLM_MODEL_ENV_CODE": "openai/gpt-5-mini",
                         "AWM_JUDGE_MODEL": "openai/gpt-5-nano", "AWM_EXECUTOR": "ray"})
    llm = llm_resource(s)
    assert llm.temperature == 0.2 and llm.stages["classify"].temperature == 0.1
    assert isinstance(llm.model, dg.EnvVar) and llm.model.env_var_name == "AWM_LLM_MODEL"
    assert llm.stages["env_code"].model.env_var_name == "AWM_LLM_MODEL_ENV_CODE"
    judge = judge_resource(s)
    assert (judge.model.env_var_name, judge.temperature) == ("AWM_JUDGE_MODEL", 0.0)
    assert S.load_time_values(s)["AWM_EXECUTOR"] == "ray" and "AWM_MAX_RETRIES" in S.load_time_values(s)


def test_settings_import_nothing_of_the_project():
    """The bottom layer (as fastmcp's settings module): every module may read it, it imports none of them, not
    even inside a function, so no import cycle can pass through it."""
    tree = ast.parse((ROOT / "awm_resources" / "settings.py").read_text(encoding="utf-8"))
    project = ("awm_resources", "awm_rl", "awm_assets", "benchmarks", "tests")
    found = [f"line {node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in project)
             or isinstance(node, ast.Import) and any(a.name.split(".")[0] in project for a in node.names)]
    assert not found, found


def test_llm_fields_are_declared_once():
    """The LLM fields live in the settings only: the Dagster resource shows their descriptions and defaults,
    the per-stage config the per-stage ones, and the client starts from the same defaults."""
    from awm_assets.defs.shared.resources import LLMResource
    from awm_resources.llm import LLMClient

    shown = LLMResource.to_config_schema().as_field().config_type.fields
    for name, f in S.LLMFields.model_fields.items():
        assert (shown[name].description, shown[name].default_value) == (f.description, f.default), name
    per_stage = shown["stages"].config_type.inner_type.inner_type.fields  # Noneable(Map(str, stage config))
    assert {n: f.description for n, f in per_stage.items()} == {
        n: f.description for n, f in S.StageLLMFields.model_fields.items()}
    assert S.STAGE_FIELDS == tuple(S.LLMFields.model_fields) == tuple(S.StageLLMSettings.model_fields)
    client, defaults = LLMClient(), S.LLMFields()
    assert (client.model, client.temperature, client.max_tokens, client.timeout_s) == (
        defaults.model, defaults.temperature, defaults.max_tokens, defaults.timeout_s)


def test_the_llm_bounds_are_checked_on_the_settings_only():
    """The settings refuse out-of-range values; the declaration the Dagster resource inherits has no bounds (its
    integer EnvVars are 0 until resolved)."""
    with pytest.raises(S.SettingsError, match="AWM_LLM_TEMPERATURE_TASKS must be at least 0.0, got -1"):
        S.load_settings({"AWM_LLM_TEMPERATURE_TASKS": "-1"})
    with pytest.raises(S.SettingsError, match="AWM_LLM_MAX_TOKENS must be a positive integer, got 0"):
        S.load_settings({"AWM_LLM_MAX_TOKENS": "0"})
    assert S.LLMFields(max_tokens=0).max_tokens == 0
