/* Your own password (POST /v1/auth/change_password). The change revokes every older token, this
 * one too, so the page signs out and asks to sign in with the new password. */

import { api, auth } from "./api.js";
import { $, formatTime } from "./dom.js";
import { openModal } from "./focustrap.js";
import { t } from "./i18n.js";

function period(name, p) {
  if (!p) return "";
  const limit = p.limit_usd === null || p.limit_usd === undefined ? t("account.no_limit") : "$" + Number(p.limit_usd).toFixed(2);
  return t("account.period", { period: t("users.period_" + name), spent: "$" + Number(p.spent_usd || 0).toFixed(4),
    limit, resets: formatTime(p.resets_at) });
}

/** Your budget and spending (GET /v1/me/usage), shown in the account dialog. */
async function showUsage() {
  const box = $("my-usage");
  box.textContent = "";
  try {
    const u = await api("/v1/me/usage");
    box.textContent = [period("daily", u.daily), period("monthly", u.monthly)].filter(Boolean).join("\n");
  } catch (err) {
    box.textContent = t("account.usage_failed", { msg: err.message });
  }
}

export function setupAccount(afterChange) {
  const dialog = $("account-dialog");
  const form = $("password-form");
  const status = $("password-status");
  $("account-button").addEventListener("click", () => {
    form.reset();
    status.textContent = "";
    openModal(dialog);
    form.old_password.focus();
    showUsage();
  });
  $("account-close").addEventListener("click", () => dialog.close());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (form.new_password.value !== form.confirm_password.value) {
      status.textContent = t("account.mismatch");
      return;
    }
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    status.textContent = "";
    try {
      await api("/v1/auth/change_password", { method: "POST",
        json: { old_password: form.old_password.value, new_password: form.new_password.value } });
      dialog.close();
      auth.clear();
      afterChange(t("account.changed"));
    } catch (err) {
      status.textContent = t("account.failed", { msg: err.message });
    } finally {
      button.disabled = false;
    }
  });
}
