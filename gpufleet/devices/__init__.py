"""GPU devices as NVML sees them: discovery, samples and health, behind a small protocol.

Two implementations of NVML's functions: ``nvidia-ml-py`` (the real driver) and a fake driven by
YAML (tests, demos, ``gpufleet agent --fake-gpus``). The only place that imports ``pynvml``.
"""
