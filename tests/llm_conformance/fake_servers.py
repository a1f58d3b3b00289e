"""Loopback LLM servers for conformance tests: the OpenAI chat-completions and the Anthropic messages
protocols over real HTTP, answering from the demo's recordings.

The client names each call in the `X-AWM-Call: <scenario>/<recording name>` header, so the server
serves exactly the recording the replay model would (`seeds/recordings/<scenario>/<stage>[.<item>].<attempt>.md`).
Every request is kept (path, headers, JSON body) so tests assert on the parameters actually on the wire.
Faults (status codes with headers, a slow answer, a truncated answer, a garbage answer) are queued and
consumed one per completion request, in order; a fault with a `call` waits for that call (the others
pass it by), so a fault can be placed in the middle of a whole synthesis batch.

`shape` serves an answer the way a provider returns it (`SHAPES`): "content" as recorded; a `<think>` block moved
out of the content into `reasoning_content` (litellm's split, vLLM's reasoning parser), into `reasoning` (newer
vLLM) or into Anthropic thinking blocks; "hidden" without it (hosted reasoning models); "native": the recorded
`<tool_call>` as the OpenAI protocol's `tool_calls` (to requests that carry `tools`), the reasoning apart.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from awm_resources.llm import extract_json

CALL_HEADER = "x-awm-call"
OPENAI_PATHS = ("/v1/chat/completions", "/chat/completions")
ANTHROPIC_PATHS = ("/v1/messages",)
EMBEDDING_PATHS = ("/v1/embeddings", "/embeddings")
JSON_TOOL_NAME = "json_tool_call"  # litellm's RESPONSE_FORMAT_TOOL_NAME for Anthropic without native output
SHAPES = ("content", "reasoning_content", "reasoning", "hidden", "native")


@dataclass
class Fault:
    """One scripted misbehaviour: an HTTP error status (with headers), a delay before answering, a cut answer,
    or `answer` instead of the recording; for the request naming `call` only, when given."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    sleep_s: float = 0.0
    truncate: bool = False
    answer: str | None = None
    call: str | None = None


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]
    at: float


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:  # the name is http.server's API
        fake: FakeLLMServer = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        path = self.path.split("?", 1)[0]
        protocol = "openai" if path in OPENAI_PATHS else "anthropic" if path in ANTHROPIC_PATHS else None
        fake._record(Received(path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()))
        if path in EMBEDDING_PATHS:
            return self._send(200, _embeddings_answer(body))
        if protocol is None:
            return self._send(404, {"error": {"message": f"no such route {path}", "type": "not_found"}})
        call = unquote(self.headers.get(CALL_HEADER, ""))
        fault = fake._next_fault(call)
        if fault and fault.sleep_s:
            time.sleep(fault.sleep_s)
        if fault and fault.status:
            return self._send(fault.status, _error_body(protocol, fault.status), fault.headers)
        text = fault.answer if fault and fault.answer is not None else fake.answer_for(call)
        if text is None:
            return self._send(404, _error_body(protocol, 404, f"no recording for call {call!r}"))
        truncated = bool(fault and fault.truncate)
        if truncated:
            text = text[: max(1, len(text) // 2)]
        answer = (_openai_answer if protocol == "openai" else _anthropic_answer)(body, text, truncated, fake.shape)
        self._send(200, answer)

    def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeLLMServer


class FakeLLMServer:
    """Both protocols on one loopback port; see the module docstring."""

    def __init__(self, recordings: Path, default_answer: str | None = None, shape: str = "content"):
        if shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, not {shape!r}")
        self.recordings = Path(recordings)
        self.default_answer = default_answer
        self.shape = shape
        self.requests: list[Received] = []
        self.faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-llm", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.faults.clear()

    def answer_for(self, call: str) -> str | None:
        if call:
            path = (self.recordings / call).resolve()
            if self.recordings.resolve() in path.parents and path.is_file():
                return path.read_text(encoding="utf-8")
        return self.default_answer

    def _record(self, received: Received) -> None:
        with self._lock:
            self.requests.append(received)

    def _next_fault(self, call: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.call is None or fault.call == call:
                    self.faults.remove(fault)
                    return fault
            return None


# -- wire formats -----------------------------------------------------------------------------------
def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _prompt_text(body: dict) -> str:
    parts = [json.dumps(body.get("system", ""))] + [json.dumps(m.get("content", "")) for m in body.get("messages", [])]
    return "".join(parts)


def _structured(text: str) -> Any:
    """What a provider in JSON-schema mode answers: the bare JSON, without the prose and fences."""
    try:
        return extract_json(text)
    except ValueError:
        return None


def _split_think(text: str) -> tuple[str | None, str]:
    """A recorded turn's `<think>` block and the rest, as a provider's reasoning parser splits them."""
    match = _THINK.search(text)
    if match is None:
        return None, text
    return match.group(1).strip(), (text[:match.start()] + text[match.end():]).strip()


_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _openai_message(body: dict, text: str, shape: str) -> tuple[dict, str | None]:
    """The assistant message in `shape` and the finish reason it implies (None: the usual one)."""
    if shape == "content":
        return {"role": "assistant", "content": text}, None
    reasoning, rest = _split_think(text)
    message: dict[str, Any] = {"role": "assistant", "content": rest}
    if shape in ("reasoning_content", "reasoning", "native") and reasoning is not None:
        message["reasoning_content" if shape != "reasoning" else "reasoning"] = reasoning
    if shape != "native" or not body.get("tools"):
        return message, None
    calls = []
    for n, match in enumerate(_TOOL_CALL.finditer(rest)):
        call = json.loads(match.group(1))
        calls.append({"id": f"call_{uuid.uuid4().hex[:8]}_{n}", "type": "function",
                      "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}})
    if not calls:
        return message, None
    message["content"] = _TOOL_CALL.sub("", rest).strip() or None
    message["tool_calls"] = calls
    return message, "tool_calls"


def _openai_answer(body: dict, text: str, truncated: bool, shape: str = "content") -> dict:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema" and not truncated:
        data = _structured(text)
        text = json.dumps(data) if data is not None else text
    prompt = _tokens(_prompt_text(body))
    completion = _tokens(text)
    message, finish = _openai_message(body, text, shape)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "unknown"),
        "choices": [{"index": 0, "message": message, "finish_reason": "length" if truncated else finish or "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _anthropic_answer(body: dict, text: str, truncated: bool, shape: str = "content") -> dict:
    if shape != "content":  # Anthropic returns reasoning as thinking blocks before the text
        reasoning, rest = _split_think(text)
        answer = _anthropic_answer(body, rest, truncated)
        if reasoning is not None and shape != "hidden":
            answer["content"].insert(0, {"type": "thinking", "thinking": reasoning, "signature": "fake-signature"})
        return answer
    content: list[dict]
    forced = (body.get("tool_choice") or {}).get("name") == JSON_TOOL_NAME
    data = _structured(text) if (forced or body.get("output_format")) and not truncated else None
    if forced and isinstance(data, dict):
        content = [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": JSON_TOOL_NAME, "input": data}]
    else:
        content = [{"type": "text", "text": json.dumps(data) if data is not None else text}]
    return {
        "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant", "model": body.get("model", "unknown"),
        "content": content, "stop_reason": "max_tokens" if truncated else ("tool_use" if forced and data else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": _tokens(_prompt_text(body)), "output_tokens": _tokens(text)},
    }


def _error_body(protocol: str, status: int, message: str | None = None) -> dict:
    kind = {429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 404: "not_found_error"}.get(status, "api_error")
    message = message or f"scripted fault: HTTP {status}"
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "code": str(status)}}


def _embeddings_answer(body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI-protocol embeddings: a bag of hashed words (texts sharing words point the same way), 64 floats."""
    import hashlib
    import math

    texts = body.get("input") or []
    texts = [texts] if isinstance(texts, str) else texts
    data = []
    for i, text in enumerate(texts):
        vec = [0.0] * 64
        for word in str(text).lower().split():
            vec[int(hashlib.sha256(word.strip(".,:;").encode()).hexdigest(), 16) % 64] += 1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        data.append({"object": "embedding", "index": i, "embedding": [v / norm for v in vec]})
    return {"object": "list", "data": data, "model": body.get("model", "fake-embedding"),
            "usage": {"prompt_tokens": sum(len(str(t).split()) for t in texts), "total_tokens": 0}}
