/* Sign-in: email + password (the default tab) or the platform key; sign-out. */

import { api, auth } from "./api.js";
import { $ } from "./dom.js";
import { t } from "./i18n.js";

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

export function showLogin(message) {
  $("app-view").hidden = true;
  $("login-view").hidden = false;
  for (const id of ["logout", "admin-link", "account-button"]) $(id).hidden = true;
  $("whoami").textContent = "";
  $("login-error").textContent = message || "";
  document.body.dataset.view = "login";
}

/** `enter()`: called after a successful sign-in (loads the app). */
export function setupLogin(enter, leave) {
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
      await enter();
    } catch (err) {
      // Both sign-ins answer any wrong credential with the same 403 (no account enumeration).
      const msg = err.status === 403 ? t(form.id === "login-key-form" ? "login.bad_key" : "login.bad_credentials") : err.message;
      $("login-error").textContent = t("login.failed", { msg });
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
    leave();
    showLogin("");
  });
}
