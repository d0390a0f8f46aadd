"""Readers and writers: Kubernetes manifests, trace CSVs, cluster specs, into the model.

Grouped by what is read: :mod:`gpufleet.io.kube` (Kubernetes objects), :mod:`gpufleet.io.fleet`
(gpufleet's own kinds) and :mod:`gpufleet.io.cluster_traces` (public cluster traces), on shared
parsing at this level (``errors``, ``manifests``, ``fields``, ``names``, ``quantities``,
``validation``, ``kinds``, ``request_shape``). The assembly of a scenario's objects into workloads
is ``assembly`` (``live_objects`` for a live cluster's), and the one face for reading files and
directories into the model is ``readers``.

Every reader parses a whole file before returning anything, and raises
:class:`~gpufleet.io.errors.InputError` naming the file, the line or object, and the field.
"""
