// The alerts table (GET /api/v1/alerts), one row per alert name and state: firing first, then
// pending, then recently resolved, with the severity, how many and about what (a pod, else a
// node's GPU), the values compared, since when, and the rule's condition. A round that could not read the series
// (Prometheus down) says so above the table.

import { api } from "./api.js";
import { clusterNow, store } from "./store.js";
import { $, emptyRow, formatDuration, h, showMessage } from "./util.js";

const ORDER = { firing: 0, pending: 1, resolved: 2 };

export async function loadAlerts() {
  store.alerts = await api("/alerts");
  renderAlerts();
}

// what an alert is about: a pod, else a node's GPU
function subject(alert) {
  const labels = alert.labels;
  if (labels.pod) return `${labels.namespace || ""}/${labels.pod}`;
  if (labels.Hostname) return `${labels.Hostname} GPU ${labels.gpu ?? "?"}`;
  return "–";
}

function since(alert) {
  if (alert.resolved_at != null) return alert.resolved_at;
  return alert.fired_at ?? alert.active_at;
}

const SHOWN_SUBJECTS = 3;

// one row per alert name and state: how many, about what (the first few), the range of
// values, since the oldest; a busy cluster can have hundreds of alerts of one rule
function groupRow(group) {
  const { first, alerts } = group;
  const subjects = alerts.map(subject);
  const more = subjects.length - SHOWN_SUBJECTS;
  const values = alerts.map((a) => a.value);
  const round = (v) => String(Math.round(v * 100) / 100);
  const low = Math.min(...values);
  const high = Math.max(...values);
  const oldest = Math.min(...alerts.map(since));
  return h(
    "tr",
    { "data-alert": first.alertname, "data-state": first.state, "data-count": String(alerts.length) },
    h("td", {}, h("span", { class: `badge alert-${first.state}` }, first.state)),
    h("td", { class: `sev sev-${first.severity}` }, first.severity),
    h("th", { scope: "row" }, first.alertname, h("span", { class: "sub" }, first.summary)),
    h(
      "td",
      { "data-field": "subject", title: subjects.join("\n") },
      alerts.length > 1 ? `${alerts.length} × ` : "",
      subjects.slice(0, SHOWN_SUBJECTS).join(", "),
      more > 0 ? h("span", { class: "sub" }, `and ${more} more (gpufleet alerts)`) : null,
    ),
    h("td", { class: "num", "data-field": "value" }, low === high ? round(low) : `${round(low)}–${round(high)}`),
    h("td", { class: "num" }, formatDuration(Math.max(0, clusterNow() - oldest))),
    h("td", { class: "cond" }, first.condition),
  );
}

function groupsOf(alerts) {
  const groups = new Map();
  for (const alert of alerts) {
    const key = `${alert.state}|${alert.alertname}`;
    if (!groups.has(key)) groups.set(key, { first: alert, alerts: [] });
    groups.get(key).alerts.push(alert);
  }
  return [...groups.values()].sort(
    (a, b) => ORDER[a.first.state] - ORDER[b.first.state] || a.first.alertname.localeCompare(b.first.alertname),
  );
}

function renderAlerts() {
  const found = store.alerts;
  const body = $("#alerts-table tbody");
  showMessage($("#alerts-note"), found && found.error ? `Alerts are not evaluated now: ${found.error}` : "");
  const alerts = found ? found.alerts : [];
  const firing = alerts.filter((a) => a.state === "firing").length;
  $("#alerts-count").textContent = firing ? `${firing} firing` : "";
  if (!alerts.length) {
    const rules = found ? found.rules : 0;
    body.replaceChildren(emptyRow(7, `No alerts (${rules} rules evaluated).`));
    return;
  }
  body.replaceChildren(...groupsOf(alerts).map(groupRow));
}
