"""Entrypoint: `python -m zcbot_executor` or `zcbot executor` (configured by env, see config.py)."""

from __future__ import annotations

from zcbot_core.config import ConfigError, load_settings
from zcbot_core.service import main_entry, run_service
from zcbot_executor.config import ExecutorSettings
from zcbot_executor.service import ExecutorService


def main() -> None:
    try:
        settings = load_settings(ExecutorSettings)  # every knob validated before anything starts
    except ConfigError as exc:
        raise SystemExit(f"zcbot executor: {exc}") from None
    main_entry(lambda: run_service("executor", settings, lambda: ExecutorService(settings),
                                   port=settings.zcbot_executor_port, use_db=False, needs_secrets=False))


if __name__ == "__main__":
    main()
