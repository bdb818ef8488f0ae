/* zcbot admin page: overview numbers, usage by model / by user (range + sort, paged), storage by
 * user. Uses the helpers app.js exposes as window.zc; the token is the one the dev page stored.
 * Responses are rendered generically (groups of scalar fields, arrays of row objects as tables),
 * so the page keeps working as the admin API grows fields. */
"use strict";

(() => {
  const { api, auth, el, $, formatBytes, formatTime, ApiError } = window.zc;
  const PAGE_SIZE = 20;

  function humanize(key) {
    const s = String(key).replace(/[._]+/g, " ").replace(/\busd\b/i, "(USD)").trim();
    return s.charAt(0).toUpperCase() + s.slice(1);
  }

  function formatDuration(seconds) {
    let s = Math.max(0, Math.round(Number(seconds)));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    return [d && d + "d", (d || h) && h + "h", (d || h || m) && m + "m", s + "s"].filter(Boolean).join(" ");
  }

  function formatValue(key, value) {
    if (value === null || value === undefined || value === "") return "—";
    const k = String(key).toLowerCase();
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (typeof value === "number") {
      if (/cost|usd|price|spend/.test(k)) return "$" + value.toFixed(value !== 0 && Math.abs(value) < 1 ? 4 : 2);
      if (/bytes/.test(k)) return formatBytes(value);
      if (/(uptime|duration)_?seconds|_seconds$/.test(k)) return formatDuration(value);
      if (/_ms$/.test(k)) return value.toLocaleString() + " ms";
      return Number.isInteger(value) ? value.toLocaleString() : value.toLocaleString(undefined, { maximumFractionDigits: 3 });
    }
    if (typeof value === "string" && /(_at|^at)$/.test(k)) return formatTime(value);
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  /** {a: 1, b: {c: 2}} -> [["a", 1], ["b.c", 2]]: scalars only, nested objects flattened. */
  function flatten(obj, prefix = "") {
    const out = [];
    for (const [key, value] of Object.entries(obj || {})) {
      const name = prefix ? prefix + "." + key : key;
      if (Array.isArray(value)) continue;
      if (value !== null && typeof value === "object") out.push(...flatten(value, name));
      else out.push([name, value]);
    }
    return out;
  }

  function rowsOf(body) {
    if (Array.isArray(body)) return body;
    if (!body || typeof body !== "object") return [];
    for (const key of ["results", "rows", "items", "models", "users", "data"]) {
      if (Array.isArray(body[key])) return body[key];
    }
    return Object.values(body).find(Array.isArray) || [];
  }

  function stat(fullKey, label, value) {
    return el("div", { class: "stat", "data-testid": "overview-stat", "data-key": fullKey },
      el("dt", {}, label), el("dd", {}, formatValue(fullKey, value)));
  }

  function table(caption, rows, testid) {
    if (!rows.length) {
      return el("div", { "data-testid": testid }, el("h3", {}, caption), el("p", { class: "muted" }, "No data."));
    }
    const cols = [];
    for (const row of rows) for (const key of Object.keys(row)) if (!cols.includes(key)) cols.push(key);
    const numeric = new Set(cols.filter((c) => rows.some((r) => typeof r[c] === "number")));
    return el("table", { class: "data", "data-testid": testid },
      el("caption", {}, caption),
      el("thead", {}, el("tr", {}, cols.map((c) => el("th", { scope: "col", class: numeric.has(c) ? "num" : null }, humanize(c))))),
      el("tbody", {}, rows.map((r) => el("tr", { "data-testid": "table-row" },
        cols.map((c) => el("td", { class: numeric.has(c) ? "num" : null }, formatValue(c, r[c])))))));
  }

  function unavailable(err) {
    if (err instanceof ApiError && err.status === 404 && err.message === "Not Found") return "Not available on this server.";
    return "Could not load: " + err.message;
  }

  // ---- overview -----------------------------------------------------------------------------

  async function loadOverview() {
    const box = $("overview");
    const status = $("overview-status");
    status.textContent = "Loading…";
    let body;
    try {
      body = await api("/v1/admin/overview");
    } catch (err) {
      box.replaceChildren();
      status.textContent = unavailable(err);
      return;
    }
    const general = [];
    const groups = [];
    const tables = [];
    for (const [key, value] of Object.entries(body || {})) {
      if (Array.isArray(value)) tables.push(table(humanize(key), value, "overview-table"));
      else if (value !== null && typeof value === "object") {
        const stats = flatten(value).map(([k, v]) => stat(key + "." + k, humanize(k), v));
        groups.push(el("section", { class: "stat-group", "data-testid": "overview-group", "data-group": key },
          el("h3", {}, humanize(key)), el("dl", { class: "stat-grid" }, stats)));
      } else general.push(stat(key, humanize(key), value));
    }
    if (general.length) groups.unshift(el("dl", { class: "stat-grid" }, general));
    box.replaceChildren(...groups, ...tables.map((t) => el("div", { class: "table-wrap" }, t)));
    status.textContent = groups.length || tables.length ? "" : "No numbers yet.";
  }

  // ---- paged tables -------------------------------------------------------------------------

  const pages = { "usage-models": 1, "usage-users": 1, "storage-users": 1 };

  async function loadTable(container, caption, path, testid, onBody) {
    const box = document.querySelector(`[data-testid="${container}"]`);
    const page = pages[container];
    box.setAttribute("aria-busy", "true");
    box.replaceChildren(el("p", { class: "muted" }, "Loading " + caption.toLowerCase() + "…"));
    let body;
    try {
      body = await api(path + (path.includes("?") ? "&" : "?") + "page=" + page + "&page_size=" + PAGE_SIZE);
    } catch (err) {
      box.replaceChildren(el("h3", {}, caption), el("p", { class: "muted", role: "status" }, unavailable(err)));
      box.removeAttribute("aria-busy");
      return;
    }
    if (onBody) onBody(body);
    const parts = [table(caption, rowsOf(body), testid)];
    const count = body && typeof body.count === "number" ? body.count : null;
    const size = (body && body.page_size) || PAGE_SIZE;
    if (count !== null && count > size) {
      const last = Math.ceil(count / size);
      const go = (p) => { pages[container] = p; loadTable(container, caption, path, testid, onBody); };
      parts.push(el("div", { class: "row pager" },
        el("button", { type: "button", class: "small", disabled: page <= 1, onclick: () => go(page - 1) }, "Previous"),
        el("span", { class: "muted" }, `Page ${page} of ${last} (${count} rows)`),
        el("button", { type: "button", class: "small", disabled: page >= last, onclick: () => go(page + 1) }, "Next")));
    }
    box.replaceChildren(...parts);
    box.removeAttribute("aria-busy");
  }

  function loadUsage(resetPage) {
    if (resetPage) { pages["usage-models"] = 1; pages["usage-users"] = 1; }
    const q = "?range=" + encodeURIComponent($("range").value) + "&sort=" + encodeURIComponent($("sort").value);
    return Promise.all([
      loadTable("usage-models", "By model", "/v1/admin/usage/models" + q, "usage-models-table"),
      loadTable("usage-users", "By user", "/v1/admin/usage/users" + q, "usage-users-table"),
    ]);
  }

  function loadStorage() {
    return loadTable("storage-users", "Storage", "/v1/admin/storage/users", "storage-users-table", (body) => {
      const parts = [];
      if (typeof body.total_bytes === "number") parts.push(formatBytes(body.total_bytes) + " in total");
      if (typeof body.total_files === "number") parts.push(body.total_files.toLocaleString() + " files");
      if (body.partial) parts.push("partial: the scan ran out of time");
      $("storage-summary").textContent = parts.join(" · ");
    });
  }

  function loadAll() {
    return Promise.all([loadOverview(), loadUsage(false), loadStorage()]);
  }

  // ---- boot ---------------------------------------------------------------------------------

  function stop(message, withLogin) {
    const box = $("admin-message");
    box.replaceChildren(message);
    if (withLogin) box.append(" ", el("a", { href: "/" }, "Sign in"));
    box.hidden = false;
    $("admin-view").hidden = true;
  }

  async function boot() {
    window.zc.setUnauthorizedHandler(() => {
      auth.clear();
      stop("Your session has expired.", true);
    });
    if (!auth.token) {
      stop("You are not signed in.", true);
      return;
    }
    let me;
    try {
      me = await api("/v1/me");
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) stop("Could not reach the server: " + err.message, false);
      return;
    }
    $("whoami").textContent = me.name || me.email || me.user_id;
    if (me.role !== "admin") {
      stop("This page needs the admin role; " + me.user_id + " is a " + me.role + ".", false);
      return;
    }
    $("admin-view").hidden = false;
    $("range").addEventListener("change", () => loadUsage(true));
    $("sort").addEventListener("change", () => loadUsage(true));
    $("refresh").addEventListener("click", loadAll);
    await loadAll();
  }

  boot();
})();
