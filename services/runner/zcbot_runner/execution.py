"""One run, from a JetStream delivery to its terminal state (DESIGN §4)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg

from zcbot_core.accounts import budgets
from zcbot_core.agent.cancel import CancelToken, RunCancelled
from zcbot_core.agent.context import MessagePreparer
from zcbot_core.agent.fold import prepare_run_context
from zcbot_core.agent.lang import say, stop_text, user_language
from zcbot_core.agent.loop import AgentLoop, LoopResult
from zcbot_core.agent.prompt import PromptContext, build_system_prompt
from zcbot_core.bus import BusDecodeError, CancelRequest, RunRequest, decode
from zcbot_core.bus import events as ev
from zcbot_core.bus.deliveries import keep_in_progress
from zcbot_core.bus.topology import kv_bucket
from zcbot_core.db.outage import is_db_outage
from zcbot_core.llm.profiles import get_profile
from zcbot_core.platform.config import ConfigError
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate.claim import Claim, claim_run
from zcbot_core.runstate.status import RunOutcome
from zcbot_core.runstate.transitions import continue_after_end, end_run
from zcbot_runner import file_events, metrics
from zcbot_runner.budget import RunBudget
from zcbot_runner.config import RunnerSettings
from zcbot_runner.host_tools import ModelSwitcher
from zcbot_runner.sink import BusEventSink
from zcbot_runner.stale import answer_ended_run, is_redelivery
from zcbot_runner.store import DbStepStore, RunSuperseded
from zcbot_runner.takeover import SUPERSEDED, announce_takeover, is_takeover_of_other, watch_ownership
from zcbot_runner.toolbox import RunnerToolBox

log = logging.getLogger(__name__)


@dataclass
class ActiveRun:
    run_id: str
    task_id: str
    token: CancelToken
    msg: Msg
    started: float = field(default_factory=time.monotonic)
    sink: BusEventSink | None = None

    def supersede(self) -> None:
        """Another runner took the run over: nothing more of this execution reaches the stream."""
        if self.sink is not None:
            self.sink.discard()
        self.token.cancel(SUPERSEDED)


class RunExecutor:
    def __init__(self, rt: Runtime, settings: RunnerSettings, runner_id: str, executor_client: Any,
                 sandbox_schemas: list[dict[str, Any]], extend_toolbox: Any = None) -> None:
        self.rt = rt
        self.settings = settings  # the runner's own knobs (the shared ones: rt.settings, the same values)
        self.runner_id = runner_id
        self.executor_client = executor_client
        self.sandbox_schemas = sandbox_schemas
        self.extend_toolbox = extend_toolbox
        self.active: dict[str, ActiveRun] = {}

    # ---- cancel ----------------------------------------------------------------------------
    def on_cancel(self, req: CancelRequest) -> None:
        active = self.active.get(req.task_id)
        if active is None or active.run_id != req.run_id:
            return
        takeover = is_takeover_of_other(req, self.runner_id)
        if takeover is None:
            active.token.cancel(req.reason)
        elif takeover:
            log.warning("run taken over by another runner; stopping this execution",
                        extra={"task_id": req.task_id, "run_id": req.run_id, "new_owner": req.owner})
            active.supersede()

    async def _pending_cancel(self, task_id: str, run_id: str) -> str | None:
        try:
            kv = await kv_bucket(self.rt.js, self.rt.topo.cancel_bucket)
            entry = await kv.get(self.rt.topo.kv_key(task_id))
        except Exception:
            return None
        if entry is None or entry.value is None:
            return None
        try:
            req = decode(entry.value, CancelRequest)
        except BusDecodeError:
            return None
        return req.reason if req.run_id == run_id else None

    # ---- run -------------------------------------------------------------------------------
    async def handle(self, msg: Msg) -> None:
        try:
            req = decode(msg.data, RunRequest)
        except BusDecodeError as exc:
            log.warning("dropping undecodable run request", extra={"error": str(exc)})
            await msg.term()
            return
        current = self.active.get(req.task_id)
        if current is not None and current.run_id == req.run_id:
            # A redelivery of a run this runner is executing (its heartbeats were lost, e.g. while NATS
            # restarted): one execution only. Later heartbeats and the final ack use the new delivery.
            current.msg = msg
            log.info("redelivery of a run in progress here; keeping the running execution",
                     extra={"task_id": req.task_id, "run_id": req.run_id})
            return
        token = CancelToken()
        active = ActiveRun(run_id=req.run_id, task_id=req.task_id, token=token, msg=msg)
        self.active[req.task_id] = active  # before the claim, so a concurrent redelivery sees it
        # Beats from receipt, not from the claim: on a loaded runner the claim can wait for a pooled
        # connection past ack_wait, and JetStream would hand the run to another runner meanwhile.
        heartbeat = asyncio.create_task(self._heartbeat(active))
        watch: asyncio.Task[None] | None = None
        try:
            claim = await claim_run(self.rt.autocommit, req, self.runner_id)
            if claim is not None:
                if claim.prior_owner not in (None, self.runner_id):  # a redelivery took it from a live runner?
                    await announce_takeover(self.rt, req, self.runner_id)
                watch = asyncio.create_task(watch_ownership(
                    self.rt, req.task_id, req.run_id, self.runner_id, active.supersede,
                    interval=max(self.rt.settings.zcbot_ack_wait_seconds / 3, 1.0)))
                await self._run(req, claim, active)
        finally:
            heartbeat.cancel()
            if watch is not None:
                watch.cancel()
            self._forget(active)
        if claim is None:  # a stale or duplicate delivery of a run that is over
            if is_redelivery(msg):  # its runner may have died between the run's end and its `done`
                await answer_ended_run(self.rt, req)
            await msg.ack()

    def _forget(self, active: ActiveRun) -> None:
        if self.active.get(active.task_id) is active:
            self.active.pop(active.task_id, None)

    def _heartbeat(self, active: ActiveRun) -> Any:
        interval = max(self.rt.settings.zcbot_ack_wait_seconds / 3, 0.5)
        return keep_in_progress(lambda: active.msg, interval)  # a redelivery here replaces active.msg

    async def _run(self, req: RunRequest, claim: Claim, active: ActiveRun) -> None:
        settings = self.rt.settings
        task = claim.task
        attempt = int(active.msg.metadata.num_delivered) if active.msg.metadata else 1
        queue_wait = max(time.time() - req.enqueued_at, 0.0)
        if attempt == 1:
            metrics.QUEUE_WAIT.observe(queue_wait)
        metrics.RUNS_STARTED.inc()
        sink = BusEventSink(self.rt.js, self.rt.topo, task.task_id, req.run_id, attempt=attempt,
                            retry_seconds=self.settings.zcbot_event_publish_retry_seconds,
                            events_from=task.run_events_from)
        active.sink = sink
        # A cancel requested before the claim left the run `cancelling` (every cancel commits that before
        # it signals): only then is its reason read from KV. One requested after the claim reaches
        # `on_cancel` (the run is in `self.active` since before the claim).
        if claim.cancelling:
            active.token.cancel(await self._pending_cancel(req.task_id, req.run_id) or "user")
        wall_clock = float(getattr(task, "wall_clock_seconds", None) or settings.zcbot_run_wall_clock_seconds)
        wall = asyncio.get_running_loop().call_later(wall_clock, active.token.cancel, "wall_clock")
        result: LoopResult
        store: DbStepStore | None = None
        budget: RunBudget | None = None
        profile_name = task.model_profile or settings.zcbot_default_model
        try:
            await sink.emit(ev.RunStart(run_id=req.run_id, task_id=task.task_id, model_profile=profile_name, attempt=attempt))
            try:
                profile = get_profile(settings, profile_name)
            except ConfigError as exc:
                await sink.emit(ev.ErrorEvent(run_id=req.run_id, msg=str(exc), code="config"))
                result = LoopResult(status=RunOutcome.ERROR.value, error=str(exc))
            else:
                loop = await self._build_loop(req, task, profile, sink, active.token)
                store, budget = loop.store, loop.budget
                if budget is not None:
                    budget.prime(bool(getattr(task, "user_has_own_limit", True)))
                history = claim.history
                try:  # threshold fold (the claim applied the soft reset), then the window as the model will see it
                    history = await active.token.race(prepare_run_context(
                        self.rt.sessions, task.task_id, profile, sink.emit,
                        system_prompt=loop.system_prompt, tools=loop.tools.schemas() or None, run_id=req.run_id,
                        current=claim.history, budget=budget))
                except RunCancelled:
                    pass  # the loop sees the token and ends the run as cancelled
                setup = time.monotonic() - active.started
                result = await loop.run(history)
                result.timings["setup"] = round(setup, 4)
        except RunSuperseded:
            # Another runner holds the run now (it was redelivered there): leave it alone entirely;
            # acking this stale delivery would drop the request the other runner is working on.
            active.supersede()
            log.warning("run superseded by another runner; stopping this execution",
                        extra={"task_id": task.task_id, "run_id": req.run_id})
            return
        except Exception as exc:  # a bug: the run must still end, never stay `running`
            if is_db_outage(exc):
                await self._leave_for_redelivery(req, sink, exc, user_language(claim.history))
                return
            log.exception("run crashed", extra={"task_id": task.task_id, "run_id": req.run_id})
            await sink.emit(ev.ErrorEvent(run_id=req.run_id, msg=f"internal error: {exc.__class__.__name__}", code="internal"))
            result = LoopResult(status=RunOutcome.ERROR.value, error=f"internal error: {exc.__class__.__name__}")
        finally:
            wall.cancel()
        if result.status == RunOutcome.CANCELLED and active.token.reason == SUPERSEDED:
            return  # taken over (the takeover message or the ownership check): neither ack nor nak
        if result.status == RunOutcome.CANCELLED and active.token.reason == "shutdown":
            await sink.flush()
            await active.msg.nak()  # hand the run back: another runner resumes it from PostgreSQL
            log.info("run handed back", extra={"task_id": task.task_id, "run_id": req.run_id})
            return
        if result.status == RunOutcome.CANCELLED and active.token.reason in ("wall_clock", "timeout"):
            if active.token.reason == "wall_clock":
                # A backstop, not a judgement: the guards stop runs that stall; say how to go on.
                message = stop_text("wall_clock_stop", user_language(claim.history),
                                    seconds=int(wall_clock))
            else:
                message = "the run exceeded its scheduled job's timeout and was stopped"
            await sink.emit(ev.ErrorEvent(run_id=req.run_id, msg=message, code="timeout"))
            result = LoopResult(status=RunOutcome.ERROR.value, error=message, timings=result.timings)
        timings = {**result.timings, "queue_wait": round(queue_wait, 4),
                   "total": round(time.monotonic() - active.started, 4)}
        finish_started = time.monotonic()
        try:
            result = await self._events_stored(req, result, sink, user_language(claim.history))
            # No execution before this one (nobody owned the run) and no tool call in it: no file changed.
            files_possible = claim.prior_owner is not None or attempt > 1 or timings.get("tool_calls", 1) != 0
            finished = await self._finish(req, result, timings, sink, store, files_possible,
                                          cancel_seen=claim.cancelling or active.token.cancelled)
            if budget is not None:  # the last step is stored now: its reservation goes
                await budget.close()
        except Exception as exc:
            if not is_db_outage(exc):
                raise
            await self._leave_for_redelivery(req, sink, exc, user_language(claim.history))
            return
        if not finished:
            log.warning("run superseded by another runner at its end; not finishing it here",
                        extra={"task_id": task.task_id, "run_id": req.run_id})
            return
        metrics.FINISH_SECONDS.observe(time.monotonic() - finish_started)
        await active.msg.ack()

    async def _events_stored(self, req: RunRequest, result: LoopResult, sink: BusEventSink, lang: Any) -> LoopResult:
        """Wait until the stream holds every event of the run, before its end is written to PostgreSQL
        and before `done` (a client that reloads once the run has ended then replays all of it). An
        event that could not be stored turns the run into an error that says so: never a success
        over a partial answer."""
        await sink.flush()
        if not sink.lost:
            return result
        message = say("events_lost_error", lang, count=sink.lost)
        log.warning("run events were lost; the run ends in error", extra={"run_id": req.run_id, "lost": sink.lost})
        sink.fresh_budget()
        await sink.emit(ev.ErrorEvent(run_id=req.run_id, msg=message, code="events_lost"))
        await sink.flush()
        return LoopResult(status=RunOutcome.ERROR.value, error=message, final_text=result.final_text,
                          timings=result.timings)

    async def _leave_for_redelivery(self, req: RunRequest, sink: BusEventSink, exc: BaseException, lang: Any) -> None:
        """A database outage mid-run: say so, and neither finish nor ack. The request is redelivered
        after ack_wait and resumes from the last saved step; if its deliveries run out first, the
        reaper ends it with a clear error."""
        log.warning("database unavailable mid-run; leaving the run for redelivery",
                    extra={"task_id": req.task_id, "run_id": req.run_id, "error": exc.__class__.__name__})
        # Its code tells the reaper, should the deliveries run out before the database is back, that the
        # run was lost to the outage (the user reads that, not that a runner stopped).
        await sink.emit(ev.Warn(run_id=req.run_id, msg=say("db_outage_warn", lang), code=ev.DB_UNAVAILABLE))
        await sink.flush()

    async def _build_loop(self, req: RunRequest, task: Any, profile: Any, sink: BusEventSink,
                          token: CancelToken) -> AgentLoop:
        toolbox = RunnerToolBox(executor=self.executor_client, sandbox_schemas=self.sandbox_schemas,
                                user_id=task.user_id, task_id=task.task_id, run_id=req.run_id, cwd=task.working_dir,
                                grant=req.grant)
        toolbox.record_files = file_events.recorder(self.rt.sessions, task.user_id, task.task_id, req.run_id)
        prompt_ctx = PromptContext(working_dir=task.working_dir, task_name=task.name)
        switcher = ModelSwitcher(self.rt, task.task_id, req.run_id, sink.emit)
        if self.extend_toolbox is not None:
            await self.extend_toolbox(self.rt, toolbox, task, req, prompt_ctx, switcher)
        store = DbStepStore(self.rt.sessions, task_id=task.task_id, user_id=task.user_id, run_id=req.run_id,
                            profile=profile.name, owner=self.runner_id, autocommit=self.rt.autocommit)
        loop = AgentLoop(run_id=req.run_id, profile=profile, system_prompt=build_system_prompt(prompt_ctx),
                         tools=toolbox, sink=sink, store=store, cancel=token, prepare=MessagePreparer(),
                         retry=self.settings.retry_policy(),
                         budget=RunBudget(self.rt.sessions, user_id=task.user_id, run_id=req.run_id,
                                          defaults=budgets.Defaults.from_settings(self.rt.settings)))
        switcher.loop = loop
        return loop

    async def _finish(self, req: RunRequest, result: LoopResult, timings: dict[str, float], sink: BusEventSink,
                      store: DbStepStore | None, files_possible: bool = True, cancel_seen: bool = True) -> bool:
        """End the run (`runstate.transitions.end_run`: state and the next enqueued run), then `done`;
        False when another runner holds it now. The usual case is one round trip: the run's last step
        and its end together (the store's `end_run`), or the end alone."""
        status = RunOutcome(result.status).value

        async def last_step_and_end() -> bool:
            assert store is not None
            return await store.end_run(status=status, error=result.error, timings=timings)

        try:
            outcome = await end_run(self.rt.autocommit, self.rt.sessions, self.rt.js, self.rt.topo,
                                    task_id=req.task_id, run_id=req.run_id, status=status, error=result.error,
                                    timings=timings, owner=self.runner_id,
                                    last_step_and_end=last_step_and_end if store is not None else None)
        except RunSuperseded:  # its last step could not be written: the run is another runner's now
            sink.discard()
            return False
        if outcome.superseded:
            sink.discard()
            return False
        metrics.RUNS_FINISHED.labels(status=status).inc()
        if timings.get("ttft") is not None:  # null when no token came
            metrics.TTFT.observe(timings["ttft"])
        sink.fresh_budget()
        # A file change is recorded only by a tool call of the run (or a background process one started).
        files_changed = await file_events.count(self.rt.sessions, req.run_id) if files_possible else 0
        await sink.emit(ev.Done(run_id=req.run_id, status=status, timings=timings, final_text=result.final_text[:2000],
                                files_changed=files_changed))
        await sink.flush()
        if cancel_seen:  # else no cancel of this run is in KV, or one whose signal never came (ignored)
            try:
                kv = await kv_bucket(self.rt.js, self.rt.topo.cancel_bucket)
                await kv.delete(self.rt.topo.kv_key(req.task_id))
            except Exception:
                pass
        # The next enqueued message's run, then the user's waiting runs into its free slots (the one
        # continuation of every end: `runstate.transitions.continue_after_end`).
        outcome.user_id = outcome.user_id or req.user_id
        await continue_after_end(self.rt.autocommit, self.rt.js, self.rt.topo, outcome,
                                 max_active=self.rt.settings.zcbot_max_runs_per_user,
                                 retry_seconds=self.rt.settings.zcbot_run_publish_retry_seconds)
        return True
