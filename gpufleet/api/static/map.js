// The cluster map (GET /api/v1/nodes): nodes grouped into pools by GPU model, each node with
// its GPU devices (data-device, data-level ...; where the world measures them, the real use
// beside the allocation: data-util and a bar at the device's edge) and CPU and memory bars; the
// node filter; and hovering a device for its tooltip.

import { api } from "./api.js";
import { store } from "./store.js";
import { hideTooltip, showTooltip } from "./tooltip.js";
import { $, barWidth, formatGpus, h, pct } from "./util.js";

export async function loadNodes() {
  store.nodes = await api("/nodes");
  renderMap();
}

function deviceLevel(allocated) {
  if (allocated <= 1e-9) return "free";
  if (allocated >= 1 - 1e-9) return "full";
  return "partial";
}

function measured(device) {
  return device.utilization !== null && device.utilization !== undefined;
}

function deviceLabel(node, device) {
  const parts = [`${node.name} GPU ${device.index}`, device.model, `${pct(device.allocated)} allocated`];
  if (measured(device)) {
    const memory = device.memory_mib ? device.memory_used_mib / device.memory_mib : 0;
    parts.push(`${pct(device.utilization)} used`, `memory ${pct(memory)} used`);
  }
  if (device.healthy === false) parts.push("unhealthy: nothing new goes on it");
  if (device.mig) parts.push("MIG");
  if (device.shared) parts.push("shared");
  if (device.pods.length) parts.push(`pods: ${device.pods.join(", ")}`);
  return parts.join(" · ");
}

function renderDevice(node, device) {
  const level = deviceLevel(device.allocated);
  const cell = h("span", {
    class: `dev${device.shared ? " shared" : ""}${device.mig ? " mig" : ""}${device.healthy === false ? " unhealthy" : ""}`,
    role: "img",
    "aria-label": deviceLabel(node, device),
    "data-device": `${node.name}/${device.index}`,
    "data-allocated": String(device.allocated),
    "data-shared": String(device.shared),
    "data-mig": String(device.mig),
    "data-healthy": String(device.healthy !== false),
    "data-pods": device.pods.join(","),
    "data-level": level,
  });
  if (level === "partial") cell.style.setProperty("--fill", `${Math.round(device.allocated * 100)}%`);
  if (measured(device)) {
    // Real use beside allocation: a thin bar at the device's edge, its height the utilisation.
    cell.dataset.util = String(device.utilization);
    cell.dataset.memoryUsed = String(device.memory_used_mib);
    const use = h("i", { class: "use" });
    use.style.height = `${Math.round(device.utilization * 100)}%`;
    cell.append(use);
  }
  return cell;
}

function resourceBars(node) {
  const cpu = node.cpu ? node.cpu_allocated / node.cpu : 0;
  const mem = node.memory_mib ? node.memory_allocated_mib / node.memory_mib : 0;
  const bar = (fraction) => h("div", { class: "bar" }, h("i", { style: `width:${barWidth(fraction)}` }));
  return h(
    "div",
    { class: "res", title: `CPU ${node.cpu_allocated}/${node.cpu} cores · memory ${pct(mem)}` },
    h("span", {}, "cpu"),
    bar(cpu),
    h("span", {}, "mem"),
    bar(mem),
  );
}

function renderNode(node) {
  const gpuText = node.gpus ? `${formatGpus(node.gpus_allocated)}/${node.gpus} GPU` : "CPU only";
  const title = [
    node.name,
    node.gpu_model ? `${node.gpus} × ${node.gpu_model}` : "no GPUs",
    ...Object.entries(node.labels).map(([k, v]) => `${k}=${v}`),
    ...node.taints.map((t) => `taint ${t}`),
  ].join("\n");
  return h(
    "article",
    {
      class: `node${node.gpus ? "" : " cpu-only"}`,
      "data-node": node.name,
      "data-gpus": String(node.gpus),
      "data-gpus-allocated": String(node.gpus_allocated),
    },
    h(
      "div",
      { class: "node-head" },
      h("span", { class: "node-name", title }, node.name),
      h("span", { class: "node-alloc" }, gpuText),
    ),
    h(
      "div",
      { class: "devices" },
      node.devices.length
        ? node.devices.map((device) => renderDevice(node, device))
        : h("span", { class: "no-gpu" }, "no GPU devices"),
    ),
    resourceBars(node),
  );
}

function nodeMatches(node, needle) {
  if (!needle) return true;
  const haystack = [node.name, node.gpu_model || "cpu", ...Object.values(node.labels)];
  for (const device of node.devices) haystack.push(...device.pods);
  return haystack.some((text) => text.toLowerCase().includes(needle));
}

function renderMap() {
  const map = $("#cluster-map");
  const needle = store.nodeFilter.trim().toLowerCase();
  const pools = new Map();
  for (const node of store.nodes) {
    const model = node.gpu_model || (node.gpus ? "GPU" : "CPU only");
    if (!pools.has(model)) pools.set(model, []);
    pools.get(model).push(node);
  }
  const sections = [];
  for (const [model, nodes] of pools) {
    const gpus = nodes.reduce((sum, n) => sum + n.gpus, 0);
    const allocated = nodes.reduce((sum, n) => sum + n.gpus_allocated, 0);
    const shown = nodes.filter((n) => nodeMatches(n, needle));
    if (!shown.length) continue;
    const stats = gpus
      ? `${nodes.length} nodes · ${formatGpus(allocated)} of ${gpus} GPUs allocated (${pct(allocated / gpus)})`
      : `${nodes.length} nodes`;
    sections.push(
      h(
        "section",
        { class: "pool", "data-pool": model },
        h("div", { class: "pool-head" }, h("h3", {}, model), h("span", {}, stats)),
        h("div", { class: "nodes" }, shown.map(renderNode)),
      ),
    );
  }
  if (!sections.length) {
    sections.push(h("p", { class: "note" }, store.nodes.length ? "No node matches the filter." : "No nodes."));
  }
  map.replaceChildren(...sections);
}

export function wireMap() {
  $("#node-filter").addEventListener("input", (event) => {
    store.nodeFilter = event.target.value;
    renderMap();
  });
  const map = $("#cluster-map");
  map.addEventListener("mouseover", (event) => {
    const cell = event.target.closest("[data-device]");
    if (cell) showTooltip(cell);
  });
  map.addEventListener("mouseout", (event) => {
    if (event.target.closest("[data-device]")) hideTooltip();
  });
}
