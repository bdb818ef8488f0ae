"""End-to-end fixtures: the in-process stack of tests/helpers/stack.py."""

from tests.helpers.stack import bare_stack, fake_llm, module_stack, shared_stack, stack  # noqa: F401  (fixtures)
