"""Every `AWM_*` setting in one typed object, read from the environment by one loader.

One definition per variable (name, type, default, description) so that a reader cannot disagree with
another about a default or a fallback, a typo is an error instead of a silently ignored value, and
docs/configuration.md is generated from the same fields (`python -m awm_resources.settings --markdown`).

- `load_settings()`: the settings of the current environment, cached per set of `AWM_*` values (a changed
  variable is seen by the next call). An `AWM_*` variable that is neither a setting nor one of the
  `INTERNAL_NAMES` is an error naming it and the closest setting.
- The synthesis LLM: every field also per stage, `AWM_LLM_<FIELD>_<STAGE>` (stage names in `LLM_STAGES`).
- `judge_llm_config()`: the one way to configure the rollout judge's LLM.
- `ray_forwarded_env()`: the one list of variables that travel with work sent to Ray.
- `LLMFields` / `StageLLMFields`: an LLM client's configuration, declared once; the settings, the client
  (awm_resources.llm) and the Dagster LLM resource all take their fields from here.

This module imports nothing of the project (as fastmcp's settings module): every other module may read it,
so whatever it needs (the project root) lives here.
"""

import argparse
import difflib
import json
import os
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Mapping, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticKnownError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # the checkout: default home, seeds and recordings are in it
REPLAY_MODEL = "replay"  # the model that answers from recorded files (awm_resources.llm)
# The stages whose LLM calls the synthesis client tags (`CallTag.stage`): the scenario generator and its
# classifier, the six per-scenario stages and `awm repair`'s three. Equal to the stage names of
# awm_assets/synthesis (a test checks it; this core layer may not import that package).
LLM_STAGES = ("scenarios", "classify", "tasks", "db_schema", "sample_data", "api_spec", "env_code", "verifiers",
              "env_code_repair", "verifiers_repair", "solutions")
# `AWM_*` names that are not settings, each with why: no user sets them, so the loader lets them pass.
INTERNAL_NAMES = {
    "AWM_SECCOMP": "set to 1 by the sandbox in a sandboxed worker's own environment, which then applies the seccomp "
                   "filter before running generated code (a signal from parent to child; the user switch is "
                   "AWM_SANDBOX_SECCOMP)",
    "AWM_FAULT_API_KEY": "a planted secret of the fault tests (tests/faults), which check that it never reaches "
                         "generated code",
}
# Forwarded to every Ray job/actor we start (synthesis steps in cluster mode, the training driver): our
# settings, the Dagster instance, Hugging Face / litellm / provider credentials. Credentials among them are
# visible in the Ray dashboard's job details.
# DAGSTER_PG_*: the PostgreSQL connection of dagster.cluster.yaml, which every step's instance reads.
RAY_FORWARDED_PREFIXES = ("AWM_", "DAGSTER_HOME", "DAGSTER_PG_", "HF_", "TRANSFORMERS_OFFLINE",
                          "TOKENIZERS_PARALLELISM", "LITELLM_", "OPENAI_", "ANTHROPIC_", "AZURE_", "GEMINI_",
                          "RAY_AUTH_MODE", "TRL_EXPERIMENTAL_SILENCE")
SCRATCH_ROLES = {"host": 64, "check": 128, "verifier": 64}  # MB of tmpfs per sandboxed worker role, by default
_OFF_WORDS, _ON_WORDS = ("off", "0", "none", "false", "no"), ("on", "1", "true", "yes")

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class SettingsError(ValueError):
    """A bad `AWM_*` variable: an unknown name or a value of the wrong kind; the message names it."""


def setting(default: Any, description: str, *, env: str | None = None, load_time: bool = False, **kw: Any) -> Any:
    """A field with its description; `env` when its variable is not `<section prefix><FIELD>`; `load_time`
    when the Dagster code location reads it once, at load (a change needs a reload)."""
    extra: dict[str, JsonValue] = {k: v for k, v in (("env", env), ("load_time", load_time)) if v}
    return Field(default, description=description, json_schema_extra=extra or None, **kw)


def _extra(f: FieldInfo) -> dict[str, Any]:
    """What `setting()` noted on a field (its variable, whether it is read at load)."""
    return f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}


def _switch(value: Any) -> Any:
    """on/off words (off, 0, none, false, no / on, 1, true, yes) as a bool."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _OFF_WORDS or word in _ON_WORDS:
            return word in _ON_WORDS
        raise ValueError(f"expected on or off ({'/'.join(_ON_WORDS)} or {'/'.join(_OFF_WORDS)}), got {value!r}")
    return value


class Section(BaseModel):
    """A group of settings; each field's variable is `ENV_PREFIX` + its name upper-cased unless it names its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ENV_PREFIX: ClassVar[str] = "AWM_"
    TITLE: ClassVar[str] = ""

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """field -> its variable (the per-stage family of the LLM section is listed apart)."""
        return {name: str(_extra(f).get("env") or cls.ENV_PREFIX + name.upper())
                for name, f in cls.model_fields.items() if name != "stages"}


class PathSettings(Section):
    """Where the artifact store, the seeds and the LLM recordings are."""

    TITLE = "Paths"
    home: Path | None = setting(None, "The artifact store (scenarios, catalog, training runs, LLM cache); default "
                                "<project>/.awm_home.", env="AWM_HOME")
    seed_dir: Path | None = setting(None, "The folder the seed sensor watches for seed batches (`*.jsonl`, `*.txt`); "
                                    "default <project>/seeds.")
    replay_dir: Path | None = setting(None, "Recorded LLM answers the `replay` model (and a replay judge) answers "
                                      "from; default <project>/seeds/recordings.")
    record_dir: Path | None = setting(None, "Write every real LLM answer of synthesis here, in the replay layout "
                                      "(to replay a run later).")
    dagster_yaml: Path | None = setting(None, "The Dagster instance config that the awm commands (and make synth, "
                                        "make ui) copy into $DAGSTER_HOME; relative to the project; default "
                                        "dagster.yaml (SQLite storage). dagster.cluster.yaml puts run, event-log and "
                                        "schedule storage on PostgreSQL (docs/cluster.md).")


def _not_negative(value: Any) -> Any:
    if value is not None and value < 0:
        raise PydanticKnownError("greater_than_equal", {"ge": 0.0})
    return value


def _positive(value: Any) -> Any:
    if value is not None and value <= 0:
        raise PydanticKnownError("greater_than", {"gt": 0})
    return value


class LLMFields(BaseModel):
    """An LLM client's configuration, declared once: `LLMSettings` reads it from AWM_LLM_*, the Dagster LLM
    resource inherits it (its UI shows these descriptions). Plain types, the bounds checked by the settings:
    the resource passes Dagster's `EnvVar`s through these fields (an integer one is 0 until resolved)."""

    model_config = ConfigDict(frozen=True)
    model: str = setting(REPLAY_MODEL, "litellm model string, e.g. openai/gpt-5; `replay` answers from "
                         "recordings (offline, the demo batch only).")
    api_base: str | None = setting(None, "API base URL (vLLM or another OpenAI-compatible server).")
    api_key: str | None = setting(None, "API key of the model's provider (else the provider's own variable, "
                                  "e.g. OPENAI_API_KEY).", repr=False)
    temperature: float | None = setting(0.7, "Sampling temperature; sent only where the model accepts one (not to "
                                        "reasoning gpt-5/o-series).")
    max_tokens: int | None = setting(None, "Output limit per call; default: the model's own maximum output "
                                     "(litellm's model information).")
    reasoning_effort: str | None = setting(None, "minimal/low/medium/high; sent to reasoning models only "
                                           "(default: the provider's).")
    timeout_s: float = setting(900.0, "Seconds per request; a long environment takes minutes to generate.")


class StageLLMFields(BaseModel):
    """One stage's overrides of an LLM client's configuration (None inherits), declared once like `LLMFields`."""

    model_config = ConfigDict(frozen=True)
    model: str | None = Field(None, description="this stage's litellm model")
    api_base: str | None = Field(None, description="API base URL of this stage's model")
    api_key: str | None = Field(None, repr=False, description="API key of this stage's provider")
    temperature: float | None = Field(None, description="this stage's sampling temperature")
    max_tokens: int | None = Field(None, description="this stage's output limit per call")
    reasoning_effort: str | None = Field(None, description="this stage's reasoning effort (minimal/low/medium/high; "
                                         "reasoning models only)")
    timeout_s: float | None = Field(None, description="seconds per request of this stage")


class StageLLMSettings(Section, StageLLMFields):
    """One stage's overrides of the synthesis LLM (None inherits), as read from AWM_LLM_<FIELD>_<STAGE>."""

    _bounds = field_validator("max_tokens", "timeout_s")(_positive)
    _temperature_bound = field_validator("temperature")(_not_negative)


STAGE_FIELDS = tuple(StageLLMFields.model_fields)


class LLMSettings(Section, LLMFields):
    """The synthesis LLM (litellm). Every field can be set per stage: `AWM_LLM_<FIELD>_<STAGE>`, e.g.
    AWM_LLM_MODEL_CLASSIFY=openai/gpt-5-mini or AWM_LLM_MAX_TOKENS_ENV_CODE=100000. A stage on another
    provider than the default model does not inherit the default api_base/api_key."""

    ENV_PREFIX = "AWM_LLM_"
    TITLE = "Synthesis LLM"
    stages: dict[str, StageLLMSettings] = Field(default_factory=dict, description="per-stage overrides")

    _bounds = field_validator("max_tokens", "timeout_s")(_positive)
    _temperature_bound = field_validator("temperature")(_not_negative)

    def stage_overrides(self) -> dict[str, dict[str, Any]]:
        """The per-stage overrides that are set, as `LLMClient(stages=...)` takes them."""
        return {stage: s.model_dump(exclude_none=True) for stage, s in self.stages.items()}


class JudgeSettings(Section):
    """The LLM of the rollout judge in llm/sql mode (code mode needs none), apart from the synthesis LLM."""

    ENV_PREFIX = "AWM_JUDGE_"
    TITLE = "Judge LLM"
    model: str | None = setting(None, "litellm model of the judge; default `replay`, except for training "
                                "(judge.llm_model in the training config, else this, else AWM_LLM_MODEL).")
    api_base: str | None = setting(None, "API base URL of the judge's model.")
    api_key: str | None = setting(None, "API key of the judge's provider.", repr=False)


class EmbeddingSettings(Section):
    """Sentence embeddings for scenario de-duplication."""

    ENV_PREFIX = "AWM_EMBEDDING_"
    TITLE = "Embeddings"
    model: str | None = setting(None, "litellm embedding model, e.g. openai/text-embedding-3-large (as the paper); "
                                "default: the bundled all-MiniLM-L6-v2, offline.")
    api_base: str | None = setting(None, "API base URL of the embedding model.")
    api_key: str | None = setting(None, "API key of the embedding model's provider.", repr=False)
    path: Path | None = setting(None, "A sentence-transformers model folder used instead of the bundled "
                                "all-MiniLM-L6-v2.", env="AWM_EMBEDDER_PATH")
    cache: Path | None = setting(None, "SQLite file of embeddings already computed, by model and text (every batch "
                                 "embeds the whole catalog again); default <home>/embedding_cache.sqlite.")


class ClusterSettings(Section):
    """Cluster mode: Dagster's steps as Ray jobs on the cluster that hosts the environments."""

    TITLE = "Cluster (Ray)"
    executor: Literal["local", "ray"] = setting("local", "`ray`: every step of the synthesis, catalog and asset "
                                                "runs is submitted as a Ray job (dagster-ray); `local`: in the run's "
                                                "own process.", load_time=True)
    ray_jobs_address: str | None = setting(None, "The head's job server, e.g. http://head:8265; default "
                                           "RAY_API_SERVER_ADDRESS, else port 8265 on the host of RAY_ADDRESS.",
                                           load_time=True)
    ray_step_cpus: Annotated[float, Field(ge=0)] = setting(1.0, "CPUs each step reserves; 0 runs every step on "
                                                           "the head node.", load_time=True)
    ray_step_resources: dict[str, float] = setting({}, "JSON object of custom resources a step needs, e.g. "
                                                   '{"cpu_worker": 1} to keep steps off GPU nodes.', load_time=True)
    ray_step_env: tuple[str, ...] = setting((), "Comma-separated names of extra variables forwarded to the steps "
                                            "and the training job (besides those of 'Variables forwarded to Ray').",
                                            load_time=True)
    torch_threads: PositiveInt | None = setting(None, "torch CPU threads of a trainer on CPU and of the in-process "
                                                "transformers policies, where a training config sets no "
                                                "ray.torch_threads; default every core. 1 where several CPU-bound "
                                                "processes share the cores (make test's two workers): idle torch "
                                                "threads spin and take the CPU from the others.")
    shared_check: bool = setting(True, "off: skip the check, when a process connects to the cluster at "
                                 "RAY_ADDRESS, that every alive node has the artifact store, the Dagster instance "
                                 "and the project with its venv at this process's paths (awm_resources/"
                                 "cluster_check.py).", env="AWM_CLUSTER_CHECK")

    _shared_check_switch = field_validator("shared_check", mode="before")(_switch)

    @field_validator("executor", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("ray_step_resources", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                raise ValueError("must be a JSON object of resource name to amount")
        return value

    @field_validator("ray_step_env", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return tuple(n.strip() for n in value.split(",") if n.strip()) if isinstance(value, str) else value


class IsolationSettings(Section):
    """Bounds of the worker processes that run generated code (environments, the env check, verifiers)."""

    TITLE = "Isolation"
    sandbox: bool = setting(True, "off: run generated code without the bubblewrap sandbox (the resource limits "
                            "stay on).")
    sandbox_seccomp: bool = setting(True, "off: leave the seccomp filter out of the sandbox (debugging; reported "
                                    "as off).")
    scratch_mb: PositiveInt | None = setting(None, "MB of each tmpfs (/tmp, /dev/shm; host memory) of a sandboxed "
                                             "worker, every role; default per role: host 64, check 128, "
                                             "verifier 64.")
    scratch_mb_host: PositiveInt | None = setting(None, "As AWM_SCRATCH_MB for env hosts and `awm serve` workers.")
    scratch_mb_check: PositiveInt | None = setting(None, "As AWM_SCRATCH_MB for the env-code check.")
    scratch_mb_verifier: PositiveInt | None = setting(None, "As AWM_SCRATCH_MB for verifier workers.")
    scratch_files: PositiveInt = setting(10_000, "Files and folders a sandboxed worker may keep in its tmpfs "
                                         "(each costs ~1 KB of kernel memory); its parent ends it beyond.")
    worker_fds: PositiveInt = setting(1024, "Open file descriptors of a sandboxed worker (RLIMIT_NOFILE): a socket "
                                      "pair queues ~220 KB of kernel memory no other limit counts.")
    max_answer_bytes: PositiveInt = setting(1 << 20, "A tool answer above it never leaves its worker (an "
                                            "environment error instead).")
    max_request_bytes: PositiveInt = setting(1 << 20, "A tool call's arguments above it are refused (an agent "
                                             "error, HTTP 413).")

    _switches = field_validator("sandbox", "sandbox_seccomp", mode="before")(_switch)

    def scratch(self, role: str) -> int:
        """MB of each tmpfs of a sandboxed worker of `role`: its own setting, else AWM_SCRATCH_MB, else the default."""
        _check_role(role)
        return getattr(self, f"scratch_mb_{role}") or self.scratch_mb or SCRATCH_ROLES[role]


def _check_role(role: str) -> None:
    if role not in SCRATCH_ROLES:
        raise ValueError(f"unknown scratch role {role!r} (known: {', '.join(SCRATCH_ROLES)})")


class PipelineSettings(Section):
    """The synthesis pipeline and its Dagster automation."""

    TITLE = "Pipeline"
    max_retries: Annotated[int, Field(ge=0)] = setting(5, "Self-correction retries per synthesis stage (5 as in "
                                                       "the paper).", load_time=True)
    sensor_interval_s: PositiveInt = setting(30, "Seconds between looks of the seed and scenario sensors.",
                                             load_time=True)


class EvaluationSettings(Section):
    """Rollouts and benchmarks."""

    TITLE = "Evaluation"
    policy_api_base: str | None = setting(None, "API base of a chat:<model> policy (rollouts, evaluations; e.g. a "
                                          "vLLM server for chat:hosted_vllm/...).")
    policy_api_key: str | None = setting(None, "API key of a chat:<model> policy's provider (else the provider's own "
                                         "variable, e.g. OPENAI_API_KEY).", repr=False)
    bfcl_python: Path | None = setting(None, "The Python of BFCL's scoring environment; default .venv/bfcl next to "
                                       "this interpreter's venv (`make bfcl-venv`).")


class TestSuiteSettings(Section):
    """Read by the test suite only."""

    __test__ = False  # not a pytest class
    TITLE = "Test suite"
    chromium: Path | None = setting(None, "The Chromium binary of the browser test; default /usr/bin/chromium.")
    test_artifacts: Path | None = setting(None, "Where the browser test writes its screenshots (under ui/); "
                                          "default tests/artifacts.")


class Settings(BaseSettings):
    """All settings; `load_settings()` reads them from the environment."""

    model_config = SettingsConfigDict(env_prefix="AWM_", frozen=True, extra="forbid")
    paths: PathSettings = Field(default_factory=PathSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    isolation: IsolationSettings = Field(default_factory=IsolationSettings)
    pipeline: PipelineSettings = Field(default_factory=PipelineSettings)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    testing: TestSuiteSettings = Field(default_factory=TestSuiteSettings)

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        """Values given to the constructor, then our `AWM_*` reader (it replaces the flat env, dotenv and secrets
        sources: the variables map onto nested sections and unknown names are errors)."""
        del env_settings, dotenv_settings, file_secret_settings  # pydantic-settings passes them by keyword
        return init_settings, _AwmEnvSource(settings_cls)


def sections() -> dict[str, type[Section]]:
    return {name: f.annotation for name, f in Settings.model_fields.items()}  # type: ignore[misc]  # each field is a Section


@lru_cache(maxsize=1)
def variables() -> dict[str, tuple[str, ...]]:
    """Every setting's variable -> its place in `Settings` (section, field[, stage, field])."""
    out: dict[str, tuple[str, ...]] = {env: (section, name) for section, cls in sections().items()
                                       for name, env in cls.env_names().items()}
    for stage in LLM_STAGES:
        out.update({f"AWM_LLM_{name.upper()}_{stage.upper()}": ("llm", "stages", stage, name) for name in STAGE_FIELDS})
    return out


def variable(*path: str) -> str:
    """The variable of the setting at `path`, e.g. variable("llm", "stages", "tasks", "model")."""
    by_path = {p: env for env, p in variables().items()}
    if path not in by_path:
        raise KeyError(f"no setting at {'.'.join(path)}")
    return by_path[path]


def configured(section: BaseModel, *path: str) -> dict[str, tuple[Any, str]]:
    """The fields of `section` (at `path` in Settings) that a variable set: name -> (value, variable)."""
    return {name: (getattr(section, name), variable(*path, name)) for name in sorted(section.model_fields_set)
            if name != "stages"}


def check_names(environ: Mapping[str, str]) -> None:
    """An `AWM_*` variable that is neither a setting nor internal is an error naming the closest setting."""
    known = variables()
    unknown = sorted(n for n in environ if n.startswith("AWM_") and n not in known and n not in INTERNAL_NAMES)
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
            hints.append(f"{name}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise SettingsError(f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(hints)}: every AWM_* "
                            "variable must be a setting (docs/configuration.md lists them)")


_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("awm_settings_environ", default=None)


class _AwmEnvSource(PydanticBaseSettingsSource):
    """The `AWM_*` variables of the environment (or of `load_settings`'s mapping) as nested values; empty = unset."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # noqa: ARG002 - abstract API
        return None, field_name, False  # unused: __call__ reads every variable at once

    def __call__(self) -> dict[str, Any]:
        environ = _ENVIRON.get()
        environ = os.environ if environ is None else environ
        check_names(environ)
        values: dict[str, Any] = {}
        for name, path in variables().items():
            raw = (environ.get(name) or "").strip()
            if raw:
                node = values
                for part in path[:-1]:
                    node = node.setdefault(part, {})
                node[path[-1]] = raw
        return values


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of `environ` (default: this process's environment); a bad variable raises SettingsError."""
    environ = os.environ if environ is None else environ
    return _load(tuple(sorted((k, v) for k, v in environ.items() if k.startswith("AWM_"))))


@lru_cache(maxsize=64)
def _load(awm_items: tuple[tuple[str, str], ...]) -> Settings:
    environ = dict(awm_items)
    token = _ENVIRON.set(environ)
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(_explain(exc, environ)) from None
    finally:
        _ENVIRON.reset(token)


def _explain(exc: ValidationError, environ: Mapping[str, str]) -> str:
    """Each wrong value as `<VARIABLE> must be ..., got '<value>'`."""
    by_path = {path: env for env, path in variables().items()}
    lines = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"] if not str(p).startswith(("function-", "constrained-")))
        env = next((by_path[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in by_path), ".".join(loc))
        raw = environ.get(env, err.get("input"))
        kind, ctx = err["type"], err.get("ctx") or {}
        if kind in ("int_parsing", "int_from_float"):
            lines.append(f"{env} must be an integer, got {raw!r}")
        elif kind == "float_parsing":
            lines.append(f"{env} must be a number, got {raw!r}")
        elif kind == "greater_than" and ctx.get("gt") == 0:
            lines.append(f"{env} must be a positive {_kind(_annotation(loc))}, got {raw}")
        elif kind == "literal_error":
            lines.append(f"{env} must be {ctx.get('expected')}, got {raw!r}")
        elif kind == "greater_than_equal":
            lines.append(f"{env} must be at least {ctx.get('ge')}, got {raw}")
        else:
            lines.append(f"{env}={raw!r}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(lines)


def _annotation(loc: tuple[str, ...]) -> Any:
    """The type of the field at `loc` (a section field, or a per-stage one)."""
    cls = StageLLMSettings if loc[:2] == ("llm", "stages") else sections().get(loc[0])
    f = cls.model_fields.get(loc[-1]) if cls else None
    return f.annotation if f else None


# -- the readers' helpers -----------------------------------------------------------------------------------

def max_answer_bytes() -> int:
    return load_settings().isolation.max_answer_bytes


def max_request_bytes() -> int:
    return load_settings().isolation.max_request_bytes


def scratch_mb(role: str) -> int:
    _check_role(role)  # before loading, so that a wrong role is named even when a variable is wrong too
    return load_settings().isolation.scratch(role)


def scratch_files() -> int:
    return load_settings().isolation.scratch_files


def worker_fds() -> int:
    return load_settings().isolation.worker_fds


@dataclass(frozen=True)
class JudgeLLMConfig:
    """What the judge's `LLMClient` is built from (`awm_resources.llm.judge_client`), and which variable each
    value came from (for Dagster's `EnvVar`, so the UI shows the variable rather than a copied value)."""

    model: str | None
    api_base: str | None
    api_key: str | None = field(repr=False)
    replay_dir: Path | None
    temperature: float = 0.0
    env: dict[str, str] = field(default_factory=dict)


def judge_llm_config(settings: Settings | None = None, *, model: str | None = None, api_base: str | None = None,
                     fallback_to_synthesis: bool = False) -> JudgeLLMConfig:
    """The judge's LLM: `model`/`api_base` when given (a command-line or config value), else AWM_JUDGE_*;
    with `fallback_to_synthesis` (training, documented in its config) and no AWM_JUDGE_MODEL, the synthesis
    LLM's AWM_LLM_MODEL/API_BASE/API_KEY. `model` stays None when nothing names one (a client answers
    from recordings then)."""
    s = settings or load_settings()
    use_llm = fallback_to_synthesis and not s.judge.model
    section, names = (s.llm, LLMSettings.env_names()) if use_llm else (s.judge, JudgeSettings.env_names())
    source_model = section.model if not use_llm or "model" in s.llm.model_fields_set else None
    env = {k: names[k] for k in ("model", "api_base", "api_key") if k in section.model_fields_set}
    if model:
        env.pop("model", None)
    if api_base:
        env.pop("api_base", None)
    if s.paths.replay_dir:
        env["replay_dir"] = PathSettings.env_names()["replay_dir"]
    return JudgeLLMConfig(model=model or source_model, api_base=api_base or section.api_base,
                          api_key=section.api_key, replay_dir=s.paths.replay_dir, env=env)


def ray_forwarded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables (name -> value, only set ones) that travel with every Ray job or actor we start: those of
    `RAY_FORWARDED_PREFIXES` and AWM_RAY_STEP_ENV's names, never the internal `AWM_*` signals."""
    environ = os.environ if environ is None else environ
    extra = set(load_settings(environ).cluster.ray_step_env)
    names = {n for n in environ if (n.startswith(RAY_FORWARDED_PREFIXES) or n in extra) and n not in INTERNAL_NAMES}
    return {n: environ[n] for n in sorted(names)}


def load_time_values(settings: Settings | None = None) -> dict[str, str]:
    """The settings the Dagster code location reads once at load (variable -> value in effect), to show them."""
    s = settings or load_settings()
    out = {}
    for section, cls in sections().items():
        for name, env in cls.env_names().items():
            if _extra(cls.model_fields[name]).get("load_time"):
                out[env] = _show(getattr(getattr(s, section), name))
    return out


# -- docs/configuration.md ----------------------------------------------------------------------------------

def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)


def _kind(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + " / ".join(get_args(annotation))
    text = str(annotation)
    for needle, kind in (("bool", "on / off"), ("dict", "JSON object"), ("tuple", "names, comma-separated"),
                         ("Path", "path"), ("int", "integer"), ("float", "number"), ("str", "text")):
        if needle in text:
            return kind
    return text


def markdown() -> str:
    """docs/configuration.md: every setting from its field, the per-stage family and the internal names."""
    out = ["# Configuration", "",
           "Every setting is an environment variable read by one typed object, `awm_resources/settings.py`;",
           "this page is generated from it (`python -m awm_resources.settings --markdown > docs/configuration.md`,",
           "checked by tests/test_settings.py). An `AWM_*` variable that is not listed here is an error naming the",
           "closest setting (e.g. AWM_LLM_MODEL_ENVCODE: did you mean AWM_LLM_MODEL_ENV_CODE?). An empty value is",
           "the same as an unset one. Settings marked *load* are read once when the Dagster code location loads",
           "(reload it after a change; the definitions' metadata shows the values in effect).", ""]
    for cls in sections().values():
        out += [f"## {cls.TITLE}", "", (cls.__doc__ or "").strip().replace("\n    ", " "), "",
                "| Variable | Type | Default | Description |", "|---|---|---|---|"]
        for name, env in cls.env_names().items():
            f = cls.model_fields[name]
            load = " *load*" if _extra(f).get("load_time") else ""
            default = _show(f.get_default(call_default_factory=True))
            out.append(f"| `{env}`{load} | {_kind(f.annotation)} | {f'`{default}`' if default else ''} | "
                       f"{f.description} |")
        out.append("")
    fields = ", ".join(f"`{n.upper()}`" for n in STAGE_FIELDS)
    stages = ", ".join(f"`{s.upper()}`" for s in LLM_STAGES)
    out += ["## Synthesis LLM per stage", "",
            f"`AWM_LLM_<FIELD>_<STAGE>` overrides the synthesis LLM for one stage; FIELD is one of {fields}, STAGE one of "
            f"{stages} (the stages of awm_assets/synthesis and `awm repair`).", "",
            "## Variables forwarded to Ray", "",
            "Every Ray job or actor we start (synthesis steps with AWM_EXECUTOR=ray, the training job) gets the set "
            "variables whose names start with " + ", ".join(f"`{p}`" for p in RAY_FORWARDED_PREFIXES)
            + ", plus the names in AWM_RAY_STEP_ENV (internal names below excepted).", "",
            "## Internal names (not settings)", "", "| Variable | Why it exists |", "|---|---|"]
    out += [f"| `{name}` | {why} |" for name, why in INTERNAL_NAMES.items()]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m awm_resources.settings", description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/configuration.md")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
        return 0
    print(load_settings().model_dump_json(indent=2, exclude={"llm": {"api_key"}, "judge": {"api_key"},
                                                             "embedding": {"api_key"},
                                                             "evaluation": {"policy_api_key"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
