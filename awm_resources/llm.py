"""LLM access for every stage: litellm models, a persistent response cache, cost accounting, offline replay.

`LLMClient` is plain Python with no Dagster import (usable from Ray workers, the CLI, the judge and
tests); its Dagster face, `LLMResource`, lives in `awm_assets.defs.shared.resources`. Transport failures (timeouts, 5xx, rate limits) are retried here with
backoff; wrong *content* is not retried here: it raises `LLMOutputError`, which the stage turns into a
self-correction attempt (a Dagster retry with the error in the next prompt).

The `replay` model answers from recorded files `<replay_dir>/<scenario>/<stage>[.<item>].<attempt>.md`
(the raw text an LLM answered), so the demo batch, tests and CI run offline and deterministically.

Real models are adapted from litellm's own model information (`adapt_params`): temperature only where the
model accepts it, `reasoning_effort` only for reasoning models, `max_completion_tokens` for OpenAI reasoning
models, an output limit from litellm's max_output_tokens, a JSON-schema response format where supported.
Each stage (`CallTag.stage`) may use its own model and settings (`StageLLMFields`). Every request carries
`X-AWM-Call: <scenario>/<recording name>`, so proxies can log it and test servers can answer from recordings.
A 429 waits as long as its Retry-After asks (bounded); a truncated answer raises `LLMTruncatedError`.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from awm_resources.settings import (
    PROJECT_ROOT,
    REPLAY_MODEL,
    JudgeLLMConfig,
    JudgeSettings,
    LLMFields,
    StageLLMFields,
    load_settings,
)

log = logging.getLogger(__name__)
T = TypeVar("T", bound=BaseModel)

DEFAULTS = LLMFields()  # the client's defaults are the settings' (awm_resources.settings declares them once)
DEFAULT_REPLAY_DIR = PROJECT_ROOT / "seeds" / "recordings"


@dataclass(frozen=True)
class CallTag:
    """What a call is for: names the recording in replay mode and groups cost per stage."""

    stage: str
    scenario: str
    item: str | None = None
    attempt: int = 1

    def recording_name(self) -> str:
        middle = f".{self.item}" if self.item else ""
        return f"{self.stage}{middle}.{self.attempt}.md"

    def describe(self) -> str:
        item = f", item {self.item}" if self.item else ""
        return f"stage {self.stage!r}, scenario {self.scenario!r}{item}, attempt {self.attempt}"


class LLMResponse(BaseModel):
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    latency_ms: float = 0.0
    tokens_estimated: bool = False
    finish_reason: str | None = None  # the provider's, for real calls ("stop", "length", ...)
    # What the provider returned beside `text`: reasoning it split off (litellm's `reasoning_content`, a vLLM
    # reasoning parser's field, Anthropic's thinking blocks), and native function calls as
    # `{"id", "name", "arguments"}` (arguments: the provider's JSON string, unparsed).
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class LLMError(Exception):
    """The call itself failed (transport, configuration, missing recording)."""


class LLMConfigError(LLMError):
    """The call cannot succeed as configured (no or refused credentials, unknown model or endpoint): never
    retried, and callers stop at once instead of recording one failure per item."""


class ReplayMissingError(LLMError):
    """Replay mode has no recorded answer for this call."""


class LLMOutputError(ValueError):
    """The model answered, but not in the required shape; carries the offending text."""

    def __init__(self, message: str, text: str):
        self.text = text
        super().__init__(f"{message}\n--- offending model output ({len(text)} chars) ---\n{quote(text)}")


def quote(text: str, head: int = 600, tail: int = 300) -> str:
    """The start and end of a long text, enough to see what went wrong."""
    if len(text) <= head + tail + 20:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} chars omitted ...]\n{text[-tail:]}"


# -- parsing ----------------------------------------------------------------------------------------
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:\n?```|\Z)", re.S)


def _balanced_spans(text: str, opener: str, closer: str) -> list[str]:
    """Top-level balanced `{...}` / `[...]` spans, honouring JSON strings."""
    spans, depth, start, in_str, esc = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch == opener:
            if depth == 0:
                start = i
            depth += 1
        elif ch == closer and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start:i + 1])
    return spans


def extract_json(text: str) -> Any:
    """Parse the JSON payload out of a model answer: fenced block, whole text, or largest balanced span."""
    candidates: list[str] = []
    for lang, body in _FENCE.findall(text):
        if lang.lower() in ("json", "", "javascript", "js"):
            candidates.append(body)
    candidates.append(text.strip())
    spans = _balanced_spans(text, "{", "}") + _balanced_spans(text, "[", "]")
    candidates.extend(sorted(spans, key=len, reverse=True))
    last_error: json.JSONDecodeError | None = None
    for cand in candidates:
        cand = cand.strip()
        if not cand:
            continue
        try:
            return json.loads(cand)
        except json.JSONDecodeError as exc:
            last_error = exc
    detail = f" (last parse error: {last_error.msg} at line {last_error.lineno} column {last_error.colno})" if last_error else ""
    raise LLMOutputError(f"no valid JSON object found in the model output{detail}", text)


def parse_model(text: str, model_cls: type[T]) -> T:
    """Extract JSON and validate it into `model_cls`, quoting the output on failure."""
    data = extract_json(text)
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()[:8])
        raise LLMOutputError(f"model output does not match {model_cls.__name__}: {problems}", text) from None


def extract_code(text: str, language: str = "python") -> str:
    """The longest fenced code block (preferring `language`), or the whole text if it has no fence."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    preferred = [b for lang, b in blocks if lang in (language, "py" if language == "python" else language)]
    pool = preferred or [b for _, b in blocks]
    if pool and max(pool, key=len).strip():
        return max(pool, key=len).strip("\n") + "\n"
    if "```" in text:
        raise LLMOutputError("unterminated or empty code fence", text)
    return text.strip("\n") + "\n"


# -- cache ------------------------------------------------------------------------------------------
class ResponseCache:
    """A SQLite table of answers keyed by model + messages + params, shared by processes."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._conn() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT, created REAL)")

    def _conn(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    @staticmethod
    def key(model: str, messages: list[dict], params: dict[str, Any]) -> str:
        blob = json.dumps({"model": model, "messages": messages, "params": params}, sort_keys=True,
                          ensure_ascii=False, default=repr)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, key: str) -> LLMResponse | None:
        with self._conn() as conn:
            row = conn.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return LLMResponse.model_validate_json(row[0]) if row else None

    def put(self, key: str, response: LLMResponse) -> None:
        with self._conn() as conn:
            conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?)", (key, response.model_dump_json(), time.time()))


# -- provider adaptation ---------------------------------------------------------------------------
CALL_HEADER = "X-AWM-Call"  # `<scenario>/<recording name>` on every real request: proxies log it, test servers replay by it
# Providers whose reasoning models always reason (gpt-5, o-series): they take no temperature but 1 and want
# `max_completion_tokens`. Elsewhere (Anthropic, Gemini...) reasoning is switched on by `reasoning_effort`.
_ALWAYS_REASONING_PROVIDERS = frozenset({"openai", "azure"})
# Providers that refuse a request without an output limit; used when litellm does not know the model's.
_NEEDS_MAX_TOKENS = frozenset({"anthropic", "bedrock", "vertex_ai"})
FALLBACK_MAX_OUTPUT_TOKENS = 32_768
# Params `chat` adapts per model; any other keyword goes to litellm unchanged.
_ADAPTED = ("temperature", "max_tokens", "max_completion_tokens", "reasoning_effort")


def _litellm() -> Any:
    """litellm, imported lazily (slow, unused offline) with every self-initiated fetch switched off:
    the bundled cost map and Anthropic beta-header table instead of GitHub, no tokenizer downloads."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


@dataclass(frozen=True)
class ModelProfile:
    """What litellm's own model information says about a model string (no network)."""

    model: str
    provider: str
    supported_params: frozenset[str]
    reasoning: bool
    response_schema: bool
    max_output_tokens: int | None

    @property
    def always_reasons(self) -> bool:
        return self.reasoning and self.provider in _ALWAYS_REASONING_PROVIDERS


@functools.lru_cache(maxsize=256)
def model_profile(model: str) -> ModelProfile:
    litellm = _litellm()
    try:
        provider = litellm.get_llm_provider(model)[1]
    except Exception:  # noqa: BLE001 - an unknown provider prefix fails later, in the call, with litellm's message
        provider = model.split("/", 1)[0]

    def ask(fn: Any) -> Any:
        try:
            return fn(model=model)
        except Exception:  # noqa: BLE001 - litellm raises for models it has not mapped
            return None

    supported = ask(litellm.get_supported_openai_params) or ["temperature", "max_tokens"]
    info = ask(litellm.get_model_info) or {}
    max_out = info.get("max_output_tokens") or info.get("max_tokens")
    return ModelProfile(model, provider, frozenset(supported), bool(ask(litellm.supports_reasoning)),
                        bool(ask(litellm.supports_response_schema)), int(max_out) if max_out else None)


def response_format_for(model_cls: type[BaseModel]) -> dict[str, Any]:
    """An OpenAI-style JSON-schema response format from a pydantic model (litellm translates it per provider)."""
    return {"type": "json_schema", "json_schema": {"name": model_cls.__name__[:64], "schema": model_cls.model_json_schema(),
                                                   "strict": False}}


def adapt_params(profile: ModelProfile, *, temperature: float | None, max_tokens: int | None,
                 reasoning_effort: str | None, response_model: type[BaseModel] | None = None) -> dict[str, Any]:
    """The sampling parameters this model accepts, from litellm's model information.

    - temperature: omitted while the model reasons (gpt-5/o-series always; others when `reasoning_effort`
      is set and not "none"): OpenAI rejects any value but 1 there, Anthropic's thinking requires 1.
    - reasoning_effort: sent only to models litellm marks as reasoning models.
    - output limit: `max_tokens` given, else litellm's max_output_tokens for the model (a 2,000-line
      environment needs ~25k tokens, more with reasoning); `max_completion_tokens` for OpenAI reasoning
      models, `max_tokens` elsewhere; unknown models get none (the server's own limit) unless the
      provider requires one.
    - response_format: a JSON schema from `response_model` where litellm says the model supports one.
    """
    out: dict[str, Any] = {}
    effort = reasoning_effort if profile.reasoning else None
    reasoning_on = profile.reasoning and (effort != "none" if profile.always_reasons else effort not in (None, "none"))
    if temperature is not None and "temperature" in profile.supported_params and not reasoning_on:
        out["temperature"] = temperature
    limit = max_tokens or profile.max_output_tokens
    if limit is None and profile.provider in _NEEDS_MAX_TOKENS:
        limit = FALLBACK_MAX_OUTPUT_TOKENS
    if limit:
        out["max_completion_tokens" if profile.always_reasons else "max_tokens"] = int(limit)
    if effort is not None and "reasoning_effort" in profile.supported_params:
        out["reasoning_effort"] = effort
    if response_model is not None and profile.response_schema and "response_format" in profile.supported_params:
        out["response_format"] = response_format_for(response_model)
    return out


def retry_after_s(exc: BaseException) -> float | None:
    """The wait a 429/503 asks for (`retry-after-ms`, `retry-after` in seconds or as an HTTP date), if any.
    litellm keeps the response headers on its exceptions as `litellm_response_headers` for every provider."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        lower = {str(k).lower(): str(v) for k, v in dict(headers or {}).items()}
    except (TypeError, ValueError):
        return None
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


# -- client -----------------------------------------------------------------------------------------
# Exception class names (litellm's, matched along the MRO) worth retrying with backoff: the request was
# fine, the transport or the provider was not. Bad requests and authentication errors are not retried.
_TRANSIENT_NAMES = {"Timeout", "APIConnectionError", "RateLimitError", "InternalServerError",
                    "ServiceUnavailableError", "BadGatewayError"}


def _is_transient(exc: BaseException) -> bool:
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__)


_REFUSED_NAMES = {"AuthenticationError": "the provider refused the credentials",
                  "PermissionDeniedError": "the provider refused the credentials",
                  "NotFoundError": "the endpoint or the model does not exist"}
_UNKNOWN_HOST = ("name or service not known", "nodename nor servname", "temporary failure in name resolution",
                 "no address associated", "getaddrinfo failed")


def config_problem(exc: BaseException, model: str, api_base: str | None, api_key: str | None) -> str | None:
    """Why a failed call is a configuration error (no retry can help), or None when it may be transient.

    litellm raises a missing key as `InternalServerError: Missing credentials` (a 5xx class), so the missing
    key is read from litellm's own check of the model's variables, not from the exception's class."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    message = str(exc)
    status = getattr(exc, "status_code", None)  # litellm maps some statuses to a generic APIError (403 among them)
    by_status = {401: "AuthenticationError", 403: "PermissionDeniedError", 404: "NotFoundError"}.get(status or 0)
    for name, reason in _REFUSED_NAMES.items():
        if name in names or name == by_status:
            return f"{reason} (HTTP {status}, {type(exc).__name__}: {quote(message, 300, 100)})"
    if "BadRequestError" in names and "LLM Provider NOT provided" in message:
        return f"litellm does not know the provider of {model!r} (use <provider>/<model>, e.g. openai/gpt-5)"
    if "APIConnectionError" in names and any(s in message.lower() for s in _UNKNOWN_HOST):
        return f"the endpoint's host cannot be resolved ({quote(message, 200, 100)})"
    if api_key is None:
        try:
            check = _litellm().validate_environment(model=model, api_base=api_base)
        except Exception:  # noqa: BLE001 - litellm cannot tell; treat the failure by its class
            return None
        if not check.get("keys_in_environment", True):
            return f"no API key: none was given and {' / '.join(check.get('missing_keys') or [])} is not set"
    return None


class LLMTruncatedError(LLMOutputError, LLMError):
    """The answer hit the output limit (finish_reason "length"); carries the partial text. Retryable: a
    synthesis stage records a failed attempt and self-corrects with this error in the next prompt. Also an
    LLMError, so callers that only handle failed calls (the judge, the rollout policy) handle it too."""


def stage_fields(stage: str, value: StageLLMFields | Mapping[str, Any]) -> StageLLMFields:
    """One stage's overrides from a mapping or a pydantic / Dagster config object (empty values inherit);
    an unknown key is an error naming it."""
    if type(value) is StageLLMFields:
        return value
    data: Mapping[str, Any] = value.model_dump() if isinstance(value, BaseModel) else value
    unknown = set(data) - set(StageLLMFields.model_fields)
    if unknown:
        raise ValueError(f"LLM settings for stage {stage!r}: unknown keys {sorted(unknown)}; "
                         f"allowed: {sorted(StageLLMFields.model_fields)}")
    return StageLLMFields(**{k: v for k, v in data.items() if v is not None and v != ""})


def stage_settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Per-stage settings from `AWM_LLM_<FIELD>_<STAGE>` variables, e.g. AWM_LLM_MODEL_CLASSIFY=openai/gpt-5-mini,
    AWM_LLM_MAX_TOKENS_ENV_CODE=100000 (awm_resources.settings: the stage names and the errors)."""
    return load_settings(environ).llm.stage_overrides()


@dataclass(frozen=True)
class ResolvedCall:
    model: str
    api_base: str | None
    api_key: str | None
    temperature: float | None
    max_tokens: int | None
    reasoning_effort: str | None
    timeout_s: float


class LLMClient:
    """A default model with per-stage overrides, one cache and one ledger. Thread-safe; see the module docstring.

    `max_tokens=None` uses the model's own output limit from litellm; `temperature=None` never sends one.
    A truncated answer (finish_reason "length") raises `LLMTruncatedError` naming the call (not cached,
    entered in the ledger: it was paid for); `truncation="return"` returns it with `finish_reason="length"`.
    """

    def __init__(self, model: str = REPLAY_MODEL, *, api_base: str | None = None, api_key: str | None = None,
                 temperature: float | None = DEFAULTS.temperature, max_tokens: int | None = DEFAULTS.max_tokens,
                 timeout_s: float = DEFAULTS.timeout_s,
                 transport_retries: int = 4, backoff_s: float = 2.0, max_retry_after_s: float = 120.0,
                 reasoning_effort: str | None = None,
                 stages: Mapping[str, StageLLMFields | Mapping[str, Any]] | None = None,
                 truncation: str = "raise", cache_path: Path | None = None,
                 replay_dir: Path | None = None, record_dir: Path | None = None,
                 key_hint: str = "AWM_LLM_API_KEY"):
        self.model = model or REPLAY_MODEL
        self.key_hint = key_hint  # where a user of this client sets its key, named in configuration errors
        self.api_base, self.api_key = api_base, api_key
        self.temperature, self.max_tokens, self.timeout_s = temperature, max_tokens, timeout_s
        self.reasoning_effort = reasoning_effort or None
        self.transport_retries, self.backoff_s, self.max_retry_after_s = transport_retries, backoff_s, max_retry_after_s
        self.stages = {stage: stage_fields(stage, s) for stage, s in (stages or {}).items()}
        if truncation not in ("raise", "return"):
            raise ValueError(f"truncation must be 'raise' or 'return', not {truncation!r}")
        self.truncation = truncation
        self.replay_dir = Path(replay_dir or DEFAULT_REPLAY_DIR)
        self.record_dir = Path(record_dir) if record_dir else None
        real = not self.is_replay or any(s.model not in (None, REPLAY_MODEL) for s in self.stages.values())
        self.cache = ResponseCache(cache_path) if cache_path and real else None
        self.ledger: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def is_replay(self) -> bool:
        return self.model == REPLAY_MODEL

    def model_for(self, stage: str) -> str:
        own = self.stages.get(stage)
        return (own.model if own else None) or self.model

    def resolve(self, stage: str) -> ResolvedCall:
        """The model and settings a call of `stage` uses. A stage on another provider than the default
        model does not inherit the default api_base/api_key (they belong to that provider)."""
        s = self.stages.get(stage) or StageLLMFields()
        model = s.model or self.model
        same_provider = s.model is None or _provider_prefix(model) == _provider_prefix(self.model)
        pick = lambda own, default: own if own is not None else default  # noqa: E731 - a one-line local helper
        return ResolvedCall(model, s.api_base or (self.api_base if same_provider else None),
                            s.api_key or (self.api_key if same_provider else None), pick(s.temperature, self.temperature),
                            pick(s.max_tokens, self.max_tokens), pick(s.reasoning_effort, self.reasoning_effort),
                            pick(s.timeout_s, self.timeout_s))

    def call_params(self, stage: str, params: dict[str, Any] | None = None,
                    response_model: type[BaseModel] | None = None) -> tuple[ResolvedCall, dict[str, Any]]:
        """The wire parameters of a call (adapted to the stage's model) and what they were resolved from;
        per-call `temperature` / `max_tokens` / `reasoning_effort` override the configured ones."""
        params = dict(params or {})
        cfg = self.resolve(stage)
        temperature = params.pop("temperature", cfg.temperature)
        limit = params.pop("max_completion_tokens", None) or params.pop("max_tokens", None) or cfg.max_tokens
        params.pop("max_tokens", None)
        effort = params.pop("reasoning_effort", cfg.reasoning_effort)
        adapted = adapt_params(model_profile(cfg.model), temperature=temperature, max_tokens=limit,
                               reasoning_effort=effort, response_model=response_model)
        return cfg, {**adapted, **params}

    def chat(self, messages: list[dict], *, tag: CallTag, response_model: type[BaseModel] | None = None,
             truncation: str | None = None, **params: Any) -> LLMResponse:
        """One completion; replayed, cached or paid for, and entered in the ledger.

        `response_model` asks for structured output (a JSON schema) where the provider supports it; the
        text is still parsed by the caller (`chat_json` does it), so the tolerant extractor covers the rest.
        """
        started = time.perf_counter()
        model = self.model_for(tag.stage)
        if model == REPLAY_MODEL:
            response = self._replay(messages, tag)
        else:
            cfg, call_params = self.call_params(tag.stage, params, response_model)
            key = ResponseCache.key(cfg.model, messages, call_params)
            cached = self.cache.get(key) if self.cache else None
            if cached is not None:
                response = cached.model_copy(update={"cached": True, "cost_usd": 0.0})
            else:
                response = self._complete(cfg, messages, call_params, tag)
                if response.finish_reason == "length" and (truncation or self.truncation) == "raise":
                    self._enter(tag, response, started)
                    raise LLMTruncatedError(
                        f"the answer was cut off at the output limit (finish_reason 'length' after "
                        f"{response.completion_tokens} completion tokens; sent {_limit_text(call_params)}) for "
                        f"{tag.describe()}, model {cfg.model}. Retryable: the stage's next attempt gets this "
                        f"error; if it recurs raise AWM_LLM_MAX_TOKENS or AWM_LLM_MAX_TOKENS_{tag.stage.upper()}",
                        response.text)
                if self.cache and response.finish_reason != "length":
                    self.cache.put(key, response)
            if self.record_dir:
                path = self.record_dir / tag.scenario / tag.recording_name()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(response.text, encoding="utf-8")
        self._enter(tag, response, started)
        return response

    def _enter(self, tag: CallTag, response: LLMResponse, started: float) -> None:
        response.latency_ms = (time.perf_counter() - started) * 1000
        with self._lock:
            self.ledger.append({"stage": tag.stage, "scenario": tag.scenario, "item": tag.item, "attempt": tag.attempt,
                                "prompt_tokens": response.prompt_tokens, "completion_tokens": response.completion_tokens,
                                "cost_usd": response.cost_usd, "cached": response.cached})

    def chat_json(self, messages: list[dict], model_cls: type[T], *, tag: CallTag, **params: Any) -> tuple[T, LLMResponse]:
        """`chat` with structured output where supported, parsed into `model_cls` (LLMOutputError if it does not fit)."""
        response = self.chat(messages, tag=tag, response_model=model_cls, **params)
        return parse_model(response.text, model_cls), response

    def usage(self, *, stage: str | None = None, scenario: str | None = None) -> dict[str, Any]:
        """Summed tokens and cost of the ledger entries matching stage/scenario."""
        rows = [r for r in self.ledger if (stage is None or r["stage"] == stage) and (scenario is None or r["scenario"] == scenario)]
        return {"llm_calls": len(rows), "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
                "completion_tokens": sum(r["completion_tokens"] for r in rows),
                "cost_usd": round(sum(r["cost_usd"] for r in rows), 9), "cached_calls": sum(r["cached"] for r in rows)}

    # -- backends ---------------------------------------------------------------------------------
    def _replay(self, messages: list[dict], tag: CallTag) -> LLMResponse:
        path = self.replay_dir / tag.scenario / tag.recording_name()
        if not path.is_file():
            raise ReplayMissingError(
                f"replay model has no recorded answer for {tag.describe()} (looked for {path}). "
                "Record one, or configure a real model (AWM_LLM_MODEL, e.g. openai/gpt-5).")
        text = path.read_text(encoding="utf-8")
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
        return LLMResponse(text=text, model=REPLAY_MODEL, prompt_tokens=prompt_chars // 4,
                           completion_tokens=len(text) // 4, tokens_estimated=True)

    def _complete(self, cfg: ResolvedCall, messages: list[dict], params: dict[str, Any], tag: CallTag) -> LLMResponse:
        """One litellm call with transport retries: exponential backoff, or the wait a 429's Retry-After
        asks for (bounded by `max_retry_after_s`). litellm's own retries are off (num_retries=0)."""
        litellm = _litellm()
        params = dict(params)
        headers = {**(params.pop("extra_headers", None) or {}),
                   CALL_HEADER: urllib.parse.quote(f"{tag.scenario}/{tag.recording_name()}", safe="/._-")}
        attempt = 0
        while True:
            try:
                raw = litellm.completion(model=cfg.model, messages=messages, api_base=cfg.api_base,
                                         api_key=cfg.api_key, timeout=cfg.timeout_s, num_retries=0,
                                         extra_headers=headers, **params)
                break
            except Exception as exc:  # classified below
                problem = config_problem(exc, cfg.model, cfg.api_base, cfg.api_key)
                if problem is not None:
                    endpoint = cfg.api_base or "the provider's default endpoint"
                    raise LLMConfigError(f"model {cfg.model} at {endpoint}: {problem}. Set the key with "
                                         f"{self.key_hint} (or the provider's own variable), check the model name "
                                         f"and the API base; {tag.describe()}") from exc
                if not _is_transient(exc) or attempt >= self.transport_retries:
                    raise LLMError(f"LLM call failed for {tag.describe()} (model {cfg.model}) after {attempt + 1} "
                                   f"tries: {type(exc).__name__}: {exc}") from exc
                asked = retry_after_s(exc)
                wait = min(asked, self.max_retry_after_s) if asked is not None else self.backoff_s * (2 ** attempt)
                log.warning("transient LLM error for %s (%s), retrying in %.2fs%s", tag.describe(), type(exc).__name__,
                            wait, " as Retry-After asks" if asked is not None else "")
                time.sleep(wait)
                attempt += 1
        choice = raw.choices[0]
        text = choice.message.content or ""
        reasoning, tool_calls = split_reasoning(choice.message), native_tool_calls(choice.message)
        usage = getattr(raw, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=raw) or 0.0)
        except Exception:  # noqa: BLE001 - unknown pricing for self-hosted models
            cost = 0.0
        return LLMResponse(text=text, model=cfg.model, prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                           completion_tokens=getattr(usage, "completion_tokens", 0) or 0, cost_usd=cost,
                           finish_reason=getattr(choice, "finish_reason", None), reasoning=reasoning,
                           tool_calls=tool_calls)


def judge_client(config: JudgeLLMConfig, **options: Any) -> LLMClient:
    """The rollout judge's client from its one configuration (`awm_resources.settings.judge_llm_config`);
    `options`: further LLMClient arguments, e.g. max_tokens."""
    options.setdefault("key_hint", config.env.get("api_key") or JudgeSettings.env_names()["api_key"])
    return LLMClient(config.model or REPLAY_MODEL, api_base=config.api_base, api_key=config.api_key,
                     temperature=config.temperature, replay_dir=config.replay_dir, **options)


def split_reasoning(message: Any) -> str | None:
    """The reasoning a provider returned apart from the content: litellm's `reasoning_content` (where it also
    moves a `<think>` block it found in the content), a server's `reasoning` field (newer vLLM reasoning parsers),
    or Anthropic-style thinking blocks. None when the model's reasoning stayed hidden."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if value is None:
            value = (getattr(message, "provider_specific_fields", None) or {}).get(name)
        if isinstance(value, str) and value.strip():
            return value
    blocks = getattr(message, "thinking_blocks", None) or []
    thoughts = [str(b.get("thinking") or "") for b in blocks if isinstance(b, Mapping)]
    return "\n\n".join(t for t in thoughts if t.strip()) or None


def native_tool_calls(message: Any) -> list[dict[str, Any]] | None:
    """Function calls of a native tool-calling answer, as `{"id", "name", "arguments"}` (arguments unparsed)."""
    calls = getattr(message, "tool_calls", None) or []
    out: list[dict[str, Any]] = []
    for call in calls:
        function = getattr(call, "function", None)
        out.append({"id": getattr(call, "id", None) or f"call_{len(out)}",
                    "name": getattr(function, "name", None) or "",
                    "arguments": getattr(function, "arguments", None) or ""})
    return out or None


def _provider_prefix(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else model


def _limit_text(params: dict[str, Any]) -> str:
    for key in ("max_completion_tokens", "max_tokens"):
        if key in params:
            return f"{key}={params[key]}"
    return "no output limit (the server's default)"
