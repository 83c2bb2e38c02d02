#!/usr/bin/env bash
# Write certs/ca.crt, certs/tls.crt and certs/tls.key next to this script: a private CA (kept in
# certs/ca.key, 10 years) and a serving certificate for the adapter's Service signed by it (1 year), with the
# DNS name the kube-apiserver checks: <service>.<namespace>.svc. Needs openssl.
#
# Usage: ./gen-certs.sh [--service NAME] [--namespace NS] [--days N]
# An existing CA in certs/ is reused, so re-running renews only the serving certificate.
set -euo pipefail

SERVICE=gpu-metrics-adapter
NAMESPACE=gpu-metrics
DAYS=365
while [[ $# -gt 0 ]]; do
    case "$1" in
        --service) SERVICE="$2"; shift 2 ;;
        --namespace) NAMESPACE="$2"; shift 2 ;;
        --days) DAYS="$2"; shift 2 ;;
        -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
        *) echo "gen-certs.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v openssl >/dev/null || { echo "gen-certs.sh: openssl not found" >&2; exit 1; }

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/certs"
mkdir -p "$DIR"
umask 077
HOST="$SERVICE.$NAMESPACE.svc"

if [[ ! -s "$DIR/ca.key" || ! -s "$DIR/ca.crt" ]]; then
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -keyout "$DIR/ca.key" -out "$DIR/ca.crt" -days 3650 -subj "/CN=gpu-metrics-adapter-ca" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

CSR="$(mktemp)"
EXT="$(mktemp)"
trap 'rm -f "$CSR" "$EXT"' EXIT
openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$DIR/tls.key" -out "$CSR" -subj "/CN=$HOST" 2>/dev/null
cat >"$EXT" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:$HOST,DNS:$HOST.cluster.local,DNS:$SERVICE.$NAMESPACE
EXT
openssl x509 -req -in "$CSR" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" -CAcreateserial -out "$DIR/tls.crt" \
    -days "$DAYS" -sha256 -extfile "$EXT" 2>/dev/null
rm -f "$DIR/ca.srl"
chmod 600 "$DIR/tls.key" "$DIR/ca.key"
chmod 644 "$DIR/tls.crt" "$DIR/ca.crt"
echo "wrote $DIR/{ca.crt,tls.crt,tls.key} for $HOST (valid $DAYS days)"
