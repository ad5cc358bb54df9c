"""What the HTTP model clients share: typed errors, server-sent events, one try of a request.

``HTTPChatGenerator`` does the I/O (one ``httpx.Client`` / ``httpx.AsyncClient`` per generator,
errors mapped where httpx raises them, bodies and streams read piece by piece); whether and when
to try again, and the deadline of each call, are its ``RetryPlan``'s (``_retry.py``). A client for
one API says how to build a request, read a reply and assemble a stream (``OpenAIChatGenerator``,
``AnthropicChatGenerator``).
What the server sends is untrusted: anything that is not the reply the API describes becomes a
``ModelResponseError``, never a raw exception from deeper down.
"""

from __future__ import annotations

import asyncio
import codecs
import inspect
import math
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import orjson

from agentfsm.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    DeserializationError,
    ModelHTTPError,
    ModelResponseError,
    RateLimitError,
    SerializationError,
    ServerError,
)
from agentfsm.generators._retry import RetryPlan, retry, retry_async
from agentfsm.messages import RAW_ARGUMENTS_KEY, ChatMessage, StreamingCallback, StreamingChunk, parse_tool_arguments
from agentfsm.secrets import ENV_ALLOWED_ENDPOINTS, Secret, endpoint_allowed
from agentfsm.serialization import nests_deeper, object_path
from agentfsm.tools.tool import Tool

#: The largest body (or single event line) read from a model server.
MAX_BODY_BYTES = 32 * 1024 * 1024
#: The deepest nesting accepted in a server's JSON (a reply is a few levels deep; tool arguments a few more).
#: Deeper values could not be written into a snapshot or sent back to the server.
MAX_JSON_DEPTH = 100
#: Header and parameter names known to carry a credential, whole (lower-cased).
_CREDENTIAL_NAMES = frozenset(
    {"key", "code", "sig", "signature", "x-functions-key", "x-goog-api-key", "x-amz-security-token", "set-cookie"}
)
#: Words that make a name a credential's wherever they stand in it (``X-Auth-Token``, ``client_secret``).
_CREDENTIAL_WORDS = frozenset(
    {
        "auth",
        "authorization",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "credentials",
        "cookie",
        "apikey",
        "signature",
    }
)
#: Words that make the ``key`` after them a credential (``x-api-key``, ``Ocp-Apim-Subscription-Key``), where
#: ``Idempotency-Key`` is not one.
_KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "subscription", "auth", "client", "session"})

#: The fields ``to_dict`` writes (and ``from_dict`` reads).
_SERIALIZED_FIELDS = frozenset(
    {
        "model",
        "api_key",
        "api_base_url",
        "generation_kwargs",
        "timeout",
        "max_retries",
        "http_client_kwargs",
        "backoff_base",
        "max_backoff",
        "connect_timeout",
        "deadline",
    }
)
#: The ``http_client_kwargs`` that data may set: none of them changes where the key goes (``base_url``,
#: ``proxy``, ``mounts``, ``transport``, ``follow_redirects``) or how securely (``verify``, ``cert``,
#: ``trust_env``), and none runs code (``event_hooks``, ``auth``).
_KWARGS_FROM_DATA = frozenset({"headers", "params", "limits", "http1", "http2", "default_encoding"})

ANSWER_ERRORS = (KeyError, TypeError, AttributeError, ValueError, IndexError)
"""What reading an answer of the wrong shape raises; each becomes a ``ModelResponseError``."""


# -- errors -------------------------------------------------------------------------------------------


def http_error(status: int, body: str, retry_after: str | None = None) -> ModelHTTPError:
    """The typed error for an error status, with the server's own message when its body has one."""
    message = body[:2000]
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        decoded = None
    if isinstance(decoded, dict):
        error = decoded.get("error")
        found = error.get("message") if isinstance(error, dict) else error
        if isinstance(found, str) and found:
            message = found[:2000]
    kind: type[ModelHTTPError]
    if status in (401, 403):
        kind = AuthenticationError
    elif status == 429:
        kind = RateLimitError
    elif status >= 500:
        kind = ServerError
    else:
        kind = BadRequestError
    error_ = kind(f"The model server answered {status}: {message}", status, body[:100_000])
    error_.retry_after = retry_after
    return error_


# -- reading bodies and events ------------------------------------------------------------------------


def decode_json(raw: bytes | str, what: str) -> Any:
    """Server JSON, decoded; not JSON, or nested deeper than ``MAX_JSON_DEPTH``: ``ModelResponseError``."""
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ModelResponseError(f"The model server sent {what} that is not JSON: {raw[:200]!r}") from None
    if nests_deeper(decoded, MAX_JSON_DEPTH):
        raise ModelResponseError(f"The model server sent {what} nested deeper than {MAX_JSON_DEPTH} levels.")
    return decoded


def tool_arguments(given: Any) -> dict[str, Any]:
    """A tool call's arguments, from a JSON text or an object; what cannot be used is kept as text for the model."""
    if isinstance(given, dict):
        arguments = given
    elif isinstance(given, str):
        arguments = parse_tool_arguments(given or "{}")
    elif given is None:
        return {}
    else:
        return {RAW_ARGUMENTS_KEY: orjson.dumps(given).decode()[:10_000]}
    if nests_deeper(arguments, MAX_JSON_DEPTH // 2):
        text = given if isinstance(given, str) else "(arguments nested too deep to repeat)"
        return {RAW_ARGUMENTS_KEY: text[:10_000]}
    return arguments


def text_of(content: Any) -> str | None:
    """A message's text: a string, ``None``, or a list of text parts (joined)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(p["text"] for p in content if p.get("type") == "text" and isinstance(p.get("text"), str))
    raise ModelResponseError(f"The model server sent message content of type {type(content).__name__}.")


_LINE_END = re.compile(r"\r\n|\r|\n")


class EventReader:
    """Splits a server-sent-event body into its events' data, however the bytes were cut on the way.

    Comment lines (``: keep-alive``) and ``event:`` / ``id:`` / ``retry:`` fields are skipped: the
    APIs read here put everything in ``data``.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[str]:
        """Take the next bytes; the data of each event they complete."""
        self._pending += self._decoder.decode(data)
        events: list[str] = []
        while match := _LINE_END.search(self._pending):
            if match.group() == "\r" and match.end() == len(self._pending):
                break  # maybe the first half of "\r\n"
            line, self._pending = self._pending[: match.start()], self._pending[match.end() :]
            raw = self._line(line)
            if raw is not None:
                events.append(raw)
        if len(self._pending) > MAX_BODY_BYTES:
            raise ModelResponseError("The model server sent an event line longer than the limit of 32 MiB.")
        return events

    def close(self) -> list[str]:
        """The data of an event the body ended in, without the blank line that should follow it."""
        last, self._pending = (self._pending + self._decoder.decode(b"", final=True)).removesuffix("\r"), ""
        if last:
            self._line(last)
        return [self._flush()] if self._data else []

    def _line(self, line: str) -> str | None:
        if line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        elif not line and self._data:
            return self._flush()
        return None

    def _flush(self) -> str:
        raw, self._data = "\n".join(self._data), []
        return raw


def parse_event(raw: str) -> dict[str, Any] | None:
    """An event's JSON data (``None`` for ``[DONE]``); a garbled event raises ``ModelResponseError``."""
    if raw.strip() == "[DONE]":
        return None
    decoded = decode_json(raw, "an event")
    if not isinstance(decoded, dict):
        raise ModelResponseError(f"The model server sent an event that is not a JSON object: {raw[:200]!r}")
    if decoded.get("error") is not None or decoded.get("type") == "error":
        raise ModelResponseError(f"The model server reported an error while streaming: {str(decoded)[:500]}")
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

    @property
    def complete(self) -> bool:
        """Whether the server said why the reply ended (a stream that stops before is broken)."""
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

    def take(self, raws: list[str]) -> tuple[list[StreamingChunk], bool]:
        """The chunks that the events ``raws`` add, and whether the stream is over."""
        chunks: list[StreamingChunk] = []
        for raw in raws:
            event = parse_event(raw)
            if event is None:
                return chunks, True
            try:
                chunks += self.add(event)
            except ANSWER_ERRORS as exc:
                raise ModelResponseError(f"The model server sent an event of the wrong shape ({exc!r}).") from None
            if self.finished(event):
                return chunks, True
        return chunks, False

    def closing_chunks(self) -> tuple[ChatMessage, list[StreamingChunk]]:
        """The whole reply and the last chunks: its tool calls (when it has some), then the final chunk.

        A stream that ended before the server said why the reply ended is a ``ModelResponseError``:
        a cut-off answer is never passed on as a whole one.
        """
        if not self.complete:
            raise ModelResponseError(
                f"The model server's stream ended before the reply was finished (no finish reason, after "
                f"{self.delivered} chunks): the server failed while answering."
            )
        try:
            message = self.message()
        except ANSWER_ERRORS as exc:
            raise ModelResponseError(f"The model server's streamed reply could not be read ({exc!r}).") from None
        chunks = [StreamingChunk(tool_calls=list(message.tool_calls), index=0)] if message.tool_calls else []
        return message, [*chunks, self.final_chunk()]


def _counted(size: int, piece: bytes, plan: RetryPlan) -> int:
    """``size`` plus the bytes of ``piece``; ``ModelResponseError`` past ``MAX_BODY_BYTES``.

    Past the deadline, ``ModelDeadlineError``: a server that trickles bytes or keep-alives cannot hold the call.
    """
    plan.check()
    size += len(piece)
    if size > MAX_BODY_BYTES:
        raise ModelResponseError(f"The model server's answer is larger than the limit of {MAX_BODY_BYTES >> 20} MiB.")
    return size


class StreamReading:
    """What one try does with a streamed answer, whatever the I/O: the same for ``run`` and ``run_async``.

    ``feed`` each piece of the body and hand the chunks it yields to the callback (a chunk counts
    as delivered once the callback returned) until ``over``; then hand on what ``end`` yields.
    """

    def __init__(self, assembly: StreamAssembly, plan: RetryPlan) -> None:
        self.assembly = assembly
        self.over = False
        self._plan = plan
        self._reader = EventReader()
        self._size = 0

    def feed(self, piece: bytes) -> Iterator[StreamingChunk]:
        """The chunks the next piece of the body completes."""
        self._size = _counted(self._size, piece, self._plan)
        chunks, self.over = self.assembly.take(self._reader.feed(piece))
        return self._delivering(chunks)

    def end(self) -> Iterator[StreamingChunk]:
        """The chunks of an event the body ended in (none once the server said the stream is over)."""
        return self._delivering([] if self.over else self.assembly.take(self._reader.close())[0])

    def _delivering(self, chunks: list[StreamingChunk]) -> Iterator[StreamingChunk]:
        for chunk in chunks:
            yield chunk
            self.assembly.delivered += 1


#: What is read after a finished stream, at most, so that its connection can serve the next request;
#: a server that keeps sending past this (keep-alive comments) is cut off. (httpx reads a body with the
#: read timeout it started with: a server that sends nothing more and keeps the connection open is cut
#: off only by that timeout.)
_DRAIN_BYTES = 64 * 1024
_DRAIN_SECONDS = 0.5


def _drain(pieces: Iterator[bytes]) -> None:
    """Read the little that follows a finished stream; leaving the response then closes its connection."""
    end, size = time.monotonic() + _DRAIN_SECONDS, 0
    try:
        for piece in pieces:
            size += len(piece)
            if size > _DRAIN_BYTES or time.monotonic() > end:
                return
    except httpx.HTTPError:
        return


async def _drain_async(pieces: AsyncIterator[bytes]) -> None:
    """Async twin of ``_drain``."""
    size = 0
    try:
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for piece in pieces:
                size += len(piece)
                if size > _DRAIN_BYTES:
                    return
    except (TimeoutError, httpx.HTTPError):
        return


# -- the client ---------------------------------------------------------------------------------------


def _number(name: str, value: Any, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a finite number of seconds, got {value!r}.")
    if value < 0 or (positive and value == 0):
        raise ConfigurationError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}.")
    return float(value)


def _names(mapping: Any) -> list[Any]:
    """The names of headers or parameters given as a mapping or as (name, value) pairs."""
    if hasattr(mapping, "keys"):
        return list(mapping.keys())
    if isinstance(mapping, (list, tuple)):
        return [pair[0] for pair in mapping if isinstance(pair, (list, tuple)) and pair]
    return []


def is_credential_name(name: str | bytes) -> bool:
    """Whether a header, parameter or keyword named ``name`` carries a credential."""
    text = name.decode("latin-1") if isinstance(name, bytes) else name
    lowered = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text).lower()  # apiKey reads as api_key
    if lowered in _CREDENTIAL_NAMES:
        return True
    parts = [part for part in re.split(r"[^a-z0-9]+", lowered) if part]
    return any(
        part in _CREDENTIAL_WORDS or (part == "key" and index and parts[index - 1] in _KEY_QUALIFIERS)
        for index, part in enumerate(parts)
    )


def credential_in(where: str, names: list[Any]) -> str | None:
    """The first of ``names`` (header, parameter or keyword names) that carries a credential."""
    for name in names:
        if isinstance(name, (str, bytes)) and is_credential_name(name):
            return f"{where}[{name!r}]"
    return None


def _query_names(url: str) -> list[str]:
    return [name for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)]


class HTTPChatGenerator:
    """A model client over httpx; subclasses give the URL, the headers, the request and how to read replies.

    Times are in seconds: ``timeout`` bounds each wait for the server (a read, a write, a connection
    from the pool), ``connect_timeout`` a new connection, and ``deadline`` the whole call, retries
    and the waits between them included, streamed or not (a server that trickles bytes or sends
    only keep-alive comments cannot hold a run longer). ``max_retries`` is the number of tries
    after the first; ``backoff_base`` the first backoff delay (doubled at each try, with jitter, at
    most ``max_backoff``); a ``Retry-After`` longer than the time left ends the call at once.
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
        *,
        max_backoff: float = 30.0,
        connect_timeout: float = 10.0,
        deadline: float = 600.0,
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"max_retries must be an int >= 0, got {max_retries!r}.")
        self.model = model or self.default_model
        self.api_key = api_key if api_key is not None else Secret.from_env_var(self.api_key_env_var)
        self.api_base_url = (api_base_url or self.default_base_url).rstrip("/")
        self.generation_kwargs = dict(generation_kwargs or {})
        self.timeout = _number("timeout", timeout, positive=True)
        self.max_retries = max_retries
        self.http_client_kwargs = dict(http_client_kwargs or {})
        self.backoff_base = _number("backoff_base", backoff_base, positive=False)
        self.max_backoff = _number("max_backoff", max_backoff, positive=False)
        self.connect_timeout = _number("connect_timeout", connect_timeout, positive=True)
        self.deadline = _number("deadline", deadline, positive=True)
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
        """The replies of a decoded (non-streamed) answer; ``ModelResponseError`` (or a lookup error) if not one."""
        raise NotImplementedError

    def assembly(self) -> StreamAssembly:
        """A new assembly for one streamed answer."""
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------------------

    def _client_options(self) -> dict[str, Any]:
        # The user's headers go along with the API's; the API's (the key among them) win a clash.
        headers = httpx.Headers(self.http_client_kwargs.get("headers"))
        headers.update(self.headers(self.api_key.resolve_value()))
        return {
            "timeout": httpx.Timeout(self.timeout, connect=self.connect_timeout),
            **self.http_client_kwargs,
            "headers": headers,
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

    # -- what one try does, whatever the I/O ----------------------------------------------------------

    def _plan(self) -> RetryPlan:
        """The retry plan of one call, its deadline starting now."""
        return RetryPlan(
            deadline=self.deadline,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            max_backoff=self.max_backoff,
        )

    def _answer(self, response: httpx.Response, body: bytes) -> dict[str, list[ChatMessage]]:
        """The replies of a whole (non-streamed) answer, or the typed error of a failed one."""
        if response.status_code >= 400:
            raise http_error(response.status_code, body.decode(errors="replace"), response.headers.get("retry-after"))
        data = decode_json(body, "an answer")
        try:
            replies = self.replies(data)
        except ANSWER_ERRORS as exc:
            raise ModelResponseError(f"The model server's answer is not a reply ({exc!r}): {body[:200]!r}") from None
        if not replies:
            raise ModelResponseError("The model server answered with no reply.")
        return {"replies": replies}

    def _url(self) -> str:
        return f"{self.api_base_url}{self.path}"

    # -- sync ---------------------------------------------------------------------------------------------

    def _try(
        self, payload: dict[str, Any], callback: StreamingCallback | None, plan: RetryPlan
    ) -> dict[str, list[ChatMessage]]:
        assert self._client is not None
        stream = StreamReading(self.assembly(), plan)
        try:
            with self._client.stream("POST", self._url(), json=payload, timeout=plan.timeouts()) as response:
                pieces = response.iter_bytes()
                if callback is None or response.status_code >= 400:
                    parts: list[bytes] = []
                    size = 0
                    for piece in pieces:
                        size = _counted(size, piece, plan)
                        parts.append(piece)
                    return self._answer(response, b"".join(parts))
                for piece in pieces:
                    for chunk in stream.feed(piece):
                        callback(chunk)
                    if stream.over:
                        break
                for chunk in stream.end():
                    callback(chunk)
                message, closing = stream.assembly.closing_chunks()
                _drain(pieces)
                for chunk in closing:
                    callback(chunk)
                return {"replies": [message]}
        except httpx.HTTPError as exc:
            raise plan.broken(exc, stream.assembly.delivered) from exc

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Ask the model for its reply (streamed to ``streaming_callback`` when given)."""
        self.warm_up()
        plan = self._plan()
        payload = self.payload(messages, tools, streaming_callback is not None, **kwargs)
        return retry(plan, lambda: self._try(payload, streaming_callback, plan))

    # -- async --------------------------------------------------------------------------------------------

    async def _try_async(
        self, payload: dict[str, Any], callback: StreamingCallback | None, plan: RetryPlan
    ) -> dict[str, list[ChatMessage]]:
        if self._async_client is None:
            self._async_client = httpx.AsyncClient(**self._client_options())
        stream = StreamReading(self.assembly(), plan)
        try:
            async with self._async_client.stream(
                "POST", self._url(), json=payload, timeout=plan.timeouts()
            ) as response:
                pieces = response.aiter_bytes()
                if callback is None or response.status_code >= 400:
                    parts: list[bytes] = []
                    size = 0
                    async for piece in pieces:
                        size = _counted(size, piece, plan)
                        parts.append(piece)
                    return self._answer(response, b"".join(parts))
                async for piece in pieces:
                    for chunk in stream.feed(piece):
                        await _called(callback, chunk)
                    if stream.over:
                        break
                for chunk in stream.end():
                    await _called(callback, chunk)
                message, closing = stream.assembly.closing_chunks()
                await _drain_async(pieces)
                for chunk in closing:
                    await _called(callback, chunk)
                return {"replies": [message]}
        except httpx.HTTPError as exc:
            raise plan.broken(exc, stream.assembly.delivered) from exc

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Async twin of ``run``; the streaming callback may be async. Cancelling closes the stream."""
        plan = self._plan()
        payload = self.payload(messages, tools, streaming_callback is not None, **kwargs)
        return await retry_async(plan, lambda: self._try_async(payload, streaming_callback, plan))

    # -- serialization ----------------------------------------------------------------------------------

    def _refuse_credentials(self) -> None:
        """Refuse to write a credential given anywhere but ``api_key`` (``to_dict`` would store it in clear)."""
        kwargs = self.http_client_kwargs
        urls = {
            "api_base_url": self.api_base_url,
            "http_client_kwargs['base_url']": kwargs.get("base_url"),
            "http_client_kwargs['proxy']": kwargs.get("proxy"),
        }
        found = (
            credential_in("http_client_kwargs['headers']", _names(kwargs.get("headers")))
            or credential_in("http_client_kwargs['params']", _names(kwargs.get("params")))
            or credential_in("generation_kwargs", list(self.generation_kwargs))
            or next((f"http_client_kwargs[{name!r}]" for name in ("auth", "cookies") if kwargs.get(name)), None)
        )
        for where, url in urls.items():
            if found is None and isinstance(url, str):
                if urlsplit(url).username or urlsplit(url).password:
                    found = f"{where} (a user name or password in the URL)"
                else:
                    found = credential_in(f"the query of {where}", _query_names(url))
        if found is not None:
            raise SerializationError(
                f"{found} holds a credential, which to_dict would write in clear. Give the key as "
                f"api_key=Secret.from_env_var('YOUR_KEY_VARIABLE') (agentfsm.secrets.Secret: only the variable's "
                "name is stored, and the client sends the key in the API's own header)."
            )

    def to_dict(self) -> dict[str, Any]:
        """Serialize the settings; the API key as the name of its environment variable, never its value.

        Raises:
            SerializationError: a credential is in ``http_client_kwargs`` (headers such as
                ``Authorization``, ``x-api-key`` or cookies; ``auth``) or in the base URL.
        """
        self._refuse_credentials()
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
                "max_backoff": self.max_backoff,
                "connect_timeout": self.connect_timeout,
                "deadline": self.deadline,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Invert ``to_dict``; what the data may choose is limited, as the data may not be trusted.

        Raises:
            DeserializationError: ``data`` is not a serialized client; its key names an environment
                variable that is neither this client's own nor allowed (``agentfsm.secrets.allow_env_vars``);
                it points the client at a server that is neither its API's, loopback nor allowed
                (``agentfsm.secrets.allow_endpoints``);
                or its ``http_client_kwargs`` change where or how securely the key is sent.
        """
        body = data.get("data") if isinstance(data, dict) else None
        if not isinstance(body, dict):
            raise DeserializationError(
                f"{cls.__name__}.from_dict needs {{'type': ..., 'data': {{...}}}} as to_dict writes, "
                f"got {type(data).__name__}."
            )
        unknown = sorted(set(body) - _SERIALIZED_FIELDS)
        if unknown:
            raise DeserializationError(f"{cls.__name__}.from_dict got unknown fields {unknown}.")
        body = dict(body)
        url = body.get("api_base_url") or cls.default_base_url
        if not isinstance(url, str) or not endpoint_allowed(url, cls.default_base_url):
            raise DeserializationError(
                f"The data points {cls.__name__} at {url!r}, where it would send its API key: a client read "
                f"back from data sends it only to {cls.default_base_url}, a loopback address or a server you "
                f"allow, with agentfsm.secrets.allow_endpoints({url!r}) or {ENV_ALLOWED_ENDPOINTS}={url}."
            )
        if "api_key" in body:
            body["api_key"] = Secret.from_dict(body["api_key"], also_allowed=[cls.api_key_env_var])
        kwargs = body.get("http_client_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise DeserializationError(f"http_client_kwargs must be a dict, got {type(kwargs).__name__}.")
        refused = sorted(set(kwargs) - _KWARGS_FROM_DATA)
        if refused:
            raise DeserializationError(
                f"http_client_kwargs {refused} cannot be read from data: they change where or how securely the "
                f"API key is sent. Data may set only {sorted(_KWARGS_FROM_DATA)}; give the others in code "
                f"({cls.__name__}(http_client_kwargs=...))."
            )
        return cls(**body)
