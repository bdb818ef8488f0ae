"""LiteLLM's tokenizers, kept unloaded: the streamed calls we make never need them (issue 28).

Two tokenizers, ~100 MiB of the runner's PSS (198 -> 95 MiB idle), none of them needed: usage comes
from the provider's own usage field (`stream_options.include_usage`).
- the provider's own tokenizer (DeepSeek's HuggingFace tokenizer, tiktoken o200k for OpenAI models):
  after `acompletion` returns the stream, LiteLLM prices the stream object (`update_response_metadata`
  -> `response_cost_calculator` -> `completion_cost`), which has no usage yet, so it counts the
  request's tokens with the model's tokenizer. `litellm.disable_token_counter` (a supported setting,
  BerriAI/litellm#11344) makes `token_counter` answer 0 without loading any tokenizer; our own cost
  is computed from the provider's usage (`client.compute_cost`), the rare usage-less stream is
  estimated with `agent.tokens`.
- tiktoken's cl100k: `litellm.main` hands `encoding=_get_encoding()` to the provider handler on every
  call, which loads cl100k on the first; a streamed OpenAI-compatible call never uses it (only the
  non-streamed response transformations count with it). `defer_default_encoding` puts a lazy stand-in
  where LiteLLM keeps its default encoding (`litellm.main.encoding`, what `litellm.encoding` resolves
  to): the real encoding is loaded on the first attribute access, so a path that does use it gets it.
"""

from __future__ import annotations

from typing import Any

import litellm
import litellm.main


def quiet_tokenizers() -> None:
    """Both switches, once, before the first call (`llm.client` applies them when imported)."""
    litellm.disable_token_counter = True
    defer_default_encoding()


class LazyEncoding:
    """LiteLLM's default encoding (cl100k), loaded when something first uses it."""

    def __init__(self) -> None:
        self._encoding: Any = None

    @property
    def loaded(self) -> bool:
        return self._encoding is not None

    def _load(self) -> Any:
        if self._encoding is None:
            from litellm._lazy_imports import get_default_encoding

            self._encoding = get_default_encoding()
        return self._encoding

    def __getattr__(self, name: str) -> Any:  # only for attributes this class does not define
        return getattr(self._load(), name)


def defer_default_encoding() -> LazyEncoding | None:
    """Install the lazy stand-in, unless LiteLLM's encoding is already loaded (then it stays: the
    memory is spent). Returns what is installed, None when LiteLLM keeps its own."""
    current = vars(litellm.main).get("encoding")
    if isinstance(current, LazyEncoding):
        return current
    if current is not None:
        return None
    lazy = LazyEncoding()
    litellm.main.encoding = lazy  # type: ignore[attr-defined]  # what litellm.main.__getattr__ would cache
    return lazy
