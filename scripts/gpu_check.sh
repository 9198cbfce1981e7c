#!/usr/bin/env bash
# One call on a GPU machine (about 8 minutes on an H100; TEST_LIMIT_S and PUT_LIMIT_S cap
# the longest steps): install carried wheels, build the C side,
# run the GPU test suite, the demo and the whole benchmark (the three targets in 5 runs
# each, and latency vs size for every path). Logs and JSON go to $OUT (or ./gpu-out).
# Usage: bash scripts/gpu_check.sh [bench-only]   (QUICK=1: bench --quick)
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
{
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
  python3 -c "import numpy, numba, numba_cuda; print('numpy', numpy.__version__, 'numba', numba.__version__)"
} 2>&1 | tee "$OUT/env.txt"
python3 csrc/ffi_build.py > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
rm -f gpuwrite/_gw_cffi.c csrc/*.o
step() { echo "== $*"; }
if [ "${1:-}" != "bench-only" ]; then
  step tests
  # Compiling kernels dominates the GPU suite: with pytest-xdist (carried as a wheel) it
  # runs in several processes, each with its own CUDA context and engine.
  par=""
  python3 -c "import xdist" 2>/dev/null && par="-n ${TEST_PROCS:-6}"
  timeout ${TEST_LIMIT_S:-300} python3 -m pytest -q -m 'not slow' $par -rfE tests/foundation \
    2>&1 | tee "$OUT/tests.log" | tail -40
  step demo
  timeout 60 python3 -m gpuwrite demo --json > "$OUT/demo.json" 2> "$OUT/demo.err"
  echo "demo rc=$?"; python3 -c "
import json; d=json.load(open('$OUT/demo.json'))
for r in d['results']: print(r['path'], r['messages'], r['delivered'], r['errors'], round(r['latency_p50_us'],2), round(r['throughput_gbps'],2))" 2>&1 | tail -6
fi
step bench
started=$SECONDS
timeout 330 python3 -m gpuwrite bench ${QUICK:+--quick} --json > "$OUT/bench.json" 2> "$OUT/bench.err"
echo "bench rc=$? ($((SECONDS - started)) s)"; tail -5 "$OUT/bench.err"
COLUMNS=160 python3 -c "
import json, sys
from gpuwrite.cli.bench import _print
_print(json.load(open('$OUT/bench.json')))" 2>&1 | tee "$OUT/bench.txt"
step put_api_bench
started=$SECONDS
# put + quiet kernel vs send_messages (64 B latency, 1 MiB bandwidth, 64 B rate) and the
# all-to-all application's time per path (experiments/apps/bench.py). The three measures
# take about 175 s on an H100 and the all-to-all 130 s more (session 32, most of it
# compiles), so it runs only if PUT_MEASURES names it (latency,bandwidth,rate,alltoall).
# The file is written after each measure, so a bench the timeout cuts short keeps those
# done, and --show prints them either way.
timeout ${PUT_LIMIT_S:-330} python3 -m experiments.apps.bench ${QUICK:+--quick} \
  --measures "${PUT_MEASURES:-latency,bandwidth,rate}" \
  --out "$OUT/put_api_bench.json" > /dev/null 2> "$OUT/put_api_bench.err"
echo "put_api_bench rc=$? ($((SECONDS - started)) s)"; tail -5 "$OUT/put_api_bench.err"
python3 -m experiments.apps.bench --show "$OUT/put_api_bench.json" 2>&1 | tee "$OUT/put_api_bench.txt"
