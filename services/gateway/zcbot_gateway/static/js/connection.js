/* The disconnected indicator: any failed fetch marks the page offline (api.js, sse.js); while
 * offline a probe of /healthz every few seconds brings it back, and the page reloads what it shows. */

import { isOnline, onConnectionChange, setOnline } from "./api.js";
import { $ } from "./dom.js";
import { t } from "./i18n.js";

const PROBE_MS = 2000;
let timer = null;

function render(online) {
  const badge = $("conn-status");
  if (!badge) return;
  badge.dataset.state = online ? "online" : "offline";
  badge.textContent = online ? t("conn.online") : t("conn.offline");
  badge.title = online ? "" : t("conn.offline_hint");
}

async function probe() {
  try {
    const resp = await fetch("/healthz", { cache: "no-store" });
    if (resp.ok) setOnline(true);
  } catch (_) { /* still down */ }
}

/** `onBack`: called when the connection returns (reload lists, re-follow the run). */
export function setupConnection(onBack) {
  render(isOnline());
  onConnectionChange((online) => {
    render(online);
    if (!online && timer === null) timer = setInterval(probe, PROBE_MS);
    if (online) {
      clearInterval(timer);
      timer = null;
      onBack();
    }
  });
  window.addEventListener("offline", () => setOnline(false));
  window.addEventListener("online", probe);
}
