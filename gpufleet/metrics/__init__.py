"""The one home of gpufleet's metrics: their names, the scheduler's registry, the endpoint.

:mod:`~gpufleet.metrics.families` names every family (type, labels, meaning);
:mod:`~gpufleet.metrics.state` reads a scheduling core's state as numbers;
:mod:`~gpufleet.metrics.scheduler` is the registry every world serves, fed by the control loop;
:mod:`~gpufleet.metrics.endpoint` serves a registry with health probes over HTTP. It sits above
the control loop and below the backends, so that every world, the simulator included, uses it;
the scheduling core imports nothing of it.
"""
