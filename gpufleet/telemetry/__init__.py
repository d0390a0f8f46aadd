"""Telemetry without I/O: workload profiles that make device samples over simulated time."""
