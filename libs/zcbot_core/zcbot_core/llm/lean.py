"""LiteLLM's parsed provider stream, read without LiteLLM's stream wrapper where nothing needs the wrapper.

`litellm.acompletion(stream=True)` does the request (provider routing, request transformation, auth,
HTTP errors mapped to LiteLLM's exceptions) and returns a `CustomStreamWrapper` around the provider's
chunk iterator. For OpenAI-compatible providers (OpenAI, DeepSeek, local servers) that iterator is
LiteLLM's own chunk parser and already yields OpenAI-shaped `ModelResponseStream` chunks. The wrapper
then rebuilds every chunk (~140 µs of CPU each here), and after the last one rebuilds the whole response,
deep-copies it and prices it twice for logging callbacks (~3 ms per call; docs/performance.md).

The lean path reads the parser's chunks directly when (a) the iterator is LiteLLM's OpenAI chat stream
parser and (b) no LiteLLM callback is registered (a callback would otherwise miss the call). Anything
else — another provider's parser, a registered callback, a LiteLLM version whose wrapper no longer
exposes the parser — goes through the wrapper unchanged. Our `StreamAssembler` folds the chunks, and the
client prices the usage itself, so nothing the wrapper computed is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import litellm
from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
from litellm.llms.openai.chat.gpt_transformation import OpenAIChatCompletionStreamingHandler
from litellm.types.utils import ModelResponseStream

from zcbot_core.errors import ZcbotError

_CALLBACK_LISTS = ("callbacks", "success_callback", "_async_success_callback", "failure_callback",
                   "_async_failure_callback", "input_callback", "service_callback")


class ProviderStreamError(ZcbotError):
    """The provider's stream failed after it started (a dropped connection, a timeout, an error object or
    an unparsable line inside the stream); the message says which."""

    code = "provider_stream"
    http_status = 502


def callbacks_registered() -> bool:
    return any(getattr(litellm, name, None) for name in _CALLBACK_LISTS)


def parsed_stream(response: Any) -> Any | None:
    """The provider's parsed chunk iterator inside `response`, when it can be read without the wrapper."""
    if not isinstance(response, CustomStreamWrapper) or callbacks_registered():
        return None
    stream = getattr(response, "completion_stream", None)
    return stream if isinstance(stream, OpenAIChatCompletionStreamingHandler) else None


async def lean_chunks(stream: Any) -> AsyncIterator[ModelResponseStream]:
    """The parser's OpenAI-shaped chunks; its end-of-stream marker (a plain dict) is dropped.

    A failure while reading raises `ProviderStreamError`, as the wrapper would have turned it into one of
    LiteLLM's exceptions; what the caller does with each chunk is outside this try. So does a stream that
    ends with neither a finish_reason nor `[DONE]` (a connection closed mid-answer), as the wrapper does:
    a cut-off answer must not pass for a complete one.
    """
    iterator = stream.__aiter__()
    finished = False
    while True:
        try:
            chunk = await iterator.__anext__()
        except StopAsyncIteration:
            if not finished:
                raise ProviderStreamError("the model's stream ended before the answer was finished "
                                          "(no finish_reason, no [DONE])") from None
            return
        except asyncio.CancelledError:
            raise
        except httpx.TimeoutException as exc:
            raise ProviderStreamError(f"the model's stream timed out ({exc.__class__.__name__})") from exc
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            who = f"HTTP {status} " if isinstance(status, int) else ""
            raise ProviderStreamError(f"{who}{exc.__class__.__name__}: {exc}") from exc
        if isinstance(chunk, ModelResponseStream):
            finished = finished or any(choice.finish_reason for choice in chunk.choices)
            yield chunk
        elif isinstance(chunk, dict) and chunk.get("is_finished"):
            finished = True  # the parser's [DONE] marker


class StreamWatch:
    """What LiteLLM's OpenAI-compatible parser would lose, read from the raw chunks before it parses them.

    - `finish_reason`: the provider's own value. LiteLLM maps every finish reason it does not know to
      "stop" (DeepSeek's `insufficient_system_resource`, OpenRouter's mid-stream `error`), which would
      make a cut-off answer pass for a complete one.
    - An error object in vLLM's older shape (`{"object": "error", "message": ...}` at the top level,
      without an `error` key) would parse as an empty chunk, and the stream would end as a success;
      it is handed to the parser in the `{"error": {...}}` shape it raises on.

    `watch` wraps the parser of one response (the same object on the lean path and inside LiteLLM's
    wrapper, so both paths see it); other providers' parsers are left alone.
    """

    def __init__(self) -> None:
        self.finish_reason: str | None = None

    @classmethod
    def watch(cls, response: Any) -> StreamWatch:
        watch = cls()
        stream = getattr(response, "completion_stream", None)
        if isinstance(stream, OpenAIChatCompletionStreamingHandler):
            parse = stream.chunk_parser

            def chunk_parser(chunk: dict[str, Any]) -> Any:
                if isinstance(chunk, dict):
                    if chunk.get("object") == "error" and "error" not in chunk:
                        chunk = {"error": {k: v for k, v in chunk.items() if k != "object"}}
                    for choice in chunk.get("choices") or ():
                        if isinstance(choice, dict) and choice.get("finish_reason"):
                            watch.finish_reason = str(choice["finish_reason"])
                return parse(chunk)

            stream.chunk_parser = chunk_parser  # this response's parser only
        return watch


async def close(response: Any) -> None:
    """Release the HTTP stream without running the wrapper's end-of-stream rebuild and logging."""
    await response.aclose()
