// A workload's detail row (tr[data-detail-for]): reads GET /api/v1/workloads/{ns}/{name}
// ?kind={kind} (and .../explain while it is Pending) into store.details, and draws its facts,
// its pods and where they run, their output where the server keeps it (pod-logs.js), and its
// latest events. The kind picks the workload where
// several kinds use its name (names are unique per kind and namespace, as in Kubernetes).

import { api } from "./api.js";
import { fetchLogs, logsBlock } from "./pod-logs.js";
import { clusterBackend, store } from "./store.js";
import { formatClock, formatDuration, formatGiB, formatGpus, h } from "./util.js";

export async function fetchDetail(key) {
  const found = store.workloads.find((w) => w.key === key);
  if (!found) throw new Error(`no workload ${key}`);
  const path = `/workloads/${encodeURIComponent(found.namespace)}/${encodeURIComponent(found.name)}`;
  const query = `?kind=${encodeURIComponent(found.kind)}`;
  const detail = await api(path + query);
  const explanation = detail.state === "Pending" ? await api(`${path}/explain${query}`) : null;
  store.details.set(key, { detail, explanation });
  try {
    await fetchLogs(key, found, detail);
  } catch {
    /* the logs stay as last read; the detail is shown */
  }
}

function podPlacement(pod) {
  if (!pod.node) return "–";
  const parts = [pod.node];
  if (pod.gpu_indices.length) {
    const share = pod.gpu_share != null && pod.gpu_share < 1 ? ` (${formatGpus(pod.gpu_share)} each)` : "";
    parts.push(`GPU ${pod.gpu_indices.join(", ")}${share}`);
  }
  if (pod.mig_slices.length) parts.push(`MIG ${pod.mig_slices.join(", ")}`);
  return parts.join(" · ");
}

function podsTable(detail) {
  return h(
    "table",
    { class: "pods" },
    h("thead", {}, h("tr", {}, ["Pod", "State", "Placement", "GPUs held", "Asks", "CPU", "Memory"].map((t) => h("th", { scope: "col" }, t)))),
    h(
      "tbody",
      {},
      detail.pod_views.map((pod) =>
        h(
          "tr",
          { "data-pod": pod.name },
          h("td", {}, pod.name),
          h("td", {}, pod.state),
          h("td", {}, podPlacement(pod)),
          h("td", { class: "num" }, formatGpus(pod.gpus)),
          h("td", { class: "num" }, pod.gpu_request),
          h("td", { class: "num" }, formatGpus(pod.cpu)),
          h("td", { class: "num" }, formatGiB(pod.memory_mib)),
        ),
      ),
    ),
  );
}

// the row under the workload's own, or null while its detail has not been read
export function detailRow(key) {
  const entry = store.details.get(key);
  if (!entry) return null;
  const { detail, explanation } = entry;
  const backend = clusterBackend();
  const facts = [
    `priority ${detail.priority}`,
    detail.min_member > 1 ? `gang of ${detail.min_member}` : null,
    detail.preemptible ? "preemptible" : "not preemptible",
    detail.expected_runtime != null ? `expected runtime ${formatDuration(detail.expected_runtime)}` : null,
    detail.checkpoint_interval != null ? `checkpoint every ${formatDuration(detail.checkpoint_interval)}` : null,
    explanation && explanation.position != null ? `position ${explanation.position} in queue ${explanation.queue}` : null,
    explanation && explanation.estimated_start != null
      ? `estimated start ${formatClock(explanation.estimated_start, backend)}`
      : null,
  ].filter(Boolean);
  const events = detail.events.slice(-6).reverse();
  return h(
    "tr",
    { class: "detail", "data-detail-for": key },
    h(
      "td",
      { colspan: "8" },
      h("p", { class: "facts" }, facts.join(" · ")),
      podsTable(detail),
      logsBlock(key, detail),
      events.length
        ? h(
          "ul",
          { class: "events" },
          events.map((e) =>
            h(
              "li",
              { "data-type": e.type },
              h("span", { class: "when" }, formatClock(e.time, backend)),
              h("strong", {}, e.reason),
              ` ${e.message}`,
            ),
          ),
        )
        : null,
    ),
  );
}
