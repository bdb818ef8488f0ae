"""The e2e in-process stack (gateway, runner, executor, fake LLM) for the context/usage tests."""

from tests.helpers.stack import bare_stack, fake_llm, stack  # noqa: F401  (fixtures)
