# One image for gpu-exporter, gpu-adapter and gpu-loadtest (console scripts), as the Helm chart and
# apiservice/ manifests expect (ghcr.io/gpu-autoscaler/gpu-autoscaler:<version>).
#   docker build -t ghcr.io/gpu-autoscaler/gpu-autoscaler:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY adapter ./adapter
COPY loadtest ./loadtest
COPY clikit ./clikit
RUN python -m venv /opt/gpu-autoscaler \
    && /opt/gpu-autoscaler/bin/pip install --no-cache-dir --disable-pip-version-check .

FROM python:3.11-slim
COPY --from=build /opt/gpu-autoscaler /opt/gpu-autoscaler
ENV PATH=/opt/gpu-autoscaler/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The adapter runs as this user (the chart's runAsUser); the exporter's pod overrides it where it must reach
# the kubelet's root-owned pod-resources socket.
RUN groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
USER 65532:65532
EXPOSE 6443 9400
ENTRYPOINT []
CMD ["gpu-adapter", "--help"]
