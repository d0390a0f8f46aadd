"""Public GPU-cluster traces: the Alibaba trace's CSVs read as nodes and timed pods, where the
trace files live and how they are fetched, and the shape tables derived from them.
"""
