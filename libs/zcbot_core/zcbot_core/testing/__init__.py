"""Test and benchmark helpers shipped with zcbot_core.

Lives inside the package (not under tests/) so that benchmarks and services started as
separate processes can import it, e.g. ``python -m zcbot_core.testing.fake_llm``.
"""
