/* zcbot dev SPA: tasks | streaming chat | files. Vanilla JS, no build step.
 *
 * - The token (from /v1/auth/login or /v1/auth/login_password) is kept in localStorage and sent
 *   as `Authorization: Bearer` on every request.
 * - SSE is read with fetch() + a ReadableStream parser (EventSource cannot send headers); a
 *   stream that ends before `done` is resumed with `Last-Event-ID`.
 * - All text from the server is inserted as text nodes (never innerHTML).
 *
 * `window.zc` exposes the shared helpers (api, auth, el, formatters) that admin.js reuses.
 */
"use strict";

(() => {
  const TOKEN_KEY = "zcbot.token";
  const USER_KEY = "zcbot.user_id";
  const ACTIVE_RUN = new Set(["waiting", "queued", "running", "cancelling"]);
  const MAX_RECONNECTS = 20;
  const PREVIEW_CHARS = 4000;

  // ---- helpers ------------------------------------------------------------------------------

  const auth = {
    get token() { return localStorage.getItem(TOKEN_KEY); },
    get userId() { return localStorage.getItem(USER_KEY); },
    set(token, userId) {
      localStorage.setItem(TOKEN_KEY, token);
      localStorage.setItem(USER_KEY, userId);
    },
    clear() {
      localStorage.removeItem(TOKEN_KEY);
      localStorage.removeItem(USER_KEY);
    },
  };

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail || `HTTP ${status}`);
      this.status = status;
    }
  }

  function detailText(body) {
    if (!body || body.detail === undefined) return "";
    const d = body.detail;
    if (typeof d === "string") return d;
    if (Array.isArray(d)) return d.map((x) => (x && x.msg) || JSON.stringify(x)).join("; ");
    return JSON.stringify(d);
  }

  let onUnauthorized = null;

  async function api(path, { method = "GET", json, body, headers = {}, signal, raw = false } = {}) {
    const h = { ...headers };
    if (auth.token) h.Authorization = "Bearer " + auth.token;
    if (json !== undefined) {
      h["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    }
    const resp = await fetch(path, { method, headers: h, body, signal, cache: "no-store" });
    if (!resp.ok) {
      let detail = resp.statusText;
      try {
        detail = detailText(await resp.json()) || detail;
      } catch (_) { /* not JSON */ }
      const err = new ApiError(resp.status, detail);
      if (resp.status === 401 && onUnauthorized) onUnauthorized(err);
      throw err;
    }
    if (raw) return resp;
    if (resp.status === 204) return null;
    const ct = resp.headers.get("content-type") || "";
    return ct.includes("json") ? resp.json() : resp.text();
  }

  /** el("div", {class: "x", "data-testid": "y", onclick: fn}, "text", child, ...) */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (value === true) node.setAttribute(key, "");
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const $ = (id) => document.getElementById(id);

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      if (signal) signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
    });
  }

  function formatBytes(n) {
    if (n === null || n === undefined || n === "") return "";
    const v = Number(n);
    if (!Number.isFinite(v)) return String(n);
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    let x = v;
    while (x >= 1024 && i < units.length - 1) { x /= 1024; i += 1; }
    return (i === 0 ? String(x) : x.toFixed(1)) + " " + units[i];
  }

  function formatTime(value) {
    if (value === null || value === undefined || value === "") return "";
    const d = typeof value === "number" ? new Date(value * (value < 1e12 ? 1000 : 1)) : new Date(value);
    return Number.isNaN(d.getTime()) ? String(value) : d.toLocaleString();
  }

  function clip(text, n = PREVIEW_CHARS) {
    const s = text === null || text === undefined ? "" : String(text);
    return s.length > n ? s.slice(0, n) + "\n… (" + (s.length - n) + " more characters)" : s;
  }

  function parseJson(text) {
    try { return JSON.parse(text); } catch (_) { return text; }
  }

  /** Read an SSE stream with fetch(); yields {id, event, data}. Ends after a `done` event.
   *  A stream that closes early is resumed with Last-Event-ID (bounded retries). */
  /** Events of `url` (GET), resumed with Last-Event-ID; `opened`: a response already streaming the
   *  same events (a message POSTed with Accept: text/event-stream), read first. */
  async function* sse(url, { signal, lastEventId = null, opened = null } = {}) {
    let lastId = lastEventId;
    let retryMs = 1000;
    let idle = 0;
    for (;;) {
      if (signal && signal.aborted) return;
      const headers = { Accept: "text/event-stream" };
      if (auth.token) headers.Authorization = "Bearer " + auth.token;
      if (lastId !== null && lastId !== "") headers["Last-Event-ID"] = String(lastId);
      let resp = opened;
      opened = null;
      try {
        if (!resp) resp = await fetch(url, { headers, signal, cache: "no-store" });
      } catch (err) {
        if (signal && signal.aborted) return;
        if (++idle > MAX_RECONNECTS) throw err;
        await sleep(retryMs, signal);
        continue;
      }
      if (!resp.ok) {
        let detail = resp.statusText;
        try { detail = detailText(await resp.json()) || detail; } catch (_) { /* not JSON */ }
        const err = new ApiError(resp.status, detail);
        if (resp.status === 401 && onUnauthorized) onUnauthorized(err);
        if (resp.status < 500 || ++idle > MAX_RECONNECTS) throw err;
        await sleep(retryMs, signal);
        continue;
      }
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      let type = "";
      let data = [];
      let gotEvent = false;
      try {
        for (;;) {
          let chunk;
          try {
            chunk = await reader.read();
          } catch (err) {
            if (signal && signal.aborted) return;
            break; // network drop: resume below
          }
          if (chunk.done) break;
          buf += decoder.decode(chunk.value, { stream: true });
          for (;;) {
            const m = /\r\n|\r|\n/.exec(buf);
            if (!m) break;
            if (m[0] === "\r" && m.index === buf.length - 1) break; // maybe half of a CRLF
            const line = buf.slice(0, m.index);
            buf = buf.slice(m.index + m[0].length);
            if (line === "") {
              if (data.length || type) {
                const evt = { id: lastId, event: type || "message", data: parseJson(data.join("\n")) };
                gotEvent = true;
                yield evt;
                if (evt.event === "done") return;
              }
              type = "";
              data = [];
              continue;
            }
            if (line.startsWith(":")) continue; // comment: keep-alive / reconnect hint
            const colon = line.indexOf(":");
            const field = colon === -1 ? line : line.slice(0, colon);
            let value = colon === -1 ? "" : line.slice(colon + 1);
            if (value.startsWith(" ")) value = value.slice(1);
            if (field === "event") type = value;
            else if (field === "data") data.push(value);
            else if (field === "id" && !value.includes("\0")) lastId = value;
            else if (field === "retry" && /^\d+$/.test(value)) retryMs = Math.min(Number(value), 30000);
          }
        }
      } finally {
        reader.cancel().catch(() => {});
      }
      if (signal && signal.aborted) return;
      idle = gotEvent ? 0 : idle + 1;
      if (idle > MAX_RECONNECTS) throw new Error("lost the event stream (no progress after reconnecting)");
      await sleep(retryMs, signal);
    }
  }

  /** Fetch with the auth header and save the body as a file. */
  async function downloadFile(url, filename) {
    const resp = await api(url, { raw: true });
    const blob = await resp.blob();
    const href = URL.createObjectURL(blob);
    const a = el("a", { href, download: filename || "download" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(href), 30000);
  }

  window.zc = { api, auth, ApiError, el, $, sse, sleep, formatBytes, formatTime, clip, downloadFile,
    setUnauthorizedHandler(fn) { onUnauthorized = fn; } };

  if (document.body.dataset.page !== "dev") return;

  // ---- dev page state -----------------------------------------------------------------------

  const state = {
    me: null,
    tasks: [],
    current: null, // task object
    run: null, // {runId, abort: AbortController, view}
    filesPath: "",
    selectSeq: 0,
    tasksSignature: "",
  };

  // ---- login --------------------------------------------------------------------------------

  function showLogin(message) {
    stopRun();
    state.me = null;
    state.current = null;
    $("app-view").hidden = true;
    $("login-view").hidden = false;
    $("logout").hidden = true;
    $("admin-link").hidden = true;
    $("whoami").textContent = "";
    $("login-error").textContent = message || "";
  }

  function selectTab(which) {
    for (const name of ["password", "key"]) {
      const tab = $("tab-" + name);
      const on = name === which;
      tab.setAttribute("aria-selected", String(on));
      tab.tabIndex = on ? 0 : -1;
      $("panel-" + name).hidden = !on;
    }
    localStorage.setItem("zcbot.login_tab", which);
  }

  function setupLogin() {
    $("tab-password").addEventListener("click", () => selectTab("password"));
    $("tab-key").addEventListener("click", () => selectTab("key"));
    document.querySelector(".tabs").addEventListener("keydown", (e) => {
      if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
      const next = $("tab-password").getAttribute("aria-selected") === "true" ? "key" : "password";
      selectTab(next);
      $("tab-" + next).focus();
    });
    selectTab(localStorage.getItem("zcbot.login_tab") === "key" ? "key" : "password");

    async function login(form, path, body) {
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      $("login-error").textContent = "";
      try {
        const out = await api(path, { method: "POST", json: body });
        auth.set(out.token, out.user_id);
        form.reset();
        await enterApp();
      } catch (err) {
        $("login-error").textContent = "Sign-in failed: " + err.message;
      } finally {
        button.disabled = false;
      }
    }

    $("login-password-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const f = e.target;
      login(f, "/v1/auth/login_password", { email: f.email.value, password: f.password.value });
    });
    $("login-key-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const f = e.target;
      login(f, "/v1/auth/login", { user_id: f.user_id.value.trim(), platform_key: f.platform_key.value });
    });
    $("logout").addEventListener("click", () => {
      auth.clear();
      showLogin("");
    });
  }

  const TASK_POLL_MS = 15000;
  let taskPoll = null;

  async function enterApp() {
    const me = await api("/v1/me");
    state.me = me;
    $("login-view").hidden = true;
    $("app-view").hidden = false;
    $("logout").hidden = false;
    $("whoami").textContent = me.name || me.email || me.user_id;
    $("whoami").title = "Signed in as " + me.user_id;
    $("admin-link").hidden = me.role !== "admin";
    await Promise.all([loadTasks(), loadSchedules()]);
    if (taskPoll === null) {
      // Keep run states in the list fresh (other tabs, channels, schedules start runs too).
      taskPoll = setInterval(() => {
        if (state.me && !document.hidden) loadTasks();
      }, TASK_POLL_MS);
    }
  }

  // ---- tasks --------------------------------------------------------------------------------

  async function loadTasks() {
    try {
      const page = await api("/v1/tasks?page_size=100");
      state.tasks = page.results || [];
      $("tasks-error").textContent = "";
    } catch (err) {
      $("tasks-error").textContent = "Could not load tasks: " + err.message;
      return;
    }
    // Re-render only on change, so a poll does not move keyboard focus for nothing.
    const signature = JSON.stringify([state.current && state.current.task_id,
      state.tasks.map((t) => [t.task_id, t.name, t.working_dir, t.run_status])]);
    if (signature !== state.tasksSignature) renderTasks();
  }

  function renderTasks() {
    state.tasksSignature = JSON.stringify([state.current && state.current.task_id,
      state.tasks.map((t) => [t.task_id, t.name, t.working_dir, t.run_status])]);
    const list = $("task-list");
    list.replaceChildren();
    if (!state.tasks.length) {
      list.append(el("li", { class: "muted empty" }, "No tasks yet."));
      return;
    }
    for (const t of state.tasks) {
      const selected = state.current && state.current.task_id === t.task_id;
      const busy = ACTIVE_RUN.has(t.run_status);
      list.append(el("li", {},
        el("button", {
          type: "button", class: "task-item" + (selected ? " selected" : ""), "aria-current": selected ? "true" : null,
          "data-testid": "task-item", "data-task-id": t.task_id, onclick: () => selectTask(t.task_id),
        },
        el("span", { class: "task-name" }, t.name),
        el("span", { class: "task-meta muted" }, t.working_dir + (busy ? " · " + t.run_status : "")))));
    }
  }

  function setupTasks() {
    $("create-task-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = e.target;
      const body = { name: f.name.value.trim() };
      if (f.working_dir.value.trim()) body.working_dir = f.working_dir.value.trim();
      const button = f.querySelector("button[type=submit]");
      button.disabled = true;
      try {
        const task = await api("/v1/tasks", { method: "POST", json: body });
        $("tasks-error").textContent = "";
        f.reset();
        state.tasks.unshift(task);
        await Promise.all([selectTask(task.task_id), loadTasks()]);
      } catch (err) {
        $("tasks-error").textContent = "Could not create the task: " + err.message;
      } finally {
        button.disabled = false;
      }
    });
  }

  function updateTask(task) {
    const i = state.tasks.findIndex((t) => t.task_id === task.task_id);
    if (i >= 0) state.tasks[i] = task;
    if (state.current && state.current.task_id === task.task_id) state.current = task;
    renderTasks();
  }

  async function refreshCurrentTask() {
    if (!state.current) return;
    try {
      updateTask(await api("/v1/tasks/" + encodeURIComponent(state.current.task_id)));
    } catch (_) { /* keep what we have */ }
  }

  async function selectTask(taskId) {
    const seq = ++state.selectSeq;
    stopRun();
    let task = state.tasks.find((t) => t.task_id === taskId);
    try {
      task = await api("/v1/tasks/" + encodeURIComponent(taskId));
    } catch (err) {
      $("tasks-error").textContent = "Could not open the task: " + err.message;
      return;
    }
    if (seq !== state.selectSeq) return;
    state.current = task;
    updateTask(task);
    $("chat-title").textContent = task.name;
    $("chat-folder").textContent = "Folder: " + task.working_dir;
    $("message-input").disabled = task.read_only;
    $("send-button").disabled = task.read_only;
    $("message-input").placeholder = task.read_only
      ? "This task belongs to the " + task.channel + " channel (read-only here)"
      : "Message (Ctrl+Enter to send)";
    setRunStatus(task.run_status === "idle" ? "" : task.run_status);
    await loadHistory(task, seq);
    if (seq !== state.selectSeq) return;
    checkFolder();
    loadFiles(task.working_dir);
    if (ACTIVE_RUN.has(task.run_status)) {
      follow("/v1/tasks/" + encodeURIComponent(task.task_id) + "/events", task.run_id, task.run_status);
    }
  }

  // ---- soft warning: another task in the same folder is running ----------------------------

  async function checkFolder() {
    const task = state.current;
    const notice = $("folder-notice");
    if (!task) { notice.hidden = true; return; }
    try {
      const page = await api("/v1/tasks?page_size=20&run_status=running&working_dir="
        + encodeURIComponent(task.working_dir));
      if (!state.current || state.current.task_id !== task.task_id) return;
      const others = (page.results || []).filter((t) => t.task_id !== task.task_id);
      if (others.length) {
        notice.textContent = "Heads up: another task in folder “" + task.working_dir + "” is running ("
          + others.map((t) => t.name).join(", ") + "). Both may write the same files.";
        notice.hidden = false;
      } else {
        notice.hidden = true;
      }
    } catch (_) {
      notice.hidden = true;
    }
  }

  // ---- chat rendering -----------------------------------------------------------------------

  function messagesBox() { return $("messages"); }

  function scrollDown() {
    const box = messagesBox();
    const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 200;
    if (nearBottom) box.scrollTop = box.scrollHeight;
  }

  function userBubble(text) {
    return el("div", { class: "msg user", "data-testid": "user-message" },
      el("div", { class: "who" }, "You"), el("div", { class: "body", "data-testid": "user-text" }, text));
  }

  function assistantBubble(text = "") {
    return el("div", { class: "msg assistant", "data-testid": "assistant-message" },
      el("div", { class: "who" }, "Assistant"), el("div", { class: "body", "data-testid": "assistant-text" }, text));
  }

  function reasoningBlock(text = "") {
    return el("details", { class: "reasoning", "data-testid": "reasoning" },
      el("summary", {}, "Reasoning"), el("div", { class: "reasoning-body" }, text));
  }

  function toolCard(callId, name, argsPreview) {
    const card = el("details", { class: "tool-card pending", "data-testid": "tool-card", "data-call-id": callId || "",
      "data-tool": name, open: true },
      el("summary", {},
        el("span", { class: "tool-name", "data-testid": "tool-name" }, name),
        el("span", { class: "tool-oneline muted" }, oneLine(argsPreview)),
        el("span", { class: "tool-state badge", "data-testid": "tool-state" }, "running…")),
      el("div", { class: "tool-section-label" }, "Arguments"),
      el("pre", { class: "tool-args", "data-testid": "tool-args" }, clip(argsPreview, 2000)),
      el("div", { class: "tool-section-label" }, "Result"),
      el("pre", { class: "tool-result", "data-testid": "tool-result" }, ""));
    return card;
  }

  function oneLine(text) {
    const s = String(text || "").replace(/\s+/g, " ").trim();
    return s.length > 80 ? s.slice(0, 79) + "…" : s;
  }

  /** Cards still waiting when a run is over: the tool never ran (guard stop, cancel, crash). */
  function settlePendingCards(root, label) {
    root.querySelectorAll(".tool-card.pending").forEach((card) => {
      card.classList.remove("pending");
      card.classList.add("skipped");
      card.dataset.ok = "false";
      card.querySelector(".tool-state").textContent = label;
    });
  }

  function setToolResult(card, preview, ok, truncated) {
    card.classList.remove("pending");
    card.classList.add(ok === false ? "failed" : "ok");
    card.dataset.ok = ok === false ? "false" : "true";
    card.querySelector(".tool-state").textContent = ok === false ? "error" : "ok";
    card.querySelector(".tool-result").textContent = clip(preview) + (truncated ? "\n… (truncated)" : "");
    if (ok === false) card.open = true;
  }

  function notice(kind, text, testid) {
    return el("div", { class: "notice " + kind, role: kind === "error" ? "alert" : "status", "data-testid": testid },
      text);
  }

  function continueHint() {
    return el("div", { class: "notice hint", "data-testid": "continue-hint" },
      "The run stopped early. ",
      el("button", { type: "button", class: "link-button", onclick: () => sendMessage("continue") }, "Continue"),
      " to resume.");
  }

  function messageText(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content.map((p) => (typeof p === "string" ? p : p && (p.text || (p.type ? "[" + p.type + "]" : ""))))
        .filter(Boolean).join("\n");
    }
    return JSON.stringify(content);
  }

  function prettyArgs(raw) {
    if (typeof raw !== "string") return JSON.stringify(raw, null, 2);
    const parsed = parseJson(raw);
    return typeof parsed === "string" ? raw : JSON.stringify(parsed, null, 2);
  }

  async function loadHistory(task, seq) {
    const box = messagesBox();
    box.replaceChildren(el("p", { class: "muted empty" }, "Loading…"));
    let msgs = [];
    try {
      const out = await api("/v1/tasks/" + encodeURIComponent(task.task_id) + "/messages?limit=1000");
      msgs = out.messages || [];
    } catch (err) {
      if (seq === state.selectSeq) box.replaceChildren(notice("error", "Could not load messages: " + err.message, "history-error"));
      return;
    }
    if (seq !== state.selectSeq) return;
    box.replaceChildren();
    const cards = new Map();
    // The active run's own steps are replayed from its event stream (follow), not shown twice.
    const live = ACTIVE_RUN.has(task.run_status) ? task.run_id : null;
    for (const m of msgs) {
      const p = m.payload || {};
      if (live && m.run_id === live && p.role !== "user") continue;
      if (p.role === "user") {
        box.append(userBubble(messageText(p.content)));
      } else if (p.role === "assistant") {
        if (m.kind === "guard") {
          box.append(notice("warn", messageText(p.content), "run-warn"), continueHint());
          continue;
        }
        if (p.reasoning_content) box.append(reasoningBlock(p.reasoning_content));
        const text = messageText(p.content);
        if (text) box.append(assistantBubble(text));
        for (const tc of p.tool_calls || []) {
          const fn = tc.function || {};
          const card = toolCard(tc.id, fn.name || "tool", prettyArgs(fn.arguments || "{}"));
          card.open = false;
          cards.set(tc.id, card);
          box.append(card);
        }
      } else if (p.role === "tool") {
        const card = cards.get(p.tool_call_id);
        const content = messageText(p.content);
        const failed = /^\s*\[?(error|not run|cancelled)\b/i.test(content);
        if (card) setToolResult(card, content, !failed, false);
      }
    }
    if (!live) settlePendingCards(box, "no result");
    if (task.run_status === "error" && task.run_error) box.append(notice("error", "Last run failed: " + task.run_error, "run-error"));
    if (!msgs.length) box.append(el("p", { class: "muted empty" }, "No messages yet. Say hello."));
    box.scrollTop = box.scrollHeight;
  }

  // ---- live run -----------------------------------------------------------------------------

  function setRunStatus(text, kind = "") {
    const badge = $("run-status");
    badge.textContent = text || "";
    badge.className = "badge" + (kind ? " " + kind : "");
    badge.hidden = !text;
  }

  function stopRun() {
    if (state.run) {
      state.run.abort.abort();
      state.run = null;
    }
    $("cancel-run").hidden = true;
  }

  class RunView {
    constructor(box, runId) {
      this.box = box;
      this.root = el("div", { class: "run", "data-testid": "live-run", "data-run-id": runId || "" });
      box.querySelectorAll(":scope > .empty").forEach((n) => n.remove());
      box.append(this.root);
      this.text = null; // current assistant bubble body
      this.reasoning = null; // current reasoning body
      this.cards = new Map();
    }

    append(node) { this.root.append(node); scrollDown(); return node; }

    onText(delta) {
      if (!this.text) this.text = this.append(assistantBubble()).querySelector(".body");
      this.text.textContent += delta;
      this.reasoning = null;
      scrollDown();
    }

    onReasoning(delta) {
      if (!this.reasoning) this.reasoning = this.append(reasoningBlock()).querySelector(".reasoning-body");
      this.reasoning.textContent += delta;
      scrollDown();
    }

    onToolCall(d) {
      this.text = null;
      this.reasoning = null;
      const args = d.args_preview || JSON.stringify(d.args || {}, null, 2);
      this.cards.set(d.call_id, this.append(toolCard(d.call_id, d.name, args)));
    }

    onToolResult(d) {
      let card = this.cards.get(d.call_id);
      if (!card) card = this.append(toolCard(d.call_id, d.name, ""));
      setToolResult(card, d.preview, d.ok, d.truncated);
      scrollDown();
    }

    onStep() { this.text = null; this.reasoning = null; }
  }

  async function follow(url, runId, initialStatus = "running", opened = null, abort = new AbortController()) {
    stopRun();
    const task = state.current;
    if (!task) {
      abort.abort(); // an already-open stream is not read
      return;
    }
    const view = new RunView(messagesBox(), runId);
    const run = { runId, abort, view, taskId: task.task_id };
    state.run = run;
    $("cancel-run").hidden = false;
    $("cancel-run").disabled = false;
    setRunStatus(initialStatus, "running");
    let final = null;
    try {
      for await (const evt of sse(url, { signal: abort.signal, opened })) {
        if (state.run !== run) return;
        const d = evt.data || {};
        switch (evt.event) {
          case "run_start":
            run.runId = d.run_id || run.runId;
            view.root.dataset.runId = run.runId || "";
            setRunStatus("running", "running");
            break;
          case "queued":  // over the per-user cap: waiting for one of the user's runs to end
            setRunStatus("waiting (#" + (d.position || 1) + " in your queue)", "warn");
            break;
          case "llm_start": view.onStep(); break;
          case "text": view.onText(d.delta || ""); break;
          case "reasoning": view.onReasoning(d.delta || ""); break;
          case "tool_call": view.onToolCall(d); break;
          case "tool_result": view.onToolResult(d); break;
          case "model_switch":
            view.append(notice("info", "Model switched: " + d.from_profile + " → " + d.to_profile
              + (d.reason ? " (" + d.reason + ")" : ""), "model-switch"));
            break;
          case "context_fold":
            view.append(notice("info", "Context folding: " + d.phase + (d.detail ? " — " + d.detail : ""), "context-fold"));
            break;
          case "warn":
            view.append(notice("warn", d.msg || "warning", "run-warn"));
            if (/continue/i.test(d.msg || "")) view.append(continueHint());
            break;
          case "cancelled":
            view.append(notice("warn", "Run cancelled" + (d.reason && d.reason !== "user" ? " (" + d.reason + ")" : "") + ".",
              "run-cancelled"));
            break;
          case "error":
            view.append(notice("error", "Error: " + (d.msg || "unknown error"), "run-error"));
            break;
          case "done":
            final = d;
            break;
          default:
            break;
        }
      }
    } catch (err) {
      if (state.run === run) view.append(notice("error", "Event stream failed: " + err.message, "run-error"));
    }
    if (state.run !== run) return;
    state.run = null;
    $("cancel-run").hidden = true;
    const status = final ? final.status : "disconnected";
    settlePendingCards(view.root, status === "cancelled" ? "cancelled" : "not run");
    view.root.dataset.status = status;
    if (status === "stopped" && !view.root.querySelector("[data-testid=continue-hint]")) view.append(continueHint());
    const total = final && final.timings && final.timings.total;
    setRunStatus(status === "idle" ? "" : status + (total ? " · " + Number(total).toFixed(1) + " s" : ""),
      status === "ok" ? "ok" : status === "error" ? "error" : status === "cancelled" ? "warn" : "");
    await refreshCurrentTask();
    checkFolder();
    if (state.current && state.filesPath !== undefined) loadFiles(state.filesPath);
  }

  async function sendMessage(content) {
    const task = state.current;
    if (!task || !content.trim()) return false;
    const box = messagesBox();
    box.querySelectorAll(":scope > .empty").forEach((n) => n.remove());
    const bubble = userBubble(content);
    box.append(bubble);
    box.scrollTop = box.scrollHeight;
    try {
      // One request: the POST answers with the run's event stream (its URL, for resuming, in
      // Content-Location), instead of a JSON body and then a GET of events_url.
      const abort = new AbortController();
      const resp = await api("/v1/tasks/" + encodeURIComponent(task.task_id) + "/messages", {
        method: "POST", json: { content }, headers: { Accept: "text/event-stream" }, signal: abort.signal, raw: true,
      });
      checkFolder();
      const runId = resp.headers.get("X-Run-Id");
      const status = resp.headers.get("X-Run-Status") === "queued" ? "queued" : "running";
      const eventsUrl = resp.headers.get("Content-Location")
        || "/v1/tasks/" + encodeURIComponent(task.task_id) + "/events?run_id=" + encodeURIComponent(runId || "");
      follow(eventsUrl, runId, status, resp, abort);
      return true;
    } catch (err) {
      bubble.classList.add("failed");
      box.append(notice("error", "Not sent: " + err.message, "send-error"));
      return false;
    }
  }

  function setupChat() {
    const input = $("message-input");
    $("send-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const content = input.value;
      if (!content.trim()) return;
      $("send-button").disabled = true;
      const ok = await sendMessage(content);
      $("send-button").disabled = false;
      if (ok) input.value = "";
      input.focus();
    });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        $("send-form").requestSubmit();
      }
    });
    $("cancel-run").addEventListener("click", async () => {
      const task = state.current;
      if (!task) return;
      $("cancel-run").disabled = true;
      setRunStatus("cancelling…", "warn");
      try {
        await api("/v1/tasks/" + encodeURIComponent(task.task_id) + "/cancel", { method: "POST" });
      } catch (err) {
        $("cancel-run").disabled = false;
        const view = state.run && state.run.view;
        const n = notice("error", "Cancel failed: " + err.message, "cancel-error");
        if (view) view.append(n); else messagesBox().append(n);
      }
    });
  }

  // ---- files --------------------------------------------------------------------------------

  function joinPath(dir, name) { return dir ? dir.replace(/\/+$/, "") + "/" + name : name; }

  function renderCrumbs(path) {
    const nav = $("file-crumbs");
    nav.replaceChildren();
    const parts = (path || "").split("/").filter(Boolean);
    const crumb = (label, target, current) => current
      ? el("span", { class: "crumb", "aria-current": "page" }, label)
      : el("button", { type: "button", class: "crumb link-button", onclick: () => loadFiles(target) }, label);
    nav.append(crumb("~", "", parts.length === 0));
    parts.forEach((part, i) => {
      nav.append(el("span", { class: "sep", "aria-hidden": "true" }, "/"));
      nav.append(crumb(part, parts.slice(0, i + 1).join("/"), i === parts.length - 1));
    });
  }

  async function loadFiles(path) {
    state.filesPath = path || "";
    const list = $("file-list");
    const status = $("files-status");
    renderCrumbs(state.filesPath);
    let out;
    try {
      out = await api("/v1/files?path=" + encodeURIComponent(state.filesPath));
    } catch (err) {
      list.replaceChildren();
      status.textContent = err.status === 404 && err.message === "Not Found"
        ? "The files API is not available on this server."
        : "Could not list files: " + err.message;
      return;
    }
    if (typeof out.current === "string") {
      state.filesPath = out.current.replace(/^\/+/, "");
      renderCrumbs(state.filesPath);
    }
    const entries = out.entries || [];
    list.replaceChildren();
    status.textContent = out.exists === false ? "This folder does not exist yet." : entries.length ? "" : "Empty folder.";
    const dirs = entries.filter((e) => e.type === "dir" || e.type === "directory");
    const files = entries.filter((e) => !(e.type === "dir" || e.type === "directory"));
    for (const entry of [...dirs, ...files]) {
      const path = entry.path || joinPath(state.filesPath, entry.name);
      const isDir = entry.type === "dir" || entry.type === "directory";
      const meta = isDir ? "folder" : formatBytes(entry.size) + (entry.mtime ? " · " + formatTime(entry.mtime) : "");
      list.append(el("li", { class: "file-entry", "data-testid": "file-entry", "data-name": entry.name, "data-path": path,
        "data-type": isDir ? "dir" : "file" },
        isDir
          ? el("button", { type: "button", class: "link-button file-name", "data-testid": "open-folder",
            onclick: () => loadFiles(path) }, entry.name + "/")
          : el("span", { class: "file-name" }, entry.name),
        el("span", { class: "muted file-meta" }, meta),
        isDir ? null : el("button", { type: "button", class: "small", "data-testid": "file-download",
          "aria-label": "Download " + entry.name, onclick: async (e) => {
            e.target.disabled = true;
            try {
              await downloadFile("/v1/files/download?path=" + encodeURIComponent(path), entry.name);
              status.textContent = "";
            } catch (err) {
              status.textContent = "Download failed: " + err.message;
            } finally {
              e.target.disabled = false;
            }
          } }, "Download")));
    }
  }

  function setupFiles() {
    $("upload-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const input = $("file-input");
      const status = $("files-status");
      if (!input.files || !input.files.length) {
        status.textContent = "Choose a file first.";
        return;
      }
      const button = e.target.querySelector("button[type=submit]");
      button.disabled = true;
      try {
        // One request: the server writes all the files or none of them.
        const form = new FormData();
        for (const file of input.files) form.append("file", file, file.name);
        status.textContent = "Uploading " + Array.from(input.files, (f) => f.name).join(", ") + "…";
        await api("/v1/files/upload?path=" + encodeURIComponent(state.filesPath), { method: "POST", body: form });
        input.value = "";
        await loadFiles(state.filesPath);
        status.textContent = "Uploaded.";
      } catch (err) {
        status.textContent = "Upload failed: " + err.message;
      } finally {
        button.disabled = false;
      }
    });
  }

  // ---- schedules (read-only, if the API exists) ---------------------------------------------

  async function loadSchedules() {
    const section = $("schedules-section");
    let out;
    try {
      out = await api("/v1/schedules");
    } catch (err) {
      section.hidden = true; // 404: no schedules API on this server
      return;
    }
    const items = Array.isArray(out) ? out : out.results || out.schedules || out.items || [];
    const list = $("schedule-list");
    list.replaceChildren();
    section.hidden = false;
    if (!items.length) {
      list.append(el("li", { class: "muted empty" }, "No schedules."));
      return;
    }
    for (const job of items) {
      const id = job.job_id || job.id || job.schedule_id;
      const enabled = job.enabled !== false;
      const act = async (method, path, what) => {
        try {
          await api(path, { method });
          await loadSchedules();
        } catch (err) {
          $("schedules-error").textContent = what + " failed: " + err.message;
        }
      };
      list.append(el("li", { class: "schedule" + (enabled ? "" : " disabled"), "data-testid": "schedule-item",
        "data-job-id": id },
        el("div", { class: "schedule-name" }, job.name || id),
        el("div", { class: "muted small-text" }, [job.cron, job.timezone].filter(Boolean).join(" ")
          + (enabled ? "" : " · disabled") + (job.next_run_at ? " · next " + formatTime(job.next_run_at) : "")),
        job.prompt ? el("div", { class: "schedule-prompt small-text" }, clip(job.prompt, 200)) : null,
        el("div", { class: "row" },
          enabled ? el("button", { type: "button", class: "small", "data-testid": "schedule-disable",
            onclick: () => act("POST", "/v1/schedules/" + encodeURIComponent(id) + "/disable", "Disable") }, "Disable") : null,
          el("button", { type: "button", class: "small danger", "data-testid": "schedule-delete",
            onclick: () => {
              if (window.confirm("Delete schedule “" + (job.name || id) + "”?")) {
                act("DELETE", "/v1/schedules/" + encodeURIComponent(id), "Delete");
              }
            } }, "Delete"))));
    }
  }

  // ---- boot ---------------------------------------------------------------------------------

  onUnauthorized = () => {
    auth.clear();
    showLogin("Your session has expired; please sign in again.");
  };

  setupLogin();
  setupTasks();
  setupChat();
  setupFiles();
  if (auth.token) {
    enterApp().catch((err) => {
      if (!(err instanceof ApiError && err.status === 401)) showLogin("Could not reach the server: " + err.message);
    });
  } else {
    showLogin("");
  }
})();
