"""LLM access for every stage: litellm models, a persistent response cache, cost accounting, offline replay.

`LLMClient` is plain Python with no Dagster import (usable from Ray workers, the CLI, the judge and
tests); its Dagster face, `LLMResource`, lives in `awm_assets.resources`. Transport failures (timeouts, 5xx, rate limits) are retried here with
backoff; wrong *content* is not retried here: it raises `LLMOutputError`, which the stage turns into a
self-correction attempt (a Dagster retry with the error in the next prompt).

The `replay` model answers from recorded files `<replay_dir>/<scenario>/<stage>[.<item>].<attempt>.md`
(the raw text an LLM answered), so the demo batch, tests and CI run offline and deterministically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from awm_resources.store import PROJECT_ROOT, default_home

log = logging.getLogger(__name__)
T = TypeVar("T", bound=BaseModel)

REPLAY_MODEL = "replay"
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


class LLMError(Exception):
    """The call itself failed (transport, configuration, missing recording)."""


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


# -- client -----------------------------------------------------------------------------------------
# Exception class names (litellm's, matched along the MRO) worth retrying with backoff: the request was
# fine, the transport or the provider was not. Bad requests and authentication errors are not retried.
_TRANSIENT_NAMES = {"Timeout", "APIConnectionError", "RateLimitError", "InternalServerError",
                    "ServiceUnavailableError", "BadGatewayError"}


def _is_transient(exc: BaseException) -> bool:
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__)


class LLMClient:
    """One model, its cache and its ledger. Thread-safe; see the module docstring."""

    def __init__(self, model: str = REPLAY_MODEL, *, api_base: str | None = None, api_key: str | None = None,
                 temperature: float = 0.7, max_tokens: int = 16_000, timeout_s: float = 300.0,
                 transport_retries: int = 4, backoff_s: float = 2.0, cache_path: Path | None = None,
                 replay_dir: Path | None = None, record_dir: Path | None = None):
        self.model = model or REPLAY_MODEL
        self.api_base, self.api_key = api_base, api_key
        self.temperature, self.max_tokens, self.timeout_s = temperature, max_tokens, timeout_s
        self.transport_retries, self.backoff_s = transport_retries, backoff_s
        self.replay_dir = Path(replay_dir or DEFAULT_REPLAY_DIR)
        self.record_dir = Path(record_dir) if record_dir else None
        self.cache = ResponseCache(cache_path) if cache_path and not self.is_replay else None
        self.ledger: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def is_replay(self) -> bool:
        return self.model == REPLAY_MODEL

    def chat(self, messages: list[dict], *, tag: CallTag, **params: Any) -> LLMResponse:
        """One completion; replayed, cached or paid for, and entered in the ledger."""
        started = time.perf_counter()
        if self.is_replay:
            response = self._replay(messages, tag)
        else:
            call_params = {"temperature": self.temperature, "max_tokens": self.max_tokens, **params}
            key = ResponseCache.key(self.model, messages, call_params)
            cached = self.cache.get(key) if self.cache else None
            if cached is not None:
                response = cached.model_copy(update={"cached": True, "cost_usd": 0.0})
            else:
                response = self._complete(messages, call_params, tag)
                if self.cache:
                    self.cache.put(key, response)
            if self.record_dir:
                path = self.record_dir / tag.scenario / tag.recording_name()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(response.text, encoding="utf-8")
        response.latency_ms = (time.perf_counter() - started) * 1000
        with self._lock:
            self.ledger.append({"stage": tag.stage, "scenario": tag.scenario, "item": tag.item, "attempt": tag.attempt,
                                "prompt_tokens": response.prompt_tokens, "completion_tokens": response.completion_tokens,
                                "cost_usd": response.cost_usd, "cached": response.cached})
        return response

    def chat_json(self, messages: list[dict], model_cls: type[T], *, tag: CallTag, **params: Any) -> tuple[T, LLMResponse]:
        response = self.chat(messages, tag=tag, **params)
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

    def _complete(self, messages: list[dict], params: dict[str, Any], tag: CallTag) -> LLMResponse:
        # Imported lazily (slow, unused offline); use the bundled price map instead of fetching one.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        attempt = 0
        while True:
            try:
                raw = litellm.completion(model=self.model, messages=messages, api_base=self.api_base,
                                         api_key=self.api_key, timeout=self.timeout_s, num_retries=0, **params)
                break
            except Exception as exc:  # noqa: BLE001 - classified below
                if not _is_transient(exc) or attempt >= self.transport_retries:
                    raise LLMError(f"LLM call failed for {tag.describe()} after {attempt + 1} tries: "
                                   f"{type(exc).__name__}: {exc}") from exc
                wait = self.backoff_s * (2 ** attempt)
                log.warning("transient LLM error (%s), retrying in %.1fs", type(exc).__name__, wait)
                time.sleep(wait)
                attempt += 1
        text = raw.choices[0].message.content or ""
        usage = getattr(raw, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=raw) or 0.0)
        except Exception:  # noqa: BLE001 - unknown pricing for self-hosted models
            cost = 0.0
        return LLMResponse(text=text, model=self.model, prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                           completion_tokens=getattr(usage, "completion_tokens", 0) or 0, cost_usd=cost)
