// The workloads table (GET /api/v1/workloads): the state filter buttons and their counts,
// one row per workload (data-workload, data-state), sorted by state then newest first, at
// most 500 rows, and opening or closing a workload's detail row.

import { api, showError } from "./api.js";
import { clusterNow, store } from "./store.js";
import { $, emptyRow, formatDuration, formatGpus, h } from "./util.js";
import { detailRow, fetchDetail } from "./workload-detail.js";

const MAX_ROWS = 500;

const ACTIVE = new Set(["Pending", "Admitted", "Running"]);
const FINISHED = new Set(["Succeeded", "Cancelled", "Failed"]);
const STATE_ORDER = { Pending: 0, Admitted: 1, Running: 2, Failed: 3, Cancelled: 4, Succeeded: 5 };

export async function loadWorkloads() {
  store.workloads = await api("/workloads");
  const known = new Set(store.workloads.map((w) => w.key));
  for (const key of store.expanded) {
    if (!known.has(key)) {
      store.expanded.delete(key);
      store.logs.delete(key);
    }
  }
  await Promise.allSettled([...store.expanded].map(fetchDetail)); // a stale one stays
  renderWorkloads();
}

function matchesFilter(workload, filter) {
  if (filter === "all") return true;
  if (filter === "active") return ACTIVE.has(workload.state);
  if (filter === "finished") return FINISHED.has(workload.state);
  return workload.state === filter;
}

function renderFilterCounts() {
  for (const button of document.querySelectorAll("#state-filter button")) {
    const filter = button.dataset.filter;
    const count = store.workloads.filter((w) => matchesFilter(w, filter)).length;
    let badge = button.querySelector(".count");
    if (!badge) {
      badge = h("span", { class: "count" });
      button.append(badge);
    }
    badge.textContent = String(count);
    button.setAttribute("aria-pressed", String(filter === store.filter));
  }
}

async function toggleDetail(key) {
  if (store.expanded.has(key)) {
    store.expanded.delete(key);
    store.logs.delete(key); // opened again, it shows the logs' tails afresh
  } else {
    store.expanded.add(key);
    try {
      await fetchDetail(key);
    } catch (error) {
      store.expanded.delete(key);
      showError(`Could not read ${key}: ${error.message}`);
    }
  }
  renderWorkloads();
}

function workloadRow(w, now) {
  const waited = w.started != null ? w.started - w.submitted : ACTIVE.has(w.state) ? now - w.submitted : null;
  const ns = w.namespace ? h("span", { class: "ns" }, `${w.namespace}/`) : null;
  const open = store.expanded.has(w.key);
  return h(
    "tr",
    { "data-workload": w.key, "data-state": w.state, class: open ? "open" : null },
    h(
      "td",
      { class: "nowrap" },
      h(
        "button",
        { type: "button", class: "disclose", "aria-expanded": String(open), "data-toggle": w.key },
        h("span", { class: "wl-name" }, ns, w.name),
      ),
      h("span", { class: "sub kind" }, w.priority_class ? `${w.kind} · ${w.priority_class}` : w.kind),
    ),
    h("td", { class: "nowrap", "data-field": "tenant" }, w.tenant),
    h("td", { class: "nowrap", "data-field": "queue" }, w.queue),
    h("td", { "data-field": "state" }, h("span", { class: "badge", "data-state": w.state }, w.state)),
    h(
      "td",
      { class: "num", "data-field": "gpus", "data-value": String(w.gpus), title: "GPUs held (charged to the queue)" },
      formatGpus(w.gpus),
      h("span", { class: "sub request", "data-field": "gpu-request", title: "what its pods ask for" }, `asks ${w.gpu_request}`),
    ),
    h("td", { class: "num", "data-field": "pods" }, `${w.pods_running}/${w.pods}`),
    h(
      "td",
      { class: "num", title: w.started != null ? "waited before starting" : "waiting so far" },
      waited == null ? "–" : formatDuration(waited),
    ),
    h(
      "td",
      { class: "why", "data-field": "waiting-for" },
      w.waiting_for ? h("span", { class: "why-kind" }, w.waiting_for) : null,
      w.message ? h("span", { class: "why-msg", "data-field": "message" }, w.message) : null,
    ),
  );
}

function renderWorkloads() {
  renderFilterCounts();
  const now = clusterNow();
  const shown = store.workloads
    .filter((w) => matchesFilter(w, store.filter))
    .sort((a, b) => (STATE_ORDER[a.state] ?? 9) - (STATE_ORDER[b.state] ?? 9) || b.submitted - a.submitted);
  const body = $("#workloads-table tbody");
  const rows = shown
    .slice(0, MAX_ROWS)
    .flatMap((w) => [workloadRow(w, now), store.expanded.has(w.key) ? detailRow(w.key) : null])
    .filter(Boolean);
  if (!rows.length) rows.push(emptyRow(8, "No workloads here."));
  body.replaceChildren(...rows);
  $("#workloads-note").textContent =
    shown.length > MAX_ROWS ? `Showing the first ${MAX_ROWS} of ${shown.length}.` : "";
}

export function wireWorkloads() {
  $("#state-filter").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-filter]");
    if (!button) return;
    store.filter = button.dataset.filter;
    renderWorkloads();
  });
  $("#workloads-table").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-toggle]");
    if (button) toggleDetail(button.dataset.toggle);
  });
}
