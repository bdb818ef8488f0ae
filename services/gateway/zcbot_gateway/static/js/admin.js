/* The admin page: overview numbers, users, usage by model / by user (range + sort, paged),
 * storage by user. The token is the one the dev page stored. */

import { api, auth, ApiError, onUnauthorized } from "./api.js";
import { $, el, formatBytes, itemsOf, totalOf } from "./dom.js";
import { applyI18n, t } from "./i18n.js";
import "./theme.js"; // the theme chosen on the main page
import { flatten, label, stat, table } from "./admin_tables.js";
import { loadUsers, setupUsers } from "./users.js";

const PAGE_SIZE = 20;
const pages = { "usage-models": 1, "usage-users": 1, "storage-users": 1 };

function unavailable(err) {
  if (err instanceof ApiError && err.status === 404 && !err.code.endsWith("_not_found")) return t("admin.unavailable");
  return t("admin.load_failed", { msg: err.message });
}

async function loadOverview() {
  const box = $("overview");
  const status = $("overview-status");
  status.textContent = t("admin.loading");
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
    if (Array.isArray(value)) tables.push(table(label(key), value, "overview-table"));
    else if (value !== null && typeof value === "object") {
      groups.push(el("section", { class: "stat-group", "data-testid": "overview-group", "data-group": key },
        el("h3", {}, label(key)), el("dl", { class: "stat-grid" }, flatten(value).map(([k, v]) => stat(key + "." + k, v)))));
    } else general.push(stat(key, value));
  }
  if (general.length) groups.unshift(el("dl", { class: "stat-grid" }, general));
  box.replaceChildren(...groups, ...tables.map((x) => el("div", { class: "table-wrap" }, x)));
  status.textContent = groups.length || tables.length ? "" : t("admin.no_numbers");
}

async function loadTable(container, caption, path, testid, onBody) {
  const box = document.querySelector(`[data-testid="${container}"]`);
  const page = pages[container];
  box.setAttribute("aria-busy", "true");
  box.replaceChildren(el("p", { class: "muted" }, t("admin.loading")));
  let body;
  try {
    body = await api(path + (path.includes("?") ? "&" : "?") + "page=" + page + "&page_size=" + PAGE_SIZE);
  } catch (err) {
    box.replaceChildren(el("h3", {}, caption), el("p", { class: "muted", role: "status" }, unavailable(err)));
    box.removeAttribute("aria-busy");
    return;
  }
  if (onBody) onBody(body);
  const parts = [table(caption, itemsOf(body, "rows"), testid)];
  const count = totalOf(body);
  const size = (body && body.page_size) || PAGE_SIZE;
  if (count !== null && count > size) {
    const last = Math.ceil(count / size);
    const go = (p) => { pages[container] = p; loadTable(container, caption, path, testid, onBody); };
    parts.push(el("div", { class: "row pager" },
      el("button", { type: "button", class: "small", disabled: page <= 1, onclick: () => go(page - 1) }, t("admin.previous")),
      el("span", { class: "muted" }, t("admin.page_of", { page, last, count })),
      el("button", { type: "button", class: "small", disabled: page >= last, onclick: () => go(page + 1) }, t("admin.next"))));
  }
  box.replaceChildren(...parts);
  box.removeAttribute("aria-busy");
}

function loadUsage(resetPage) {
  if (resetPage) { pages["usage-models"] = 1; pages["usage-users"] = 1; }
  const q = "?range=" + encodeURIComponent($("range").value) + "&sort=" + encodeURIComponent($("sort").value);
  return Promise.all([
    loadTable("usage-models", t("admin.by_model"), "/v1/admin/usage/models" + q, "usage-models-table"),
    loadTable("usage-users", t("admin.by_user"), "/v1/admin/usage/users" + q, "usage-users-table"),
  ]);
}

function loadStorage() {
  return loadTable("storage-users", t("admin.storage"), "/v1/admin/storage/users", "storage-users-table", (body) => {
    const parts = [];
    if (typeof body.total_bytes === "number") parts.push(t("admin.storage_total", { size: formatBytes(body.total_bytes) }));
    if (typeof body.total_files === "number") parts.push(t("admin.storage_files", { n: body.total_files.toLocaleString() }));
    if (body.partial) parts.push(t("admin.storage_partial"));
    $("storage-summary").textContent = parts.join(" · ");
  });
}

function loadAll() {
  return Promise.all([loadOverview(), loadUsers(), loadUsage(false), loadStorage()]);
}

function stop(message, withLogin) {
  const box = $("admin-message");
  box.replaceChildren(message);
  if (withLogin) box.append(" ", el("a", { href: "/" }, t("admin.sign_in")));
  box.hidden = false;
  $("admin-view").hidden = true;
}

async function boot() {
  applyI18n(document);
  onUnauthorized(() => {
    auth.clear();
    stop(t("admin.expired"), true);
  });
  if (!auth.token) {
    stop(t("admin.not_signed_in"), true);
    return;
  }
  let me;
  try {
    me = await api("/v1/me");
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) stop(t("login.unreachable", { msg: err.message }), false);
    return;
  }
  $("whoami").textContent = me.name || me.email || me.user_id;
  if (me.role !== "admin") {
    stop(t("admin.needs_admin", { id: me.user_id, role: me.role }), false);
    return;
  }
  $("admin-view").hidden = false;
  $("range").addEventListener("change", () => loadUsage(true));
  $("sort").addEventListener("change", () => loadUsage(true));
  $("refresh").addEventListener("click", loadAll);
  setupUsers();
  await loadAll();
}

boot();
