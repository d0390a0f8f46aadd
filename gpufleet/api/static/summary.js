// The header summary (GET /api/v1/cluster): backend, the ticking clock, speed, nodes, GPUs,
// the allocation meter, pending and running counts, policy. Each value also goes in the
// element's data-value.

import { api } from "./api.js";
import { clusterNow, store } from "./store.js";
import { $, barWidth, formatClock, formatGpus, pct } from "./util.js";

function setText(id, text, value) {
  const el = document.getElementById(id);
  el.textContent = text;
  if (value !== undefined) el.dataset.value = String(value);
}

export async function loadSummary() {
  store.summary = await api("/cluster");
  store.summaryAt = performance.now();
  renderSummary();
}

export function renderClock() {
  const s = store.summary;
  if (!s) return;
  setText("summary-time", formatClock(clusterNow(), s.backend), s.time);
}

function renderSummary() {
  const s = store.summary;
  setText("summary-backend", s.backend, s.backend);
  renderClock();
  // no speed: a world on the wall clock (this machine, Kubernetes) runs in real time
  setText("summary-speed", s.speed == null || s.speed === 1 ? "real time" : `${s.speed}×`, s.speed);
  setText("summary-nodes", String(s.nodes), s.nodes);
  setText("summary-gpus", `${formatGpus(s.gpus_allocated)} / ${s.gpus}`, s.gpus);
  setText("gpu-allocation", pct(s.gpu_allocation), s.gpu_allocation);
  $("#gpu-allocation-bar").style.width = barWidth(s.gpu_allocation);
  setText("summary-pending", String(s.workloads_pending), s.workloads_pending);
  setText("summary-running", String(s.workloads_running), s.workloads_running);
  setText("summary-policy", s.policy, s.policy);
}
