"""Telemetry without I/O: the source protocol every world feeds with device readings, workload
profiles that make a simulated GPU's readings, the columnar time-series store with its window
queries, and the engines that judge it round by round (alert rules, idle policies) and word
what they send (Alertmanager's routing, workload notices). It reads no cluster and serves
nothing: the worlds feed it and the service serves it."""
