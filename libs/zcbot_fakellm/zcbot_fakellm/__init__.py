"""A fake OpenAI-compatible chat-completions server for tests and benchmarks.

Why it exists: mocking ``litellm.acompletion`` skips the code that actually breaks in
production (SSE parsing, tool-call delta assembly, usage accounting, error mapping,
cancellation of in-flight HTTP requests).  Pointing the *real* LiteLLM at this server via
``api_base`` exercises all of it while staying deterministic and offline.

Why a hand-written HTTP/1.1 server instead of uvicorn: it has to run inside whatever event
loop a test already owns (``await fake.start()``), start in milliseconds, hold ~1000 idle
streaming connections cheaply for benchmarks, and notice client disconnects immediately
(so ``hang``/``first_delay`` responses never leak).  asyncio streams give all of that in a
few hundred lines with no extra dependencies.  Only what LLM clients use is implemented:
keep-alive, ``Content-Length`` or chunked request bodies, chunked/SSE responses.  A connection's
requests are read by one task that runs ahead of the responses (so it also notices the client
leaving, and a request sent the instant a response ends is never cut); requests pipelined behind
an unfinished response are answered in order.

Scripting is stateless and keyed by content so that many concurrent conversations (and
several processes) can share one server: a script is chosen by a key string found in the
last user message that contains any key, and the turn within it by how many assistant
messages follow that user message in the request.  See :class:`FakeLLM` for the turn format.

Modules: `server` (FakeLLM: routes, scripting, connections), `script` (turns: validation,
selection, what to send), `replies` (the chat-completion bodies and streams), `http1` (the HTTP/1.1
plumbing), `wire` (strict checks and tool-call stream shapes), `control` (scripting a fake in
another process), `__main__` (the standalone process).

Installed by zcbot's `test` extra (libs/zcbot_fakellm), never by the product install.

Standalone::

    python -m zcbot_fakellm --port 0 [--host 127.0.0.1] \
        [--default-chunks 30 --default-chunk-delay 0.0333]

prints ``READY <port>`` once listening; scripts are then pushed with :func:`push_script`.
"""

from zcbot_fakellm.control import clear_scripts, get_requests, push_script
from zcbot_fakellm.script import EXHAUSTED_TEXT, Turn, message_text, split_text, validate_turns
from zcbot_fakellm.server import FakeLLM

__all__ = [
    "EXHAUSTED_TEXT",
    "FakeLLM",
    "Turn",
    "clear_scripts",
    "get_requests",
    "message_text",
    "push_script",
    "split_text",
    "validate_turns",
]
