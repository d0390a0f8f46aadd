// The charts' data: GET /api/v1/history, all of it on the first read, then only the points
// since the last one, keeping as many as the server does (3,600); and redrawing the charts.

import { api } from "./api.js";
import { renderCharts } from "./charts.js";
import { store } from "./store.js";

const MAX_POINTS = 3600;

export async function loadHistory() {
  // after the first read, only the points since the last one (the server keeps 3,600)
  const last = store.history && store.history.points.at(-1);
  if (!last) {
    store.history = await api("/history");
  } else {
    const fresh = await api(`/history?since=${encodeURIComponent(last.time)}`);
    store.history.points.push(...fresh.points.filter((p) => p.time > last.time));
    store.history.points.splice(0, Math.max(0, store.history.points.length - MAX_POINTS));
  }
  redrawCharts();
}

export function redrawCharts() {
  renderCharts(store.history, store.summary);
}
