/* User management for admins (the routes `zcbot user` also uses): list, add, reset a password,
 * change the role, disable, enable. The server keeps the rules (no silent overwrite, never the last admin). */

import { api, enc } from "./api.js";
import { $, el, formatTime, itemsOf } from "./dom.js";
import { t } from "./i18n.js";
import { ask, confirmDanger } from "./ask.js";

function say(text, kind = "muted") {
  const status = $("users-status");
  status.className = kind;
  status.textContent = text;
}

async function act(call, done) {
  say(""); // each action's own answer replaces the last one's
  try {
    await call();
    say(done);
    await loadUsers();
  } catch (err) {
    say(t("users.failed", { msg: err.message }), "error");
  }
}

function roleLabel(role) {
  return t("users.role_" + role) === "users.role_" + role ? role : t("users.role_" + role);
}

/** One dialog, daily and monthly in USD: empty = the server default, 0 = no limit. */
async function editBudget(base, email) {
  let current;
  try {
    current = await api(base + "/budget");
  } catch (err) {
    say(t("users.failed", { msg: err.message }), "error");
    return;
  }
  const shown = (v) => (v === null || v === undefined ? "" : String(v));
  const parse = (v) => (v.trim() === "" ? null : Number(v));
  const answer = await ask({
    title: t("users.budget_title", { email }),
    message: t("users.budget_hint"),
    fields: ["daily", "monthly"].map((p) => ({ name: p, label: t("users.period_" + p) + " (USD)", inputmode: "decimal",
      value: shown(current[p + "_usd"]) })),
    confirm: t("users.save"),
    check: (v) => [v.daily, v.monthly].map(parse).some((x) => x !== null && !(Number.isFinite(x) && x >= 0))
      ? t("users.budget_invalid") : "",
  });
  if (!answer) return;
  act(() => api(base + "/budget", { method: "PUT", json: { daily_usd: parse(answer.daily), monthly_usd: parse(answer.monthly) } }),
    t("users.saved"));
}

function userRow(u) {
  const base = "/v1/admin/users/" + enc(u.email);
  const actions = u.role === "disabled" ? [
    // A disabled user has no password: enabling gives one (typed, or generated and shown once).
    el("button", { type: "button", class: "small", "data-testid": "user-enable", onclick: async () => {
      const answer = await ask({ title: t("users.enable_title", { email: u.email }),
        fields: [{ name: "password", type: "password", label: t("users.new_password"), hint: t("users.enable_hint") }],
        confirm: t("users.enable") });
      if (answer === null) return;
      const typed = answer.password;
      say("");
      try {
        const done = await api(base + "/enable", { method: "POST", json: typed ? { password: typed } : {} });
        await loadUsers();
        say(done.password ? t("users.enabled_password", { email: u.email, password: done.password })
          : t("users.enabled", { email: u.email }));
      } catch (err) {
        say(t("users.failed", { msg: err.message }), "error");
      }
    } }, t("users.enable")),
  ] : [
    el("button", { type: "button", class: "small", "data-testid": "user-reset", onclick: async () => {
      const answer = await ask({ title: t("users.reset_title", { email: u.email }),
        fields: [{ name: "password", type: "password", label: t("users.new_password") }],
        confirm: t("users.save"), check: (v) => (v.password ? "" : t("users.password_required")) });
      const password = answer && answer.password;
      if (password) act(() => api(base + "/password", { method: "PUT", json: { password } }), t("users.saved"));
    } }, t("users.reset")),
  ];
  actions.push(el("button", { type: "button", class: "small", "data-testid": "user-budget",
    onclick: () => editBudget(base, u.email) }, t("users.budget")));
  if (u.role !== "disabled") {
    const next = u.role === "admin" ? "user" : "admin";
    actions.push(el("button", { type: "button", class: "small", "data-testid": "user-role",
      onclick: () => act(() => api(base + "/role", { method: "PUT", json: { role: next } }), t("users.saved")) },
    next === "admin" ? t("users.make_admin") : t("users.make_user")));
    actions.push(el("button", { type: "button", class: "small danger", "data-testid": "user-disable", onclick: async () => {
      if (await confirmDanger(t("users.disable_title"), t("users.confirm_disable", { email: u.email }), t("users.disable"))) {
        act(() => api(base + "/disable", { method: "POST" }), t("users.saved"));
      }
    } }, t("users.disable")));
  }
  // data-label: each cell's column head, shown in it when the table is a list of cards (< 600 px).
  return el("tr", { "data-testid": "user-row", "data-email": u.email, "data-role": u.role },
    el("td", { class: "card-title", "data-label": t("users.email") }, u.email),
    el("td", { "data-testid": "user-role-cell", "data-label": t("users.role") }, roleLabel(u.role)),
    el("td", { "data-label": t("users.has_password") }, u.has_password ? t("admin.yes") : t("admin.no")),
    el("td", { "data-label": t("users.created") }, formatTime(u.created_at)),
    el("td", { class: "card-actions", "data-label": t("users.actions") }, el("div", { class: "row" }, actions)));
}

export async function loadUsers() {
  const box = $("users-table");
  let users;
  try {
    users = itemsOf(await api("/v1/admin/users?page_size=100")).filter((u) => u.email);
  } catch (err) {
    box.replaceChildren(el("p", { class: "error", role: "alert" }, t("admin.load_failed", { msg: err.message })));
    return;
  }
  if (!users.length) {
    box.replaceChildren(el("p", { class: "muted" }, t("users.empty")));
    return;
  }
  box.replaceChildren(el("table", { class: "data cards", "data-testid": "users-list" },
    el("thead", {}, el("tr", {}, [t("users.email"), t("users.role"), t("users.has_password"), t("users.created"),
      t("users.actions")].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, users.map(userRow))));
}

export function setupUsers() {
  $("add-user-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = e.target;
    const body = { email: f.email.value.trim(), password: f.password.value, role: f.role.value };
    act(async () => {
      await api("/v1/admin/users", { method: "POST", json: body });
      f.reset();
    }, t("users.added", { email: body.email }));
  });
}
