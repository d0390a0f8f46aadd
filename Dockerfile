# syntax=docker/dockerfile:1
# The gpufleet image: the gpufleet CLI as entrypoint; Kubernetes runs the scheduler as
#   gpufleet scheduler --scheduler-name gpufleet ... (deploy/scheduler.yaml).
#
# Build: docker build -t ghcr.io/gpufleet/gpufleet:0.1.0 .
# Note: this Dockerfile cannot be built on the development machine (there is a docker client
# but no daemon, and no registry but PyPI, Debian and npm to pull python:3.11-slim from), so it
# is not exercised by the tests; tests/deploy/test_dockerfile.py only checks it against the
# manifests (user id, entrypoint, what the build context keeps).

# ---- build: install gpufleet and its dependencies into a virtual environment
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gpufleet
ENV PATH=/opt/gpufleet/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpufleet ./gpufleet
RUN pip install .

# ---- runtime: the virtual environment only, run as a non-root user
FROM python:3.11-slim
LABEL org.opencontainers.image.title="gpufleet" \
      org.opencontainers.image.description="A GPU-aware scheduler for AI workloads"
# The uid/gid match runAsUser/runAsGroup of deploy/scheduler.yaml (numeric, so that
# runAsNonRoot can be verified by the kubelet).
RUN groupadd --system --gid 10001 gpufleet \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin gpufleet
COPY --from=build /opt/gpufleet /opt/gpufleet
# HOME on /tmp: the pod's root filesystem is read-only, /tmp is an emptyDir.
ENV PATH=/opt/gpufleet/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
WORKDIR /tmp
EXPOSE 9090
ENTRYPOINT ["gpufleet"]
CMD ["--help"]
