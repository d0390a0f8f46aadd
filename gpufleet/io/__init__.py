"""Readers and writers: Kubernetes manifests, trace CSVs, cluster specs, into the model.

Every reader parses a whole file before returning anything, and raises
:class:`~gpufleet.io.errors.InputError` naming the file, the line or object, and the field.
"""
