// The Cost and Idle GPU holders cards, from one report (GET /api/v1/cost?by=&window=): the
// grouping and window controls; one row per group with its workloads, GPU-hours, allocated
// cost split as used + idle + unmeasured (in the report's currency) and measured GPU
// utilisation, then the total; the report's notes; a stacked bar per group (the 20 costing
// most, charts.js); and the running workloads that hold GPUs below the report's idle
// threshold, most idle cost first. The report is heavier than the other reads: dashboard.js
// re-reads it on a slower poll and when a control changes, not on each stream event (only
// when the stream reconnects and everything is re-read). A grouping or window the server
// refuses (a 400) is said in the card, not in the page's banner; the last report stays shown.

import { ApiError, api } from "./api.js";
import { renderCostChart } from "./charts.js";
import { clusterBackend, store } from "./store.js";
import {
  $, emptyRow, formatAmount, formatClock, formatDuration, formatGpus, h, pct, showMessage,
} from "./util.js";

const IDLE = "__idle__";
const UNALLOCATED = "__unallocated__";
const MAX_ROWS = 100; // lines and idle holders shown; the total counts them all
const MAX_BARS = 20; // groups in the chart: those costing most, then the special lines
const ESTIMATED = "a price was estimated from an on-demand price";

export async function loadCost() {
  const by = store.costBy;
  const span = store.costWindow;
  try {
    store.cost = await api(`/cost?by=${encodeURIComponent(by)}&window=${encodeURIComponent(span)}`);
    store.costError = "";
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 400) throw error;
    store.costError = `Cannot show the cost by ${by} over ${span}: ${error.message}`;
  }
  renderCost();
}

// what a group's line is called: the special lines in words
function lineLabel(name, by) {
  if (name === IDLE) return ["idle GPUs", "nobody held them"];
  if (name === UNALLOCATED) return [`no ${by}`, `workloads without a value for ${by}`];
  return [name, null];
}

// money or GPU-hours, the value itself in data-value
function amount(field, value) {
  return h("td", { class: "num", "data-field": field, "data-value": String(value) }, formatAmount(value));
}

function lineRow(line, by, total = false) {
  const [label, sub] = total ? ["Total", null] : lineLabel(line.name, by);
  return h(
    "tr",
    { "data-line": line.name, class: total ? "total" : null },
    h(
      "th",
      { scope: "row", "data-field": "name" },
      label,
      line.estimated ? h("span", { class: "est", title: ESTIMATED }, " *") : null,
      sub ? h("span", { class: "sub" }, sub) : null,
    ),
    h(
      "td",
      { class: "num", "data-field": "workloads", "data-value": String(line.workloads) },
      line.name === IDLE ? "–" : String(line.workloads),
    ),
    amount("gpu_hours", line.gpu_hours),
    amount("allocated", line.allocated),
    amount("used", line.used),
    amount("idle", line.idle),
    amount("unmeasured", line.unmeasured),
    h(
      "td",
      { class: "num", "data-field": "utilisation", "data-value": String(line.utilisation ?? "") },
      pct(line.utilisation),
    ),
  );
}

// the window the report covers, on the cluster's clock once the summary says which clock
function windowText(report) {
  const backend = clusterBackend();
  const span = backend
    ? `${formatClock(report.start, backend)} to ${formatClock(report.end, backend)}`
    : `the last ${formatDuration(report.end - report.start)}`;
  return `${report.currency} · ${span}`;
}

function renderControls() {
  const select = $("#cost-by");
  const preset = [...select.options].some((o) => o.value && o.value === store.costBy);
  select.value = preset ? store.costBy : "";
  for (const button of document.querySelectorAll("#cost-window button")) {
    button.setAttribute("aria-pressed", String(button.dataset.window === store.costWindow));
  }
}

function renderCost() {
  showMessage($("#cost-error"), store.costError);
  const report = store.cost;
  if (!report) return;
  const by = report.by.join(",");
  const table = $("#cost-table");
  table.dataset.by = by;
  table.dataset.window = report.window;
  table.dataset.start = String(report.start);
  table.dataset.end = String(report.end);
  for (const el of document.querySelectorAll("[data-currency]")) el.textContent = `(${report.currency})`;
  $("#cost-span").textContent = windowText(report);
  $("#cost-measured").hidden = report.measured;
  $("#cost-group-head").textContent = report.by.join(", ");

  const notes = [...report.notes];
  if (report.total.estimated) notes.push(`* ${ESTIMATED}`);
  const list = $("#cost-notes");
  list.replaceChildren(...notes.map((note) => h("li", {}, note)));
  list.hidden = notes.length === 0;

  const lines = report.lines;
  const more = lines.length - MAX_ROWS;
  const rows = lines.slice(0, MAX_ROWS).map((line) => lineRow(line, by));
  if (more > 0) {
    rows.push(emptyRow(8, `and ${more} more lines (gpufleet cost --by ${by} --window ${report.window})`));
  }
  if (!rows.length) rows.push(emptyRow(8, "Nothing ran in this window."));
  $("#cost-table tbody").replaceChildren(...rows);
  $("#cost-table tfoot").replaceChildren(lineRow(report.total, by, true));
  const charted = barLines(lines);
  $("#cost-chart-caption").textContent = "Allocated: used, idle and unmeasured" +
    (charted.length < lines.length ? ` (${charted.length} of ${lines.length} lines, costing most)` : "");
  renderCostChart(
    "chart-cost",
    charted.map((line) => ({
      label: lineLabel(line.name, by)[0],
      used: line.used,
      idle: line.idle,
      unmeasured: line.unmeasured,
    })),
    report.currency,
  );
  renderIdleHolders(report);
}

// the lines to chart: all of them, or the groups costing most and the special lines
function barLines(lines) {
  if (lines.length <= MAX_BARS) return lines;
  const special = lines.filter((line) => line.name === IDLE || line.name === UNALLOCATED);
  const groups = lines.filter((line) => line.name !== IDLE && line.name !== UNALLOCATED);
  return [...groups.slice(0, MAX_BARS - special.length), ...special];
}

function holderRow(holder, report) {
  const name = holder.workload.startsWith(`${holder.namespace}/${holder.kind}/`)
    ? holder.workload.slice(holder.namespace.length + holder.kind.length + 2)
    : holder.workload;
  return h(
    "tr",
    { "data-holder": holder.workload },
    h(
      "th",
      { scope: "row", "data-field": "workload" },
      h("span", { class: "wl-name" }, name),
      h("span", { class: "sub kind" }, holder.kind),
    ),
    h("td", { class: "nowrap", "data-field": "namespace" }, holder.namespace),
    h("td", { class: "nowrap", "data-field": "queue" }, holder.queue),
    h("td", { class: "num", "data-field": "gpus", "data-value": String(holder.gpus) }, formatGpus(holder.gpus)),
    h(
      "td",
      { class: "num", "data-field": "utilisation", "data-value": String(holder.utilisation) },
      pct(holder.utilisation),
    ),
    amount("gpu_hours", holder.gpu_hours),
    amount("idle", holder.idle),
    h(
      "td",
      { class: "num", "data-field": "held_for", "data-value": String(report.end - holder.held_since) },
      formatDuration(Math.max(0, report.end - holder.held_since)),
    ),
  );
}

// the server sorts them, most idle cost first
function renderIdleHolders(report) {
  const holders = report.idle_holders;
  const below = pct(report.idle_below);
  $("#idle-caption").textContent =
    `Running workloads whose mean GPU utilisation over the window is under ${below}, most idle cost first.`;
  $("#idle-count").textContent = holders.length ? `${holders.length} idle` : "";
  const body = $("#idle-table tbody");
  if (!holders.length) {
    body.replaceChildren(emptyRow(8, `No running workload holds GPUs under ${below} busy.`));
    return;
  }
  const more = holders.length - MAX_ROWS;
  const rows = holders.slice(0, MAX_ROWS).map((holder) => holderRow(holder, report));
  if (more > 0) rows.push(emptyRow(8, `and ${more} more`));
  body.replaceChildren(...rows);
}

// the grouping and window controls; onChange re-reads the report
export function wireCost(onChange) {
  const select = $("#cost-by");
  const input = $("#cost-by-key");
  const choose = (by) => {
    store.costBy = by;
    store.costError = "";
    renderControls();
    onChange();
  };
  select.addEventListener("change", () => {
    if (!select.value) {
      input.focus(); // "other key…": read when it is entered
      return;
    }
    input.value = "";
    choose(select.value);
  });
  // change: on Enter, or on leaving the field changed
  input.addEventListener("change", () => {
    const by = input.value.trim();
    if (by) choose(by);
  });
  for (const button of document.querySelectorAll("#cost-window button")) {
    button.addEventListener("click", () => {
      store.costWindow = button.dataset.window;
      store.costError = "";
      renderControls();
      onChange();
    });
  }
  renderControls();
}
