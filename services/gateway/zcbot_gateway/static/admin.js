/* zcbot admin page: overview numbers, usage by model / by user (range selector), storage by user.
 * Uses the helpers app.js exposes as window.zc; the token is the one the dev page stored.
 * Responses are rendered generically (any scalar fields of an object, any array of row objects)
 * so the page keeps working as the admin API grows fields. */
"use strict";

(() => {
  const { api, auth, el, $, formatBytes, ApiError } = window.zc;

  function humanize(key) {
    const s = String(key).replace(/[._]+/g, " ").trim();
    return s.charAt(0).toUpperCase() + s.slice(1);
  }

  function formatValue(key, value) {
    if (value === null || value === undefined) return "—";
    const k = String(key).toLowerCase();
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (typeof value === "number") {
      if (/cost|usd|price|spend/.test(k)) return "$" + value.toFixed(value !== 0 && Math.abs(value) < 1 ? 4 : 2);
      if (/bytes|size|storage|disk/.test(k)) return formatBytes(value);
      return Number.isInteger(value) ? value.toLocaleString() : value.toLocaleString(undefined, { maximumFractionDigits: 3 });
    }
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function isNumeric(key, value) { return typeof value === "number"; }

  /** {a: 1, b: {c: 2}} -> [["a", 1], ["b.c", 2]] (scalars only, one level of nesting). */
  function flatten(obj, prefix = "", depth = 0) {
    const out = [];
    for (const [key, value] of Object.entries(obj || {})) {
      const name = prefix ? prefix + "." + key : key;
      if (value !== null && typeof value === "object" && !Array.isArray(value) && depth < 1) {
        out.push(...flatten(value, name, depth + 1));
      } else if (!Array.isArray(value) && (value === null || typeof value !== "object")) {
        out.push([name, value]);
      }
    }
    return out;
  }

  function rowsOf(body) {
    if (Array.isArray(body)) return body;
    if (!body || typeof body !== "object") return [];
    for (const key of ["rows", "results", "items", "models", "users", "data"]) {
      if (Array.isArray(body[key])) return body[key];
    }
    const first = Object.values(body).find(Array.isArray);
    return first || [];
  }

  function table(caption, rows, testid) {
    if (!rows.length) {
      return el("div", { "data-testid": testid }, el("h3", {}, caption), el("p", { class: "muted" }, "No data."));
    }
    const cols = [];
    for (const row of rows) {
      for (const key of Object.keys(row)) if (!cols.includes(key)) cols.push(key);
    }
    const numeric = new Set(cols.filter((c) => rows.some((r) => isNumeric(c, r[c]))));
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

  async function loadOverview() {
    const box = $("overview");
    const status = $("overview-status");
    status.textContent = "Loading…";
    try {
      const body = await api("/v1/admin/overview");
      const pairs = flatten(body);
      box.replaceChildren(...pairs.map(([k, v]) => el("div", { class: "stat", "data-testid": "overview-stat", "data-key": k },
        el("dt", {}, humanize(k)), el("dd", {}, formatValue(k, v)))));
      status.textContent = pairs.length ? "" : "No numbers yet.";
    } catch (err) {
      box.replaceChildren();
      status.textContent = unavailable(err);
    }
  }

  async function loadTable(container, caption, path, testid) {
    const box = document.querySelector(`[data-testid="${container}"]`);
    box.replaceChildren(el("p", { class: "muted" }, "Loading " + caption.toLowerCase() + "…"));
    try {
      box.replaceChildren(table(caption, rowsOf(await api(path)), testid));
    } catch (err) {
      box.replaceChildren(el("h3", {}, caption), el("p", { class: "muted", role: "status" }, unavailable(err)));
    }
  }

  function loadUsage() {
    const range = encodeURIComponent($("range").value);
    return Promise.all([
      loadTable("usage-models", "By model", "/v1/admin/usage/models?range=" + range, "usage-models-table"),
      loadTable("usage-users", "By user", "/v1/admin/usage/users?range=" + range, "usage-users-table"),
    ]);
  }

  function loadAll() {
    return Promise.all([
      loadOverview(),
      loadUsage(),
      loadTable("storage-users", "Storage", "/v1/admin/storage/users", "storage-users-table"),
    ]);
  }

  function stop(message, withLogin) {
    const box = $("admin-message");
    box.replaceChildren(message, withLogin ? " " : "", withLogin ? el("a", { href: "/" }, "Sign in") : "");
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
    $("range").addEventListener("change", loadUsage);
    $("refresh").addEventListener("click", loadAll);
    await loadAll();
  }

  boot();
})();
