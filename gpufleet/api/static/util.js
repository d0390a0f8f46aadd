// Small helpers shared by the dashboard's modules: building elements, showing messages,
// formatting numbers, durations and the cluster's clock.

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

// MiB as whole GiB: 40960 -> "40 GiB"
export function formatGiB(mib) {
  return `${Math.round(mib / 1024)} GiB`;
}

const pad = (n) => String(Math.floor(n)).padStart(2, "0");

// 75 -> "1m 15s", 5400 -> "1h 30m", 190000 -> "2d 4h"
export function formatDuration(seconds) {
  if (seconds == null || Number.isNaN(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

// The cluster's clock: simulated seconds since the start as "[Nd ]hh:mm:ss", Unix time as
// local date and time.
export function formatClock(seconds, backend) {
  if (seconds == null) return "–";
  if (backend !== "simulated") {
    return new Date(seconds * 1000).toLocaleString(undefined, { hour12: false });
  }
  const s = Math.max(0, Math.floor(seconds));
  const days = Math.floor(s / 86400);
  const clock = `${pad((s % 86400) / 3600)}:${pad((s % 3600) / 60)}:${pad(s % 60)}`;
  return days ? `${days}d ${clock}` : clock;
}
