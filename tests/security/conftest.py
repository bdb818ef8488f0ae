"""Shared fixtures of the security suite (append; other parts of the suite add theirs here)."""

from tests.e2e.conftest import bare_stack, fake_llm, stack  # noqa: F401  (fixtures: the real in-process stack)
