// Small helpers shared by the dashboard's modules: building elements, showing messages,
// formatting numbers (fractions, GPUs, money and GPU-hours, memory), durations and the
// cluster's clock.

export const $ = (selector) => document.querySelector(selector);

// h("td", {class: "num"}, "3", child...) -> an element; children may be strings, nodes,
// arrays of them, or null (skipped). Text goes in as text, never as HTML.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// a message element (banner, form error): shown with the text, hidden without one
export function showMessage(el, message) {
  el.textContent = message || "";
  el.hidden = !message;
}

// the one row of an empty table, across all of its columns
export function emptyRow(columns, text) {
  return h("tr", { class: "empty" }, h("td", { colspan: String(columns) }, text));
}

// a bar's CSS width for a fraction, at most full
export function barWidth(fraction) {
  return `${Math.min(100, fraction * 100)}%`;
}

export function pct(fraction) {
  if (fraction == null || Number.isNaN(fraction)) return "–";
  return `${(fraction * 100).toFixed(1)}%`;
}

// GPUs: whole numbers as such, shares with up to two decimals (0.25, 1.5)
export function formatGpus(value) {
  if (value == null) return "–";
  return Number.isInteger(value) ? String(value) : String(Math.round(value * 100) / 100);
}

// money and GPU-hours: two decimals with thousands separators, as `gpufleet cost` writes
// money: 1234.5 -> "1,234.50" (halves round up, as the tests' Decimal ROUND_HALF_UP does)
export function formatAmount(value) {
  if (value == null || Number.isNaN(value)) return "–";
  return value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
}

// MiB as whole GiB: 40960 -> "40 GiB"
export function formatGiB(mib) {
  return `${Math.round(mib / 1024)} GiB`;
}

const pad = (n) => String(Math.floor(n)).padStart(2, "0");

// The one format of durations (gpufleet/model/times.py): 8.1 -> "8.1s", 75 -> "1m15s",
// 5400 -> "1h30m", 190000 -> "2d04h"
export function formatDuration(seconds) {
  if (seconds == null || Number.isNaN(seconds)) return "–";
  if (seconds < 0) return `-${formatDuration(-seconds)}`;
  if (seconds < 9.95) return `${seconds.toFixed(1)}s`.replace(".0s", "s");
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${pad((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d${pad((s % 86400) / 3600)}h`;
}

// The cluster's clock, as the CLI and the API's messages write it: simulated seconds since the
// start as "t=39m09s", Unix time (Kubernetes) as "2026-11-24 15:38:02 UTC".
export function formatClock(seconds, backend) {
  if (seconds == null) return "–";
  if (backend !== "simulated") {
    return `${new Date(seconds * 1000).toISOString().slice(0, 19).replace("T", " ")} UTC`;
  }
  return `t=${formatDuration(seconds)}`;
}
