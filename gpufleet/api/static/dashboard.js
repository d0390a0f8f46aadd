// gpufleet dashboard: plain ES modules, no framework, no build step. This entry wires them
// together. Data comes from /api/v1 (shapes in gpufleet/api/schemas.py, requests in api.js,
// shared state in store.js, helpers in util.js); live updates from the server-sent event
// stream (stream.js) mark parts of the page dirty, and a debounced refresh (refresh.js)
// re-reads them: the header summary (summary.js), the cluster map (map.js, tooltip.js), the
// alerts (alerts.js), the queues (queues.js), the workloads (workloads.js,
// workload-detail.js, pod-logs.js: polled while an open row shows a running run's output)
// and the charts (history.js, charts.js). The cost and idle GPU holders
// cards (cost.js) are re-read on a slower poll of their own and when their controls change,
// not on stream events. session.js signs in and out.

import { wireCost } from "./cost.js";
import { redrawCharts } from "./history.js";
import { wireMap } from "./map.js";
import { followingLogs } from "./pod-logs.js";
import { markDirty, onTokenRefused } from "./refresh.js";
import { signOut, start, takeToken, wireSession } from "./session.js";
import { store } from "./store.js";
import { renderClock } from "./summary.js";
import { wireWorkloads } from "./workloads.js";

const POLL_MS = 5000; // the clock and the history move without events
const COST_POLL_MS = 30000; // the cost report is heavier to make: every 30 s, not on events
const LOG_POLL_MS = 2000; // a run's output comes without events: read it while a row shows it

onTokenRefused(signOut);
wireSession();
wireWorkloads();
wireMap();
wireCost(() => markDirty("cost"));
setInterval(renderClock, 1000);
setInterval(() => {
  if (store.token) markDirty("summary", "history", "alerts");
}, POLL_MS);
setInterval(() => {
  if (store.token) markDirty("cost");
}, COST_POLL_MS);
setInterval(() => {
  if (store.token && followingLogs()) markDirty("workloads");
}, LOG_POLL_MS);
// Plotly sizes charts to their box; redraw when the window changes
window.addEventListener("resize", () => redrawCharts());

const token = takeToken();
if (token) start(token);
else signOut("");
