/* A failed run in plain words: the error's code (the runner's ErrorEvent.code) or, for a model or
 * provider error (LiteLLM's exception text, with JSON), what its words say; the raw text stays
 * under "详情", and Retry sends the last message again. */

import { el, notice } from "./dom.js";
import { t } from "./i18n.js";

const BY_CODE = {
  missing_api_key: "cause.auth", timeout: "cause.timeout", lost: "cause.lost", events_lost: "cause.lost",
  internal: "cause.internal", config: "cause.config", budget_exceeded: "cause.budget",
};

// First match wins: a context-length refusal is also a 400, an auth error may say "invalid request".
const BY_TEXT = [
  [/context.?(window|length)|maximum context|too many tokens|prompt is too long/i, "cause.context"],
  [/budget/i, "cause.budget"],
  [/authenticat|api.?key|\b401\b|\b403\b|permission|unauthori[sz]ed|forbidden/i, "cause.auth"],
  [/rate.?limit|\b429\b|too many requests|quota/i, "cause.rate_limit"],
  [/time.?out|timed out/i, "cause.timeout"],
  [/overload|unavailable|\b50[0234]\b|internal server error|bad gateway|server.?error/i, "cause.provider_down"],
  [/connect|network|dns|resolve|unreachable|refused/i, "cause.connection"],
];

export function plainCause(code, message) {
  if (code && BY_CODE[code]) return t(BY_CODE[code]);
  for (const [pattern, key] of BY_TEXT) if (pattern.test(message || "")) return t(key);
  return t("cause.unknown");
}

/** The user's last message in the conversation shown: what Retry sends again. */
function lastUserText() {
  const all = document.querySelectorAll("#messages [data-testid=user-text]");
  return all.length ? all[all.length - 1].textContent : "";
}

/** The failed-run notice: the cause in words, the raw error folded away, and Retry (when `send`). */
export function failureNotice(code, message, send) {
  const box = notice("error", "", "run-error");
  box.classList.add("run-failure");
  box.dataset.code = code || "";
  box.rawMessage = message || "";
  box.append(el("span", { class: "cause", "data-testid": "run-error-cause" }, t("run.failed_because", { cause: plainCause(code, message) })));
  if (send) {
    const retry = el("button", { type: "button", class: "small", "data-testid": "retry-run" }, t("run.retry"));
    retry.addEventListener("click", async () => {
      const text = lastUserText();
      if (!text) return;
      retry.disabled = true;
      if (!(await send(text))) retry.disabled = false;
    });
    box.append(" ", retry);
  }
  if (message) {
    box.append(el("details", { class: "raw-error", "data-testid": "run-error-detail" },
      el("summary", {}, t("run.error_detail")), el("pre", {}, String(message).slice(0, 4000))));
  }
  return box;
}
