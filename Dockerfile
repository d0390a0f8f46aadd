# syntax=docker/dockerfile:1
# The gpufleet image: the gpufleet CLI as entrypoint; Kubernetes runs the scheduler as
#   gpufleet scheduler --scheduler-name gpufleet ... (deploy/scheduler.yaml).
#
# Build: docker build -t ghcr.io/gpufleet/gpufleet:0.2.0 .
# Note: this Dockerfile cannot be built on the development machine (there is a docker client
# but no daemon, and no registry but PyPI, Debian and npm to pull python:3.11-slim from), so it
# is not exercised by the tests; tests/deploy/test_dockerfile.py only checks it against the
# manifests (user id, entrypoint, what the build context keeps).

# The base image is pinned by digest (the tag is for readers; Docker pulls by the digest):
# python:3.11-slim's multi-arch image index of Python 3.11.16 on Debian 13 (trixie). Moving it
# is a change like any other: docker buildx imagetools inspect python:3.11-slim prints the
# current digest; set it on both FROM lines (tests/deploy/test_dockerfile.py checks each FROM
# is pinned).
#
# ---- build: install gpufleet and its dependencies into a virtual environment
FROM python:3.11-slim@sha256:1042b61448fef4ba92d16a8c7eb4996d027568ce64792a7877fd88511e0af7c6 AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gpufleet
ENV PATH=/opt/gpufleet/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md requirements-runtime.lock ./
COPY gpufleet ./gpufleet
# The runtime dependencies at the tested versions, each file checked against its hash (the
# lock holds setuptools and wheel too, so the build needs nothing unpinned), then gpufleet.
RUN pip install --require-hashes -r requirements-runtime.lock
RUN pip install --no-deps --no-build-isolation .

# ---- runtime: the virtual environment only, run as a non-root user
FROM python:3.11-slim@sha256:1042b61448fef4ba92d16a8c7eb4996d027568ce64792a7877fd88511e0af7c6
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
