"""`settle_heap`: a service's own process tunes its GC once started; a host process (the tests,
which start services in-process) keeps its own settings."""

from __future__ import annotations

import gc
import subprocess
import sys

from zcbot_core.platform.service import GC_THRESHOLDS, settle_heap


def test_in_process_services_leave_the_host_gc_alone() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    settle_heap()
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_a_service_process_freezes_its_startup_heap_and_collects_rarely() -> None:
    code = ("import gc; from zcbot_core.platform.service import own_process_heap, settle_heap; "
            "own_process_heap(); settle_heap(); print(gc.get_threshold(), gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split(")")[0] + ")" == str(GC_THRESHOLDS) and out.strip().endswith("True")
