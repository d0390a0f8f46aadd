"""The built-in plugins of the cycle's extension points, one per file (see :mod:`..framework`
for the protocols and :mod:`..registry` for their names)."""
