"""Issue 36: the process sweeper decides from the executor's private record, never from the sandbox's
files. A background process writes a backdated `exit_code` into its own proc folder (its user's
writable tree) and stops its wrapper; the sweeper used to take the file at its word and delete the
executor's private record of the live process, so after an executor restart nothing enforced its
time limit, a kill or the per-user cap."""

from __future__ import annotations

import asyncio
import json
import secrets
import time

from tests.helpers.executor_stack import Stack as ExecutorStack
from tests.helpers.executor_stack import wait_no_processes, wait_processes, wait_status
from tests.helpers.wait import wait_for
from zcbot_executor.background.sweep import sweep_procs

RUN = f"{secrets.randbelow(10**6):06d}"
MONTH_AGO = int(time.time()) - 30 * 86400
# Every proc folder of the user claims to have ended a month ago; then the wrapper is frozen.
BACKDATE = ("sleep 0.3; for p in /workspace/.zcbot_procs/*/*/; do echo 0 > ${{p}}exit_code; "
            "echo '{{\"reason\": \"exited\"}}' > ${{p}}end.json; touch -d @" + str(MONTH_AGO) + " ${{p}}exit_code; "
            "done; kill -STOP $PPID; exec sleep {n}")


def _n(base: int) -> str:
    return f"{base}.{RUN}"


async def test_backdated_exit_code_does_not_remove_the_record_of_a_live_process(exec_stack: ExecutorStack) -> None:
    svc = await exec_stack.executor("h1", sweep_interval_seconds=0.2)  # the real sweep loop, 5 times a second
    r = await exec_stack.call("shell", {"command": BACKDATE.format(n=_n(4260)), "background": True, "timeout": 8})
    assert r.ok, r.error
    proc_id = r.meta["proc_id"]
    record = svc.procs.private_dir / f"{proc_id}.json"
    folder = next((exec_stack.storage / "u1" / ".zcbot_procs").glob(f"*/{proc_id}"))
    await wait_processes(lambda c: c == f"sleep {_n(4260)}")
    await wait_for(lambda: (folder / "exit_code").exists() and (folder / "exit_code").stat().st_mtime < MONTH_AGO + 5,
                   timeout=5, what="the sandbox did not write its backdated exit_code")
    await asyncio.sleep(1.0)  # several sweeps
    assert record.exists(), "the sweep deleted the private record of a live process"
    assert folder.is_dir(), "the sweep deleted the folder of a live process"
    assert sweep_procs(exec_stack.storage, 7 * 86400, svc.procs.watch) == 0
    assert json.loads(record.read_text()).get("ended_at") is None
    # A restart: the fresh executor reloads the record and still enforces the time limit from outside
    # (the wrapper is frozen, its files say "exited").
    await exec_stack.crash(svc)
    again = await exec_stack.executor("h1", sweep_interval_seconds=0.2)
    await wait_for(lambda: proc_id in again.procs.watch.entries, timeout=10,  # its watch loop reads the records
                   what="the restarted executor did not adopt the live process")
    assert await wait_no_processes(lambda c: c == f"sleep {_n(4260)}", timeout=15) == []
    status = await wait_status(exec_stack, proc_id, {"timed out"}, timeout=5)
    assert status.meta["exit_code"] == 124, status.output
    # Dead now: the sweep stamps the end in the record; the record goes only after the retention.
    await wait_for(lambda: record.exists() and json.loads(record.read_text()).get("ended_at") is not None,
                   timeout=5, what="the sweep did not stamp the end of the dead process")
    assert folder.is_dir() and record.exists()
    stamped = json.loads(record.read_text())
    stamped["ended_at"] = time.time() - 8 * 86400  # as if a week had passed (the record is host state)
    record.write_text(json.dumps(stamped))
    await wait_for(lambda: not record.exists() and not folder.exists(), timeout=5,
                   what="the sweep kept an ended process past the retention")


async def test_backdated_exit_code_does_not_free_a_cap_slot_after_a_restart(exec_stack: ExecutorStack) -> None:
    svc = await exec_stack.executor("h1", sweep_interval_seconds=0.2, max_bg_procs=1)
    r = await exec_stack.call("shell", {"command": BACKDATE.format(n=_n(4261)), "background": True})
    assert r.ok, r.error
    await wait_processes(lambda c: c == f"sleep {_n(4261)}")
    await asyncio.sleep(1.5)  # the backdated file is written, and several sweeps have run
    await exec_stack.crash(svc)
    again = await exec_stack.executor("h1", sweep_interval_seconds=0.2, max_bg_procs=1)
    try:
        r = await exec_stack.call("shell", {"command": "true", "background": True})
        assert not r.ok and "too many background processes" in r.error, r
    finally:
        await again.procs.stop_task("u1", "t1", "test cleanup")
    assert await wait_no_processes(lambda c: c == f"sleep {_n(4261)}", timeout=5) == []
