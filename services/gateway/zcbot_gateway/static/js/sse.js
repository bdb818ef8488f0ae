/* Server-sent events read with fetch() (EventSource cannot send the Authorization header).
 * A stream that closes before `done` is resumed with Last-Event-ID; while the server cannot be
 * reached the reader keeps retrying (the connection indicator says so) instead of giving up. */

import { authHeaders, errorFrom, setOnline } from "./api.js";
import { parseJson, sleep } from "./dom.js";
import { t } from "./i18n.js";

const MAX_IDLE_RECONNECTS = 20; // reconnects in a row that brought no event (a server answering, but stuck)
const MAX_RETRY_MS = 5000;

/** Events of `url` (GET) as {id, event, data}; ends after `done`. `opened`: a response already
 *  streaming the same events (a message POSTed with Accept: text/event-stream), read first. */
export async function* sse(url, { signal, lastEventId = null, opened = null } = {}) {
  let lastId = lastEventId;
  let retryMs = 1000;
  let idle = 0;
  let offlineWait = 500;
  for (;;) {
    if (signal && signal.aborted) return;
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (lastId !== null && lastId !== "") headers["Last-Event-ID"] = String(lastId);
    let resp = opened;
    opened = null;
    try {
      if (!resp) resp = await fetch(url, { headers, signal, cache: "no-store" });
    } catch (err) {
      if (signal && signal.aborted) return;
      // The server is unreachable: not a stuck stream, so this does not count against the limit.
      setOnline(false);
      await sleep(offlineWait, signal);
      offlineWait = Math.min(offlineWait * 2, MAX_RETRY_MS);
      continue;
    }
    setOnline(true);
    offlineWait = 500;
    if (!resp.ok) {
      const err = await errorFrom(resp);
      if (resp.status < 500 || ++idle > MAX_IDLE_RECONNECTS) throw err;
      await sleep(retryMs, signal);
      continue;
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    let type = "";
    let data = [];
    let gotEvent = false;
    try {
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (signal && signal.aborted) return;
          break; // network drop: resume below
        }
        if (chunk.done) break;
        buf += decoder.decode(chunk.value, { stream: true });
        for (;;) {
          const m = /\r\n|\r|\n/.exec(buf);
          if (!m) break;
          if (m[0] === "\r" && m.index === buf.length - 1) break; // maybe half of a CRLF
          const line = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          if (line === "") {
            if (data.length || type) {
              const evt = { id: lastId, event: type || "message", data: parseJson(data.join("\n")) };
              gotEvent = true;
              yield evt;
              if (evt.event === "done") return;
            }
            type = "";
            data = [];
            continue;
          }
          if (line.startsWith(":")) continue; // comment: keep-alive / reconnect hint
          const colon = line.indexOf(":");
          const field = colon === -1 ? line : line.slice(0, colon);
          let value = colon === -1 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") type = value;
          else if (field === "data") data.push(value);
          else if (field === "id" && !value.includes("\0")) lastId = value;
          else if (field === "retry" && /^\d+$/.test(value)) retryMs = Math.min(Number(value), 30000);
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
    if (signal && signal.aborted) return;
    idle = gotEvent ? 0 : idle + 1;
    if (idle > MAX_IDLE_RECONNECTS) throw new Error(t("error.stream_lost"));
    await sleep(retryMs, signal);
  }
}
