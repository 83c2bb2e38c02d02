#!/usr/bin/env bash
# The checks that need real NVIDIA GPUs (never part of `make test`, which simulates them): what the driver and
# nvidia-smi say, `gpu-exporter doctor` (text and JSON), every field of the table read through the NVML backend
# (bench/nvml_fields.py), the exporter serving every field while a GPU works and after, pod attribution
# (scripts/gpu-pod-check.py) and the scrape benchmark on the nvml backend beside the fake one. With PyTorch
# installed a matrix-product load runs for LOAD_S seconds so utilisation, power, clocks and the per-process
# lists have something to show.
# Usage: scripts/gpu-check.sh OUT_DIR   (PYTHON, default python3, with the project's dependencies importable)
set -u
out=${1:?usage: scripts/gpu-check.sh OUT_DIR}
py=${PYTHON:-python3}
load_s=${LOAD_S:-45}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
step() { echo; echo "== $(date +%T) $*"; }

scrape() {  # scrape URL FILE: the body, or the error, into FILE
    "$py" - "$1" "$2" <<'EOF'
import sys, urllib.request
try:
    body = urllib.request.urlopen(sys.argv[1], timeout=20).read()
except Exception as exc:
    body = f"scrape failed: {exc!r}\n".encode()
open(sys.argv[2], "wb").write(body)
print(sys.argv[2], len(body), "bytes")
EOF
}

step "machine"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1; head -20 "$out/nvidia-smi.txt"
nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1
"$py" - <<'EOF'
import importlib.metadata as md, platform, pynvml
pynvml.nvmlInit()
print("python", platform.python_version(), "| nvidia-ml-py", md.version("nvidia-ml-py"), "| driver",
      pynvml.nvmlSystemGetDriverVersion(), "| NVML", pynvml.nvmlSystemGetNVMLVersion(), "| CUDA driver",
      pynvml.nvmlSystemGetCudaDriverVersion_v2())
EOF

step "counters file with every field of the table"
"$py" -c '
from exporter.fields.table import FIELDS
for f in FIELDS:
    print(f"{f.name}, {f.kind}, {f.help}")' >"$out/all-fields.csv"
wc -l <"$out/all-fields.csv"

step "pytest: the NVML backend against the simulated library, under this Python"
timeout 240 "$py" -m pytest -q -p no:cacheprovider -o addopts= tests/test_nvml_backend.py tests/test_gpm.py \
    tests/test_nvml_processes.py tests/test_nvml_sampled.py tests/test_nvml_fields_bench.py tests/test_doctor.py \
    2>&1 | tail -15

step "every field through the NVML backend, idle"
timeout 60 "$py" bench/nvml_fields.py --json "$out/fields-idle.json" >"$out/fields-idle.txt" 2>&1
head -40 "$out/fields-idle.txt"

load_pid=""
if "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    step "GPU load for ${load_s}s (bf16 matrix products, 8 GiB held)"
    "$py" - "$load_s" >"$out/load.log" 2>&1 <<'EOF' &
import sys, time, torch
end = time.monotonic() + float(sys.argv[1])
held = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
n = 0
while time.monotonic() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
    n += 20
print("products", n)
EOF
    load_pid=$!
    sleep 6
else
    step "no PyTorch with CUDA: no load"
fi

step "doctor under load"
timeout 90 "$py" -m exporter doctor >"$out/doctor.txt" 2>&1; echo "doctor exit $?" | tee -a "$out/doctor.txt"
cat "$out/doctor.txt"
timeout 90 "$py" -m exporter doctor --json >"$out/doctor.json" 2>"$out/doctor-json.err"; echo "doctor --json exit $?"

step "every field through the NVML backend, under load"
timeout 60 "$py" bench/nvml_fields.py --json "$out/fields-load.json" >"$out/fields-load.txt" 2>&1
head -12 "$out/fields-load.txt"

step "exporter serving every field"
"$py" -m exporter --backend nvml -f "$out/all-fields.csv" --address 127.0.0.1:19400 --collect-interval 1000 \
    --debug >"$out/exporter.log" 2>&1 &
exporter_pid=$!
sleep 5
scrape http://127.0.0.1:19400/metrics "$out/metrics-load.txt"
if [ -n "$load_pid" ]; then wait "$load_pid"; cat "$out/load.log"; fi
sleep 4
scrape http://127.0.0.1:19400/metrics "$out/metrics-idle.txt"
scrape http://127.0.0.1:19400/health "$out/health.txt"
kill -TERM "$exporter_pid"; wait "$exporter_pid"; echo "exporter exit $?"
grep -v " DEBUG " "$out/exporter.log" | head -40
grep -E "^gpu_exporter_(field_supported|gpu_up|process_attribution_up)" "$out/metrics-idle.txt" | grep -v " 1$" \
    | grep -v NVLINK | head -60

step "pod attribution: -k labels by UUID and nvidia0, a shared GPU's real process (scripts/gpu-pod-check.py)"
timeout 120 "$py" scripts/gpu-pod-check.py 2>&1 | tee "$out/pod-check.txt" | grep -E "^(PASS|FAIL|SKIP|GPU)"

step "scrape benchmark: nvml backend (default counters; every field with 2,000 scrapes), fake backend with 1 and 8 GPUs"
timeout 120 "$py" bench/exporter_scrape.py --backend nvml --quick --json "$out/bench-nvml.json" 2>&1 | tail -40
timeout 120 "$py" bench/exporter_scrape.py --backend nvml --collectors "$out/all-fields.csv" --idle-s 5 \
    --json "$out/bench-nvml-all.json" 2>&1 | tail -12
timeout 120 "$py" bench/exporter_scrape.py --backend fake --gpus 1,8 --quick --json "$out/bench-fake.json" 2>&1 \
    | tail -12
step "done"
