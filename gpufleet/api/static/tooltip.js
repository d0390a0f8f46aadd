// The cluster map's device tooltip (#device-tooltip): a device's model, memory, allocation
// and pods, placed below the device (above it near the window's bottom).

import { store } from "./store.js";
import { $, formatGiB, h, pct } from "./util.js";

export function showTooltip(target) {
  const tip = $("#device-tooltip");
  const [nodeName, index] = target.dataset.device.split("/");
  const node = store.nodes.find((n) => n.name === nodeName);
  const device = node && node.devices.find((d) => String(d.index) === index);
  if (!device) return;
  const flags = [device.mig ? "MIG" : null, device.shared ? "shared" : null].filter(Boolean);
  tip.replaceChildren(
    h("strong", {}, `${node.name} · GPU ${device.index}`),
    h("div", {}, `${device.model} · ${formatGiB(device.memory_mib)}`),
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

export function hideTooltip() {
  $("#device-tooltip").hidden = true;
}
