// The live connection: GET /api/v1/stream as server-sent events, each change marking the
// parts of the page it can affect dirty; reconnecting with back-off; and the live indicator
// (#live-indicator, data-state connecting / live / disconnected).

import { API } from "./api.js";
import { ALL_PARTS, markDirty } from "./refresh.js";
import { store } from "./store.js";
import { $ } from "./util.js";

// which parts a change of each kind can affect
const AFFECTS = {
  workload: ["workloads", "queues", "nodes", "summary"],
  queue: ["queues"],
  node: ["nodes", "summary"],
  cluster: ["summary", "history"],
  event: ["workloads"],
  alert: ["alerts"],
};

let source = null;
let retryMs = 1000;
let retryTimer = null;

export function setLive(state, text) {
  const indicator = $("#live-indicator");
  indicator.dataset.state = state;
  indicator.textContent = text;
}

// re-read everything, the history from scratch
function rereadAll() {
  store.history = null;
  markDirty(...ALL_PARTS);
}

function onChange(event) {
  let change = {};
  try {
    change = JSON.parse(event.data);
  } catch {
    /* a keep-alive or a message we do not know: refresh everything it could touch */
  }
  const kind = change.kind || event.type;
  if (change.data && change.data.resync) {
    // the server dropped changes we were too slow for
    rereadAll();
    return;
  }
  markDirty(...(AFFECTS[kind] || ["summary", "workloads", "queues", "nodes"]));
}

export function connect() {
  disconnect();
  const url = `${API}/stream?token=${encodeURIComponent(store.token)}`;
  source = new EventSource(url);
  setLive("connecting", "connecting");
  source.onopen = () => {
    retryMs = 1000;
    setLive("live", "live");
    // whatever changed while we were away (perhaps a restarted server with a new clock)
    rereadAll();
  };
  source.onmessage = onChange;
  for (const kind of Object.keys(AFFECTS)) source.addEventListener(kind, onChange);
  source.addEventListener("change", onChange);
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      // the browser gave up (e.g. an error status): retry ourselves, backing off
      setLive("disconnected", "disconnected");
      source.close();
      retryTimer = setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    } else {
      setLive("disconnected", "reconnecting");
    }
  };
}

export function disconnect() {
  clearTimeout(retryTimer);
  if (source) source.close();
  source = null;
}
