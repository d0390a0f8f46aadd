// The output of a workload's pods in its detail row, where the server keeps it (serve --local:
// GET /api/v1/workloads/{ns}/{name}/logs): each pod's latest run, its last lines first (the
// log's tail), then followed from where the last read ended while the row is open. A pod that
// starts a new run shows that run's tail. At most MAX_LINES lines are kept per pod; the whole
// log is `gpufleet logs`'. The first MAX_PODS pods of a workload are shown.

import { api } from "./api.js";
import { clusterBackend, store } from "./store.js";
import { h } from "./util.js";

const TAIL_BYTES = 16384; // the first read of a run: its last 16 KiB
const MAX_LINES = 200;
const MAX_PODS = 8; // a big gang's first pods only

// whether this server keeps the output of its workloads' runs
export function hasLogs() {
  return clusterBackend() === "local";
}

function keepLast(text) {
  const lines = text.split("\n");
  return lines.length > MAX_LINES + 1 ? lines.slice(-(MAX_LINES + 1)).join("\n") : text;
}

async function readPod(base, pod, seen) {
  const path = `${base}&pod=${encodeURIComponent(pod)}`;
  if (seen && seen.attempt > 0) {
    const more = await api(`${path}&attempt=${seen.attempt}&offset=${seen.next}`);
    if (more.attempts === seen.attempt) {
      // still the same run: what it wrote since
      const text = keepLast(seen.text + more.text);
      return { ...more, text, clipped: seen.clipped || text.length < seen.text.length + more.text.length };
    }
  }
  // the first read, or a new run: its tail, from the first whole line
  const tail = await api(`${path}&tail=${TAIL_BYTES}`);
  let text = tail.text;
  const clipped = tail.offset > 0;
  if (clipped) text = text.slice(text.indexOf("\n") + 1);
  return { ...tail, text: keepLast(text), clipped };
}

// read what is new in the logs of every pod of a workload (its detail already read)
export async function fetchLogs(key, found, detail) {
  if (!hasLogs()) return;
  const base =
    `/workloads/${encodeURIComponent(found.namespace)}/${encodeURIComponent(found.name)}/logs` +
    `?kind=${encodeURIComponent(found.kind)}`;
  const before = store.logs.get(key) || new Map();
  const pods = detail.pod_views.slice(0, MAX_PODS).map((pod) => pod.name);
  const reads = await Promise.all(pods.map((pod) => readPod(base, pod, before.get(pod))));
  const after = new Map(pods.map((pod, i) => [pod, { ...reads[i], next: reads[i].next_offset }]));
  store.logs.set(key, after);
}

// whether an open detail row shows a run that goes on (its log is worth reading again)
export function followingLogs() {
  for (const key of store.expanded) {
    for (const log of (store.logs.get(key) || new Map()).values()) if (log.running) return true;
  }
  return false;
}

// the logs of a workload's pods that have run, for its detail row (null: none)
export function logsBlock(key, detail) {
  const logs = store.logs.get(key);
  if (!logs) return null;
  const shown = [...logs.entries()].filter(([, log]) => log.attempts > 0);
  if (!shown.length) return null;
  const unread = detail.pod_views.length - logs.size;
  return h(
    "div",
    { class: "logs" },
    unread > 0
      ? h("p", { class: "log-head" }, `The first ${logs.size} pods' output; ${unread} more: gpufleet logs --pod NAME.`)
      : null,
    shown.map(([pod, log]) =>
      h(
        "div",
        { class: "log", "data-log-for": pod, "data-attempt": String(log.attempt), "data-running": String(log.running) },
        h(
          "div",
          { class: "log-head" },
          h("strong", {}, pod),
          ` · run ${log.attempt} of ${log.attempts}`,
          log.running ? " · running" : "",
          log.clipped ? ` · its last lines (gpufleet logs for all)` : "",
        ),
        h("pre", {}, log.text || "(no output)"),
      ),
    ),
  );
}
