/* User management for admins (the routes `zcbot user` also uses): list, add, reset a password,
 * change the role, disable, enable. The server keeps the rules (no silent overwrite, never the last admin). */

import { api, enc } from "./api.js";
import { $, el, formatTime, itemsOf } from "./dom.js";
import { t } from "./i18n.js";

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

/** Two prompts (daily, monthly in USD): empty = the server default, 0 = no limit. */
async function editBudget(base, email) {
  let current;
  try {
    current = await api(base + "/budget");
  } catch (err) {
    say(t("users.failed", { msg: err.message }), "error");
    return;
  }
  const ask = (period, value) => {
    const answer = window.prompt(t("users.budget_prompt", { email, period: t("users.period_" + period) }),
      value === null || value === undefined ? "" : String(value));
    if (answer === null) return undefined; // cancelled
    return answer.trim() === "" ? null : Number(answer);
  };
  const daily = ask("daily", current.daily_usd);
  if (daily === undefined) return;
  const monthly = ask("monthly", current.monthly_usd);
  if (monthly === undefined) return;
  if ([daily, monthly].some((v) => v !== null && !(Number.isFinite(v) && v >= 0))) {
    say(t("users.budget_invalid"), "error");
    return;
  }
  act(() => api(base + "/budget", { method: "PUT", json: { daily_usd: daily, monthly_usd: monthly } }), t("users.saved"));
}

function userRow(u) {
  const base = "/v1/admin/users/" + enc(u.email);
  const actions = u.role === "disabled" ? [
    // A disabled user has no password: enabling gives one (typed, or generated and shown once).
    el("button", { type: "button", class: "small", "data-testid": "user-enable", onclick: async () => {
      const typed = window.prompt(t("users.enable_prompt", { email: u.email }));
      if (typed === null) return;
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
    el("button", { type: "button", class: "small", "data-testid": "user-reset", onclick: () => {
      const password = window.prompt(t("users.new_password_prompt", { email: u.email }));
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
    actions.push(el("button", { type: "button", class: "small danger", "data-testid": "user-disable", onclick: () => {
      if (window.confirm(t("users.confirm_disable", { email: u.email }))) {
        act(() => api(base + "/disable", { method: "POST" }), t("users.saved"));
      }
    } }, t("users.disable")));
  }
  return el("tr", { "data-testid": "user-row", "data-email": u.email, "data-role": u.role },
    el("td", {}, u.email), el("td", { "data-testid": "user-role-cell" }, roleLabel(u.role)),
    el("td", {}, u.has_password ? t("admin.yes") : t("admin.no")), el("td", {}, formatTime(u.created_at)),
    el("td", {}, el("div", { class: "row" }, actions)));
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
  box.replaceChildren(el("table", { class: "data", "data-testid": "users-list" },
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
