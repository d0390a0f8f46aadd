// Refresh scheduling: the event stream, the polls and sign-in mark parts of the page dirty; a
// debounced flush re-reads them together, at most once a second and never more than a third
// of the time, then reports failures in the banner and marks <body> loaded.

import { isUnauthorized, showError } from "./api.js";
import { loadAlerts } from "./alerts.js";
import { loadCost } from "./cost.js";
import { loadHistory } from "./history.js";
import { loadNodes } from "./map.js";
import { loadQueues } from "./queues.js";
import { store } from "./store.js";
import { loadSummary } from "./summary.js";
import { loadWorkloads } from "./workloads.js";

const MIN_REFRESH_MS = 1000; // at most one refresh of a part per second

// each part of the page: how to re-read and redraw it
const PARTS = {
  summary: loadSummary,
  nodes: loadNodes,
  queues: loadQueues,
  workloads: loadWorkloads,
  history: loadHistory,
  alerts: loadAlerts,
  cost: loadCost, // not on stream events: dashboard.js polls it slowly
};

export const ALL_PARTS = Object.keys(PARTS);

const dirty = new Set();
let lastFlush = 0;
let gapMs = MIN_REFRESH_MS;
let flushTimer = null;
let flushing = false;
let tokenRefused = () => {};

// what to do when a refresh finds the token refused (the entry signs out)
export function onTokenRefused(handler) {
  tokenRefused = handler;
}

export function markDirty(...parts) {
  for (const part of parts) dirty.add(part);
  if (flushTimer !== null || flushing) return;
  const wait = Math.max(0, lastFlush + gapMs - performance.now());
  flushTimer = setTimeout(flush, wait);
}

async function flush() {
  flushTimer = null;
  if (!store.token || dirty.size === 0) return;
  flushing = true;
  lastFlush = performance.now();
  const parts = [...dirty];
  dirty.clear();
  const results = await Promise.allSettled(parts.map((part) => PARTS[part]()));
  flushing = false;
  // a big cluster makes reads slow: never spend more than a third of the time refreshing
  gapMs = Math.max(MIN_REFRESH_MS, 2 * (performance.now() - lastFlush));
  const failed = results.find((r) => r.status === "rejected");
  if (failed) {
    const error = failed.reason;
    if (isUnauthorized(error)) {
      tokenRefused("Your token was refused; sign in again.");
      return;
    }
    showError(`Could not refresh: ${error.message}`);
  } else {
    showError("");
  }
  document.body.dataset.loaded = "true";
  document.body.dataset.refreshedAt = String(Date.now());
  if (dirty.size > 0) markDirty();
}
