"""One HTTP request straight into an ASGI app, in-process: FastAPI routing, validation, errors as over HTTP.

Cheaper than httpx's ASGI transport (no client, no URL parsing, no response model), which is what
makes sub-millisecond tool calls possible. An exception the app re-raises after its 500 response
(Starlette's ServerErrorMiddleware does) is reported alongside the response, not raised. A body
larger than `max_body` is not kept: the request answers 502 with an `AnswerTooLarge` naming both sizes.
"""

from __future__ import annotations

import asyncio
from typing import Any


class AnswerTooLarge(Exception):
    """The app's response body passed the answer limit (its chunks were dropped as they came)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"the tool's answer is {size:,} bytes, over the limit of {limit:,} bytes "
                         "(AWM_MAX_ANSWER_BYTES); it was not sent (the call's effects, if any, are applied)")
        self.size, self.limit = size, limit


_BASE_HEADERS = [(b"host", b"environment"), (b"user-agent", b"awm-runtime"), (b"accept", b"application/json")]


async def asgi_request(app: Any, method: str, path: str, query: bytes = b"",
                       body: bytes | None = None, max_body: int | None = None
                       ) -> tuple[int, bytes, BaseException | None]:
    """Returns (status, response body, exception raised by the app after/instead of responding)."""
    headers = list(_BASE_HEADERS)
    if body is not None:
        headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query, "headers": headers, "client": ("127.0.0.1", 50000),
        "server": ("environment", 80), "state": {},
    }
    sent_body = False
    done = asyncio.Event()
    status = 0
    chunks: list[bytes] = []
    size = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size
        kind = message["type"]
        if kind == "http.response.start":
            status = int(message["status"])
        elif kind == "http.response.body":
            chunk = message.get("body", b"")
            size += len(chunk)
            if max_body is None or size <= max_body:
                chunks.append(chunk)
            else:
                chunks.clear()
            if not message.get("more_body", False):
                done.set()

    error: BaseException | None = None
    try:
        await app(scope, receive, send)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - the app's own failure
        error = exc  # sys.exit() in a handler must not end the host process: it becomes an HTTP 500
    finally:
        done.set()
    if max_body is not None and size > max_body:
        return 502, b"", AnswerTooLarge(size, max_body)
    if status == 0:
        status = 500
        if not chunks:
            chunks.append(b"Internal Server Error")
    return status, b"".join(chunks), error
