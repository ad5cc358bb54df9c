"""What the HTTP model clients share: typed errors, retries, server-sent events, the request loops.

``HTTPChatGenerator`` does the I/O (one ``httpx.Client`` / ``httpx.AsyncClient`` per generator,
retries with backoff honouring ``Retry-After``, errors mapped where httpx raises them, streams read
line by line); a client for one API says how to build a request, read a reply and assemble a
stream (``OpenAIChatGenerator``, ``AnthropicChatGenerator``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import time
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import orjson

from agentfsm.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ModelClientError,
    ModelConnectionError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
)
from agentfsm.messages import ChatMessage, StreamingCallback, StreamingChunk
from agentfsm.secrets import Secret
from agentfsm.serialization import object_path
from agentfsm.tools.tool import Tool

#: Statuses worth another try: the server is busy or failed for a moment.
_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
#: The longest wait between two tries, whatever the server's Retry-After says.
_MAX_DELAY_S = 60.0


def http_error(status: int, body: str, retry_after: str | None = None) -> ModelHTTPError:
    """The typed error for an error status, with the server's own message when its body has one."""
    message = body[:2000]
    try:
        decoded = orjson.loads(body)
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
            message = str(decoded["error"].get("message") or message)
    except orjson.JSONDecodeError:
        pass
    kind: type[ModelHTTPError]
    if status in (401, 403):
        kind = AuthenticationError
    elif status == 429:
        kind = RateLimitError
    elif status >= 500:
        kind = ServerError
    else:
        kind = BadRequestError
    error = kind(f"The model server answered {status}: {message}", status, body)
    error.retry_after = retry_after
    return error


def retryable(error: ModelClientError) -> bool:
    """Whether another try may succeed: a timeout, a connection problem, 429 or a passing server failure."""
    if isinstance(error, ModelHTTPError):
        return error.status_code in _RETRY_STATUSES
    return isinstance(error, (ModelTimeoutError, ModelConnectionError))


def transport_error(exc: httpx.HTTPError) -> ModelClientError:
    """The typed error for an httpx error that is not a status (a timeout, a connection problem)."""
    if isinstance(exc, httpx.TimeoutException):
        return ModelTimeoutError(f"The model server did not answer in time ({type(exc).__name__}).")
    return ModelConnectionError(f"Could not talk to the model server: {type(exc).__name__}: {exc}")


def retry_delay(attempt: int, backoff_base: float, retry_after: str | None) -> float:
    """Seconds to wait before try ``attempt + 1``: the server's Retry-After, else backoff with jitter."""
    if retry_after:
        try:
            return min(max(float(retry_after), 0.0), _MAX_DELAY_S)
        except ValueError:
            try:
                return min(max(parsedate_to_datetime(retry_after).timestamp() - time.time(), 0.0), _MAX_DELAY_S)
            except (TypeError, ValueError):
                pass
    return float(min(backoff_base * 2**attempt, _MAX_DELAY_S) * random.uniform(0.5, 1.0))


class EventLines:
    """Reads server-sent events line by line, as they arrive: ``feed`` returns an event's data once it is whole."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """Take one line (without its newline); the event's data when a blank line ends it."""
        if line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        elif not line and self._data:
            return self.flush()
        return None

    def flush(self) -> str | None:
        """The data of an event the stream ended without a blank line after (if any)."""
        raw, self._data = ("\n".join(self._data) if self._data else None), []
        return raw


def parse_event(raw: str) -> dict[str, Any] | None:
    """An event's JSON data (``None`` for ``[DONE]``); a garbled event raises ``ModelResponseError``."""
    if raw.strip() == "[DONE]":
        return None
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ModelResponseError(f"The model server sent an event that is not JSON: {raw[:200]!r}") from None
    if not isinstance(decoded, dict):
        raise ModelResponseError(f"The model server sent an event that is not a JSON object: {raw[:200]!r}")
    if isinstance(decoded.get("error"), dict):
        raise ModelResponseError(f"The model server reported an error while streaming: {decoded['error']}")
    return decoded


async def _called(callback: StreamingCallback, chunk: StreamingChunk) -> None:
    pending = callback(chunk)
    if inspect.isawaitable(pending):
        await pending


class StreamAssembly:
    """Puts a streamed reply together event by event; counts the chunks it handed to the callback."""

    def __init__(self) -> None:
        #: Chunks handed to the callback so far.
        self.delivered = 0

    def add(self, event: dict[str, Any]) -> list[StreamingChunk]:
        """Take one event in; the chunks it adds."""
        raise NotImplementedError

    def message(self) -> ChatMessage:
        """The whole reply, as the same answer without streaming would give it."""
        raise NotImplementedError

    def final_chunk(self) -> StreamingChunk:
        """The last chunk: why the reply ended, and what it cost."""
        raise NotImplementedError

    def finished(self, event: dict[str, Any]) -> bool:
        """Whether ``event`` ends the stream (besides ``[DONE]`` and the end of the body)."""
        return False

    def broken(self, exc: httpx.HTTPError) -> ModelClientError:
        """The error for a stream that broke: not retried once chunks reached the callback (they would repeat)."""
        if not self.delivered:
            return transport_error(exc)
        return ModelResponseError(
            f"The model server's stream broke after {self.delivered} chunks reached the callback "
            f"({type(exc).__name__}); it is not retried, since the chunks would be sent again."
        )

    def take(self, event: dict[str, Any] | None, callback: StreamingCallback) -> bool:
        """Add one event and hand its chunks to ``callback``; False at the end of the stream."""
        if event is None:
            return False
        for chunk in self.add(event):
            callback(chunk)
            self.delivered += 1
        return not self.finished(event)

    async def take_async(self, event: dict[str, Any] | None, callback: StreamingCallback) -> bool:
        """Like ``take``; ``callback`` may be async."""
        if event is None:
            return False
        for chunk in self.add(event):
            await _called(callback, chunk)
            self.delivered += 1
        return not self.finished(event)


class HTTPChatGenerator:
    """A model client over httpx; subclasses give the URL, the headers, the request and how to read replies.

    ``timeout`` is in seconds, ``max_retries`` the number of tries after the first, ``backoff_base``
    the first backoff delay (doubled at each try, with jitter).
    """

    #: The API's path under the base URL.
    path = ""
    #: What ``model``, ``api_key`` and ``api_base_url`` default to (the key: from this variable).
    default_model = ""
    api_key_env_var = ""
    default_base_url = ""

    def __init__(
        self,
        model: str | None = None,
        api_key: Secret | None = None,
        api_base_url: str | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        http_client_kwargs: dict[str, Any] | None = None,
        backoff_base: float = 0.5,
    ) -> None:
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"max_retries must be an int >= 0, got {max_retries!r}.")
        if timeout <= 0 or backoff_base < 0:
            raise ConfigurationError(f"timeout must be > 0 and backoff_base >= 0, got {timeout!r}, {backoff_base!r}.")
        self.model = model or self.default_model
        self.api_key = api_key if api_key is not None else Secret.from_env_var(self.api_key_env_var)
        self.api_base_url = (api_base_url or self.default_base_url).rstrip("/")
        self.generation_kwargs = dict(generation_kwargs or {})
        self.timeout = timeout
        self.max_retries = max_retries
        self.http_client_kwargs = dict(http_client_kwargs or {})
        self.backoff_base = backoff_base
        self._client: httpx.Client | None = None
        self._async_client: httpx.AsyncClient | None = None

    # -- what each API says ------------------------------------------------------------------------------

    def headers(self, key: str | None) -> dict[str, str]:
        """The headers of every request, the key included."""
        raise NotImplementedError

    def payload(
        self, messages: list[ChatMessage], tools: list[Tool] | None, stream: bool, **kwargs: Any
    ) -> dict[str, Any]:
        """The request body."""
        raise NotImplementedError

    def replies(self, data: Any) -> list[ChatMessage]:
        """The replies of a decoded (non-streamed) answer; ``KeyError`` / ``TypeError`` when it is not one."""
        raise NotImplementedError

    def assembly(self) -> StreamAssembly:
        """A new assembly for one streamed answer."""
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------------------

    def _client_options(self) -> dict[str, Any]:
        return {
            "timeout": httpx.Timeout(self.timeout),
            "headers": self.headers(self.api_key.resolve_value()),
            **self.http_client_kwargs,
        }

    def warm_up(self) -> None:
        """Open the HTTP client (idempotent); the API key is read now."""
        if self._client is None:
            self._client = httpx.Client(**self._client_options())

    def close(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def close_async(self) -> None:
        """Close both HTTP clients."""
        self.close()
        if self._async_client is not None:
            await self._async_client.aclose()
            self._async_client = None

    # -- requests -------------------------------------------------------------------------------------

    def _decoded(self, response: httpx.Response) -> dict[str, list[ChatMessage]]:
        try:
            replies = self.replies(response.json())
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelResponseError(f"The model server's answer is not a reply: {exc!r}") from None
        if not replies:
            raise ModelResponseError("The model server answered with no reply.")
        return {"replies": replies}

    def _request(
        self, payload: dict[str, Any], streaming_callback: StreamingCallback | None
    ) -> dict[str, list[ChatMessage]]:
        assert self._client is not None
        url = f"{self.api_base_url}{self.path}"
        try:
            if streaming_callback is None:
                response = self._client.post(url, json=payload)
                if response.status_code >= 400:
                    raise http_error(response.status_code, response.text, response.headers.get("retry-after"))
                return self._decoded(response)
            with self._client.stream("POST", url, json=payload) as streamed:
                if streamed.status_code >= 400:
                    body = streamed.read().decode(errors="replace")
                    raise http_error(streamed.status_code, body, streamed.headers.get("retry-after"))
                assembly, events = self.assembly(), EventLines()
                lines = streamed.iter_lines()
                try:
                    for line in lines:
                        raw = events.feed(line)
                        if raw is not None and not assembly.take(parse_event(raw), streaming_callback):
                            break
                except httpx.HTTPError as exc:
                    raise assembly.broken(exc) from exc
                with contextlib.suppress(httpx.HTTPError):
                    for _ in lines:  # the rest of the body, so that the connection serves the next request
                        pass
                raw = events.flush()
                if raw is not None:
                    assembly.take(parse_event(raw), streaming_callback)
                streaming_callback(assembly.final_chunk())
                return {"replies": [assembly.message()]}
        except httpx.HTTPError as exc:
            raise transport_error(exc) from exc

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Ask the model for its reply (streamed to ``streaming_callback`` when given)."""
        self.warm_up()
        payload = self.payload(messages, tools, streaming_callback is not None, **kwargs)
        attempt = 0
        while True:
            try:
                return self._request(payload, streaming_callback)
            except ModelClientError as error:
                if attempt >= self.max_retries or not retryable(error):
                    raise
                time.sleep(retry_delay(attempt, self.backoff_base, getattr(error, "retry_after", None)))
                attempt += 1

    async def _request_async(
        self, payload: dict[str, Any], streaming_callback: StreamingCallback | None
    ) -> dict[str, list[ChatMessage]]:
        if self._async_client is None:
            self._async_client = httpx.AsyncClient(**self._client_options())
        url = f"{self.api_base_url}{self.path}"
        try:
            if streaming_callback is None:
                response = await self._async_client.post(url, json=payload)
                if response.status_code >= 400:
                    raise http_error(response.status_code, response.text, response.headers.get("retry-after"))
                return self._decoded(response)
            async with self._async_client.stream("POST", url, json=payload) as streamed:
                if streamed.status_code >= 400:
                    body = (await streamed.aread()).decode(errors="replace")
                    raise http_error(streamed.status_code, body, streamed.headers.get("retry-after"))
                assembly, events = self.assembly(), EventLines()
                lines = streamed.aiter_lines()
                try:
                    async for line in lines:
                        raw = events.feed(line)
                        if raw is not None and not await assembly.take_async(parse_event(raw), streaming_callback):
                            break
                except httpx.HTTPError as exc:
                    raise assembly.broken(exc) from exc
                with contextlib.suppress(httpx.HTTPError):
                    async for _ in lines:  # the rest of the body, so that the connection serves the next request
                        pass
                raw = events.flush()
                if raw is not None:
                    await assembly.take_async(parse_event(raw), streaming_callback)
                await _called(streaming_callback, assembly.final_chunk())
                return {"replies": [assembly.message()]}
        except httpx.HTTPError as exc:
            raise transport_error(exc) from exc

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Async twin of ``run``; the streaming callback may be async. Cancelling closes the stream."""
        payload = self.payload(messages, tools, streaming_callback is not None, **kwargs)
        attempt = 0
        while True:
            try:
                return await self._request_async(payload, streaming_callback)
            except ModelClientError as error:
                if attempt >= self.max_retries or not retryable(error):
                    raise
                await asyncio.sleep(retry_delay(attempt, self.backoff_base, getattr(error, "retry_after", None)))
                attempt += 1

    # -- serialization ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Serialize the settings; the API key as the name of its environment variable, never its value."""
        return {
            "type": object_path(type(self)),
            "data": {
                "model": self.model,
                "api_key": self.api_key.to_dict(),
                "api_base_url": self.api_base_url,
                "generation_kwargs": self.generation_kwargs,
                "timeout": self.timeout,
                "max_retries": self.max_retries,
                "http_client_kwargs": self.http_client_kwargs,
                "backoff_base": self.backoff_base,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Invert ``to_dict``."""
        body = dict(data["data"])
        body["api_key"] = Secret.from_dict(body["api_key"])
        return cls(**body)
