// gpufleet dashboard: plain ES module, no framework, no build step.
// Data comes from /api/v1 (shapes in gpufleet/api/schemas.py); live updates from the
// server-sent event stream mark parts of the page dirty, and a debounced refresh re-reads them.

import { renderCharts } from "./charts.js";
import { formatClock, formatDuration, formatGpus, h, pct } from "./util.js";

const API = "/api/v1";
const TOKEN_KEY = "gpufleet.token";
const MIN_REFRESH_MS = 1000; // at most one refresh of a part per second
const POLL_MS = 5000; // the clock and the history move without events
const MAX_ROWS = 500;
const MAX_POINTS = 3600;

const ACTIVE = new Set(["Pending", "Admitted", "Running"]);
const FINISHED = new Set(["Succeeded", "Cancelled", "Failed"]);
const STATE_ORDER = { Pending: 0, Admitted: 1, Running: 2, Failed: 3, Cancelled: 4, Succeeded: 5 };

const $ = (selector) => document.querySelector(selector);

const store = {
  token: null,
  summary: null,
  summaryAt: 0, // performance.now() when summary was read; the clock ticks on from there
  nodes: [],
  queues: [],
  workloads: [],
  history: null,
  filter: "active",
  expanded: new Set(), // workload keys whose detail row is open
  details: new Map(), // key -> {detail, explanation}
  nodeFilter: "",
};

// ---- token and API ---------------------------------------------------------------------

function takeToken() {
  const url = new URL(window.location.href);
  const fromUrl = url.searchParams.get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl);
    url.searchParams.delete("token");
    // keep the token out of the address bar, history and bookmarks
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path) {
  const response = await fetch(API + path, {
    headers: { Authorization: `Bearer ${store.token}`, Accept: "application/json" },
  });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body && body.message) message = body.message;
    } catch {
      /* not JSON: keep the status line */
    }
    throw new ApiError(response.status, message);
  }
  return response.json();
}

function showError(message) {
  const banner = $("#error-banner");
  banner.textContent = message || "";
  banner.hidden = !message;
}

// ---- refresh scheduling ----------------------------------------------------------------

const PARTS = {
  summary: async () => {
    store.summary = await api("/cluster");
    store.summaryAt = performance.now();
    renderSummary();
  },
  nodes: async () => {
    store.nodes = await api("/nodes");
    renderMap();
  },
  queues: async () => {
    store.queues = await api("/queues");
    renderQueues();
  },
  workloads: async () => {
    store.workloads = await api("/workloads");
    const known = new Set(store.workloads.map((w) => w.key));
    for (const key of store.expanded) if (!known.has(key)) store.expanded.delete(key);
    await Promise.allSettled([...store.expanded].map(fetchDetail)); // a stale one stays
    renderWorkloads();
  },
  history: async () => {
    // after the first read, only the points since the last one (the server keeps 3,600)
    const last = store.history && store.history.points.at(-1);
    if (!last) {
      store.history = await api("/history");
    } else {
      const fresh = await api(`/history?since=${encodeURIComponent(last.time)}`);
      store.history.points.push(...fresh.points.filter((p) => p.time > last.time));
      store.history.points.splice(0, Math.max(0, store.history.points.length - MAX_POINTS));
    }
    renderCharts(store.history, store.summary);
  },
};

// which parts a change of each kind can affect
const AFFECTS = {
  workload: ["workloads", "queues", "nodes", "summary"],
  queue: ["queues"],
  node: ["nodes", "summary"],
  cluster: ["summary", "history"],
  event: ["workloads"],
};

const dirty = new Set();
let lastFlush = 0;
let gapMs = MIN_REFRESH_MS;
let flushTimer = null;
let flushing = false;

function markDirty(...parts) {
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
    if (error instanceof ApiError && error.status === 401) {
      signOut("Your token was refused; sign in again.");
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

// ---- event stream ----------------------------------------------------------------------

let source = null;
let retryMs = 1000;
let retryTimer = null;

function setLive(state, text) {
  const indicator = $("#live-indicator");
  indicator.dataset.state = state;
  indicator.textContent = text;
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
    // the server dropped changes we were too slow for: re-read everything
    store.history = null;
    markDirty("summary", "nodes", "queues", "workloads", "history");
    return;
  }
  markDirty(...(AFFECTS[kind] || ["summary", "workloads", "queues", "nodes"]));
}

function connect() {
  disconnect();
  const url = `${API}/stream?token=${encodeURIComponent(store.token)}`;
  source = new EventSource(url);
  setLive("connecting", "connecting");
  source.onopen = () => {
    retryMs = 1000;
    setLive("live", "live");
    // whatever changed while we were away (perhaps a restarted server with a new clock)
    store.history = null;
    markDirty("summary", "nodes", "queues", "workloads", "history");
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

function disconnect() {
  clearTimeout(retryTimer);
  if (source) source.close();
  source = null;
}

// ---- rendering: summary ----------------------------------------------------------------

function setText(id, text, value) {
  const el = document.getElementById(id);
  el.textContent = text;
  if (value !== undefined) el.dataset.value = String(value);
}

function clusterNow() {
  const s = store.summary;
  if (!s) return 0;
  if (s.backend !== "simulated") return s.time + (performance.now() - store.summaryAt) / 1000;
  return s.time + ((performance.now() - store.summaryAt) / 1000) * (s.speed || 0);
}

function renderClock() {
  const s = store.summary;
  if (!s) return;
  setText("summary-time", formatClock(clusterNow(), s.backend), s.time);
}

function renderSummary() {
  const s = store.summary;
  setText("summary-backend", s.backend, s.backend);
  renderClock();
  setText("summary-speed", s.speed == null ? "–" : s.speed === 1 ? "real time" : `${s.speed}×`, s.speed);
  setText("summary-nodes", String(s.nodes), s.nodes);
  setText("summary-gpus", `${formatGpus(s.gpus_allocated)} / ${s.gpus}`, s.gpus);
  setText("gpu-allocation", pct(s.gpu_allocation), s.gpu_allocation);
  $("#gpu-allocation-bar").style.width = `${Math.min(100, s.gpu_allocation * 100)}%`;
  setText("summary-pending", String(s.workloads_pending), s.workloads_pending);
  setText("summary-running", String(s.workloads_running), s.workloads_running);
  setText("summary-policy", s.policy, s.policy);
}

// ---- rendering: cluster map ------------------------------------------------------------

function deviceLevel(allocated) {
  if (allocated <= 1e-9) return "free";
  if (allocated >= 1 - 1e-9) return "full";
  return "partial";
}

function deviceLabel(node, device) {
  const parts = [`${node.name} GPU ${device.index}`, device.model, `${pct(device.allocated)} allocated`];
  if (device.mig) parts.push("MIG");
  if (device.shared) parts.push("shared");
  if (device.pods.length) parts.push(`pods: ${device.pods.join(", ")}`);
  return parts.join(" · ");
}

function renderDevice(node, device) {
  const level = deviceLevel(device.allocated);
  const cell = h("span", {
    class: `dev${device.shared ? " shared" : ""}${device.mig ? " mig" : ""}`,
    role: "img",
    "aria-label": deviceLabel(node, device),
    "data-device": `${node.name}/${device.index}`,
    "data-allocated": String(device.allocated),
    "data-shared": String(device.shared),
    "data-mig": String(device.mig),
    "data-pods": device.pods.join(","),
    "data-level": level,
  });
  if (level === "partial") cell.style.setProperty("--fill", `${Math.round(device.allocated * 100)}%`);
  return cell;
}

function resourceBars(node) {
  const cpu = node.cpu ? node.cpu_allocated / node.cpu : 0;
  const mem = node.memory_mib ? node.memory_allocated_mib / node.memory_mib : 0;
  const bar = (fraction) => h("div", { class: "bar" }, h("i", { style: `width:${Math.min(100, fraction * 100)}%` }));
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

function showTooltip(target) {
  const tip = $("#device-tooltip");
  const [nodeName, index] = target.dataset.device.split("/");
  const node = store.nodes.find((n) => n.name === nodeName);
  const device = node && node.devices.find((d) => String(d.index) === index);
  if (!device) return;
  const flags = [device.mig ? "MIG" : null, device.shared ? "shared" : null].filter(Boolean);
  tip.replaceChildren(
    h("strong", {}, `${node.name} · GPU ${device.index}`),
    h("div", {}, `${device.model} · ${Math.round(device.memory_mib / 1024)} GiB`),
    h("div", {}, `${pct(device.allocated)} allocated${flags.length ? ` · ${flags.join(", ")}` : ""}`),
    device.pods.length ? h("ul", {}, device.pods.map((pod) => h("li", {}, pod))) : h("div", {}, "no pods"),
  );
  tip.hidden = false;
  const box = target.getBoundingClientRect();
  const width = tip.offsetWidth;
  const left = Math.min(window.innerWidth - width - 8, Math.max(8, box.left + box.width / 2 - width / 2));
  const below = box.bottom + 8 + tip.offsetHeight < window.innerHeight;
  tip.style.left = `${left}px`;
  tip.style.top = `${below ? box.bottom + 8 : box.top - tip.offsetHeight - 8}px`;
}

// ---- rendering: queues -----------------------------------------------------------------

const GPU = "nvidia.com/gpu";

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

function renderQueues() {
  const body = $("#queues-table tbody");
  if (!store.queues.length) {
    body.replaceChildren(h("tr", { class: "empty" }, h("td", { colspan: "8" }, "No queues.")));
    return;
  }
  const rows = queueTree(store.queues).map(([q, depth]) => {
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
            h("i", { class: fraction > 1 ? "over" : "", style: `width:${Math.min(100, fraction * 100)}%` }))
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
  });
  body.replaceChildren(...rows);
}

// ---- rendering: workloads --------------------------------------------------------------

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

async function fetchDetail(key) {
  const path = `/workloads/${key.split("/").map(encodeURIComponent).join("/")}`;
  const detail = await api(path);
  const explanation = detail.state === "Pending" ? await api(`${path}/explain`) : null;
  store.details.set(key, { detail, explanation });
}

async function toggleDetail(key) {
  if (store.expanded.has(key)) {
    store.expanded.delete(key);
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

function detailRow(key) {
  const entry = store.details.get(key);
  if (!entry) return null;
  const { detail, explanation } = entry;
  const facts = [
    `priority ${detail.priority}`,
    detail.min_member > 1 ? `gang of ${detail.min_member}` : null,
    detail.preemptible ? "preemptible" : "not preemptible",
    detail.expected_runtime != null ? `expected runtime ${formatDuration(detail.expected_runtime)}` : null,
    detail.checkpoint_interval != null ? `checkpoint every ${formatDuration(detail.checkpoint_interval)}` : null,
    explanation && explanation.position != null ? `position ${explanation.position} in queue ${explanation.queue}` : null,
    explanation && explanation.estimated_start != null
      ? `estimated start ${formatClock(explanation.estimated_start, store.summary && store.summary.backend)}`
      : null,
  ].filter(Boolean);
  const pods = h(
    "table",
    { class: "pods" },
    h("thead", {}, h("tr", {}, ["Pod", "State", "Placement", "GPUs", "CPU", "Memory"].map((t) => h("th", { scope: "col" }, t)))),
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
          h("td", { class: "num" }, formatGpus(pod.cpu)),
          h("td", { class: "num" }, `${Math.round(pod.memory_mib / 1024)} GiB`),
        ),
      ),
    ),
  );
  const events = detail.events.slice(-6).reverse();
  return h(
    "tr",
    { class: "detail", "data-detail-for": key },
    h(
      "td",
      { colspan: "8" },
      h("p", { class: "facts" }, facts.join(" · ")),
      pods,
      events.length
        ? h(
          "ul",
          { class: "events" },
          events.map((e) =>
            h(
              "li",
              { "data-type": e.type },
              h("span", { class: "when" }, formatClock(e.time, store.summary && store.summary.backend)),
              h("strong", {}, e.reason),
              ` ${e.message}`,
            ),
          ),
        )
        : null,
    ),
  );
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
    h("td", { class: "num", "data-field": "gpus", "data-value": String(w.gpus) }, formatGpus(w.gpus)),
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
  if (!rows.length) rows.push(h("tr", { class: "empty" }, h("td", { colspan: "8" }, "No workloads here.")));
  body.replaceChildren(...rows);
  $("#workloads-note").textContent =
    shown.length > MAX_ROWS ? `Showing the first ${MAX_ROWS} of ${shown.length}.` : "";
}

// ---- start-up ---------------------------------------------------------------------------

function signOut(message) {
  disconnect();
  store.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("#dashboard").hidden = true;
  $("#sign-out").hidden = true;
  $("#whoami").textContent = "";
  setLive("disconnected", "signed out");
  const error = $("#sign-in-error");
  error.textContent = message || "";
  error.hidden = !message;
  $("#sign-in").hidden = false;
  $("#token-input").focus();
}

async function start(token) {
  store.token = token;
  let who;
  try {
    who = await api("/whoami");
  } catch (error) {
    signOut(error instanceof ApiError && error.status === 401 ? "That token was refused." : error.message);
    return;
  }
  $("#sign-in").hidden = true;
  $("#dashboard").hidden = false;
  $("#sign-out").hidden = false;
  $("#whoami").textContent = `${who.tenant} · ${who.role}`;
  markDirty("summary", "nodes", "queues", "workloads", "history");
  connect();
}

function wire() {
  $("#sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("#token-input").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#token-input").value = "";
    start(token);
  });
  $("#sign-out").addEventListener("click", () => signOut(""));
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
    if (event.target.closest("[data-device]")) $("#device-tooltip").hidden = true;
  });
  setInterval(renderClock, 1000);
  setInterval(() => {
    if (store.token) markDirty("summary", "history");
  }, POLL_MS);
  // Plotly sizes charts to their box; redraw when the window changes
  window.addEventListener("resize", () => renderCharts(store.history, store.summary));
}

wire();
const token = takeToken();
if (token) start(token);
else signOut("");
