// The queues table (GET /api/v1/queues): queues as a tree, parents before children, with
// weight, GPU quota (and per-model quotas), usage bar, borrowing, share, pending and running.

import { api } from "./api.js";
import { store } from "./store.js";
import { $, barWidth, emptyRow, formatGpus, h, pct } from "./util.js";

const GPU = "nvidia.com/gpu";

export async function loadQueues() {
  store.queues = await api("/queues");
  renderQueues();
}

function queueTree(queues) {
  // parents before children, children by name; depth for the indent
  const byParent = new Map();
  const names = new Set(queues.map((q) => q.name));
  for (const q of queues) {
    const parent = q.parent && names.has(q.parent) ? q.parent : null;
    if (!byParent.has(parent)) byParent.set(parent, []);
    byParent.get(parent).push(q);
  }
  const ordered = [];
  const walk = (parent, depth) => {
    const children = (byParent.get(parent) || []).sort((a, b) => a.name.localeCompare(b.name));
    for (const q of children) {
      ordered.push([q, depth]);
      walk(q.name, depth + 1);
    }
  };
  walk(null, 0);
  return ordered;
}

function modelQuotas(map) {
  return Object.entries(map)
    .filter(([key]) => key.startsWith(`${GPU}.`))
    .map(([key, value]) => `${key.slice(GPU.length + 1)} ${formatGpus(value)}`)
    .join(" · ");
}

function queueRow(q, depth) {
  const nominal = q.nominal[GPU];
  const usage = q.usage[GPU] || 0;
  const borrowed = q.borrowed[GPU] || 0;
  const fraction = nominal ? usage / nominal : 0;
  const models = modelQuotas(q.nominal);
  const limit = q.borrowing_limit[GPU];
  return h(
    "tr",
    { "data-queue": q.name },
    h(
      "th",
      { scope: "row", class: "q-name", style: `padding-left:${8 + depth * 16}px` },
      depth ? h("span", { class: "tree" }, "└ ") : null,
      q.name,
    ),
    h("td", { class: "num", "data-field": "weight" }, String(q.weight)),
    h(
      "td",
      { class: "num", "data-field": "nominal", "data-value": String(nominal ?? "") },
      nominal == null ? "–" : formatGpus(nominal),
      models ? h("span", { class: "sub" }, models) : null,
    ),
    h(
      "td",
      { class: "num", "data-field": "usage", "data-value": String(usage) },
      formatGpus(usage),
      nominal
        ? h("span", { class: "usebar", title: `${pct(fraction)} of nominal` },
          h("i", { class: fraction > 1 ? "over" : "", style: `width:${barWidth(fraction)}` }))
        : null,
    ),
    h(
      "td",
      { class: "num", "data-field": "borrowed", "data-value": String(borrowed) },
      borrowed ? formatGpus(borrowed) : "–",
      limit != null ? h("span", { class: "sub" }, `limit ${formatGpus(limit)}`) : null,
    ),
    h("td", { class: "num", "data-field": "share", "data-value": String(q.share) }, q.share.toFixed(2)),
    h("td", { class: "num", "data-field": "pending", "data-value": String(q.pending) }, String(q.pending)),
    h("td", { class: "num", "data-field": "running", "data-value": String(q.running) }, String(q.running)),
  );
}

function renderQueues() {
  const body = $("#queues-table tbody");
  if (!store.queues.length) {
    body.replaceChildren(emptyRow(8, "No queues."));
    return;
  }
  body.replaceChildren(...queueTree(store.queues).map(([q, depth]) => queueRow(q, depth)));
}
