/* WeCom (企业微信) binding in the settings dialog (issue 40): the binding's state, and the two ways
 * to prove a WeCom account is yours — a one-time code the app sends to that member, typed back
 * here (`PUT /v1/channels/wecom`, `POST …/verify`), or a QR scan on WeCom's login page
 * (`POST …/oauth`, which comes back to `/?wecom_binding=ok|<code>`) — and unbinding
 * (`DELETE /v1/channels/wecom`, confirmed). Refusals are said in the page's language. */

import { api } from "./api.js";
import { confirmDanger } from "./ask.js";
import { $, el } from "./dom.js";
import { t } from "./i18n.js";
import { state } from "./state.js";
import { toast } from "./toast.js";

let sentTo = ""; // the member the last code went to (a pending binding does not say it)

function errorText(err, step) {
  if (err.code === "wecom_binding_refused") {
    if (step === "scan") return t("wecom.err_scan_refused");
    const left = /(\d+) tries left/.exec(err.serverDetail || "");
    if (step === "send") return t("wecom.err_no_member");
    if (left) return t("wecom.err_wrong_code", { n: left[1] });
    if (/no binding code is pending/.test(err.serverDetail || "")) return t("wecom.err_no_code");
    return t("wecom.err_code_gone");
  }
  const key = "wecom.err_" + err.code;
  return t(key) !== key ? t(key) : err.message;
}

function fail(err, step) { $("wecom-error").textContent = errorText(err, step); }

function show(state, ...body) {
  $("wecom-state").textContent = state;
  $("wecom-body").replaceChildren(...body);
}

function sendForm() {
  const input = el("input", { name: "userid", maxlength: "64", autocomplete: "off", spellcheck: "false",
    "data-testid": "wecom-userid", value: sentTo });
  const form = el("form", { class: "stack", "data-testid": "wecom-send-form" },
    el("label", {}, el("span", {}, t("wecom.userid")), input,
      el("span", { class: "muted small-text" }, t("wecom.userid_hint"))),
    el("div", { class: "row" },
      el("button", { type: "submit", class: "primary", "data-testid": "wecom-send" }, t("wecom.send")),
      el("button", { type: "button", "data-testid": "wecom-scan", onclick: scan }, t("wecom.scan"))));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const userid = input.value.trim();
    $("wecom-error").textContent = "";
    if (!userid) { $("wecom-error").textContent = t("wecom.userid_required"); return; }
    try {
      await api("/v1/channels/wecom", { method: "PUT", json: { userid } });
      sentTo = userid;
      render({ channel: "wecom", status: "pending", code_pending: true });
    } catch (err) {
      fail(err, "send");
    }
  });
  return form;
}

function verifyForm() {
  const input = el("input", { name: "code", maxlength: "16", inputmode: "numeric", autocomplete: "one-time-code",
    "data-testid": "wecom-code" });
  const form = el("form", { class: "stack", "data-testid": "wecom-verify-form" },
    el("label", {}, el("span", {}, t("wecom.code")), input),
    el("div", { class: "row" },
      el("button", { type: "submit", class: "primary", "data-testid": "wecom-verify" }, t("wecom.verify")),
      el("button", { type: "button", "data-testid": "wecom-restart", onclick: restart }, t("wecom.restart"))));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    $("wecom-error").textContent = "";
    if (!input.value.trim()) { $("wecom-error").textContent = t("wecom.code_required"); return; }
    try {
      render(await api("/v1/channels/wecom/verify", { method: "POST", json: { code: input.value.trim() } }));
      toast(t("wecom.bound_toast"), "info", "wecom-toast");
    } catch (err) {
      fail(err, "verify");
    }
  });
  return form;
}

/** Leave a pending code (another account, or no code came): the pending claim is dropped. */
async function restart() {
  $("wecom-error").textContent = "";
  try {
    await api("/v1/channels/wecom", { method: "DELETE" });
  } catch (err) {
    if (err.status !== 404) { fail(err, "restart"); return; }
  }
  render(null);
}

async function scan() {
  $("wecom-error").textContent = "";
  try {
    const out = await api("/v1/channels/wecom/oauth", { method: "POST" });
    location.assign(out.url); // WeCom's QR page; it comes back to /?wecom_binding=…
  } catch (err) {
    fail(err, "scan");
  }
}

async function unbind() {
  if (!await confirmDanger(t("wecom.unbind_title"), t("wecom.unbind_message"), t("wecom.unbind"))) return;
  $("wecom-error").textContent = "";
  try {
    await api("/v1/channels/wecom", { method: "DELETE" });
    sentTo = "";
    render(null);
  } catch (err) {
    fail(err, "unbind");
  }
}

function render(binding) {
  const box = $("prefs-wecom");
  box.dataset.state = binding ? (binding.status === "active" ? "active" : binding.code_pending ? "code_sent" : "none") : "none";
  if (binding && binding.status === "active") {
    show(t("wecom.bound", { userid: binding.userid, method: t(binding.method === "oauth" ? "wecom.by_scan" : "wecom.by_code") }),
      el("button", { type: "button", class: "danger", "data-testid": "wecom-unbind", onclick: unbind }, t("wecom.unbind")));
  } else if (binding && binding.code_pending) {
    show(sentTo ? t("wecom.code_sent_to", { userid: sentTo }) : t("wecom.code_sent"), verifyForm());
  } else {
    show(t("wecom.unbound"), sendForm());
  }
}

/** Read the binding from the server (each time the settings dialog opens). */
export async function loadWeCom() {
  $("prefs-wecom").hidden = !state.me; // signed out (the dialog also serves the sign-in page): no account
  if (!state.me) return;
  $("wecom-error").textContent = "";
  try {
    const out = await api("/v1/channels");
    render((out.items || []).find((b) => b.channel === "wecom") || null);
  } catch (err) {
    show("", null);
    fail(err, "load");
  }
}

/** Back from WeCom's QR page: say how it went, and take the parameter out of the address. */
export function wecomOutcomeFromAddress() {
  const url = new URL(location.href);
  const outcome = url.searchParams.get("wecom_binding");
  if (!outcome) return;
  url.searchParams.delete("wecom_binding");
  history.replaceState(history.state, "", url.pathname + url.search);
  if (outcome === "ok") toast(t("wecom.bound_toast"), "info", "wecom-toast");
  else toast(t("wecom.scan_failed", { msg: errorText({ code: outcome, message: outcome, serverDetail: "" }, "scan") }),
    "error", "wecom-toast");
}
