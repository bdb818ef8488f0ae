"""Plain helper modules for the tests (importable as `helpers.*`; tests/ is on sys.path via the root conftest)."""
