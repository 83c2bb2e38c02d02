# One image for gpu-exporter and gpu-adapter (console scripts), as the Helm chart and apiservice/ manifests
# expect (ghcr.io/gpu-autoscaler/gpu-autoscaler:<version>). Runtime dependencies only: the load-test extra
# (matplotlib, numpy) is not installed, and no compiler is needed or shipped (every dependency has a wheel).
#   docker build -t ghcr.io/gpu-autoscaler/gpu-autoscaler:0.1.0 .
#   make image            # buildah, chroot isolation, from a Debian bookworm base built with mmdebstrap
# BASE_IMAGE needs python3 with venv, groupadd and useradd.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY adapter ./adapter
COPY loadtest ./loadtest
COPY clikit ./clikit
COPY listener ./listener
# Bytecode is compiled here, once, and shipped: the image is read-only at run time, so a pod that had to compile its
# imports would do it at every start. unchecked-hash: the interpreter trusts the .pyc without looking at the
# source's timestamp (an image's files never change underneath it).
RUN python3 -m venv /opt/gpu-autoscaler \
    && /opt/gpu-autoscaler/bin/pip install --no-cache-dir --disable-pip-version-check --no-compile \
        --only-binary=:all: . \
    && /opt/gpu-autoscaler/bin/pip uninstall --yes --disable-pip-version-check pip \
    && find /opt/gpu-autoscaler -name __pycache__ -prune -exec rm -rf {} + \
    && /opt/gpu-autoscaler/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/gpu-autoscaler

FROM ${BASE_IMAGE}
COPY --from=build /opt/gpu-autoscaler /opt/gpu-autoscaler
# PYTHONDONTWRITEBYTECODE: nothing is compiled at run time (the shipped bytecode is used); the file system is
# read-only for the non-root user anyway.
ENV PATH=/opt/gpu-autoscaler/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The adapter runs as this user (the chart's runAsUser); the exporter's pod overrides it where it must reach
# the kubelet's root-owned pod-resources socket.
RUN groupadd --gid 65532 nonroot && useradd -K UID_MAX=65535 --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
USER 65532:65532
EXPOSE 6443 9400
ENTRYPOINT []
CMD ["gpu-adapter", "--help"]
