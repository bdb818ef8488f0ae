"""The e2e in-process stack (gateway, runner, executor, fake LLM) for the context/usage tests."""

from tests.e2e.conftest import bare_stack, fake_llm, stack  # noqa: F401  (fixtures)
