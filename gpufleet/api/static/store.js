// The page's shared state: what the API last said, what the user chose to see (the state
// filter, the open detail rows, the node filter, the cost report's grouping and window), and
// the cluster's clock derived from it.

export const store = {
  token: null,
  summary: null,
  summaryAt: 0, // performance.now() when summary was read; the clock ticks on from there
  nodes: [],
  queues: [],
  workloads: [],
  history: null,
  alerts: null,
  cost: null, // the last cost report read (GET /api/v1/cost)
  costError: "", // why the chosen grouping or window was refused (a 400), else ""
  filter: "active",
  expanded: new Set(), // workload keys whose detail row is open
  details: new Map(), // key -> {detail, explanation}
  logs: new Map(), // key -> Map pod -> its latest run's last lines (serve --local; pod-logs.js)
  nodeFilter: "",
  costBy: "namespace", // the cost report's grouping key(s), as GET /api/v1/cost?by= takes them
  costWindow: "1d",
};

// the cluster's time now: the summary's, ticking on since it was read (a simulated cluster
// at its speed)
export function clusterNow() {
  const s = store.summary;
  if (!s) return 0;
  if (s.backend !== "simulated") return s.time + (performance.now() - store.summaryAt) / 1000;
  return s.time + ((performance.now() - store.summaryAt) / 1000) * (s.speed || 0);
}

// "simulated", "local" or "kubernetes", once the summary has been read
export function clusterBackend() {
  return store.summary && store.summary.backend;
}
