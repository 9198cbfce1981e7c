#!/usr/bin/env bash
# On a GPU machine: calibrate this GPU, run the sweeps only a GPU can measure (figure 4's
# emulated points, figure 5's latency CDF, figure 9's emulated latency vs size), and copy
# the tables to $OUT (default ./gpu-out). About 6 minutes on an H100 (figures 4 and 9: three
# runs a point).
#
# Then, on any machine: copy $OUT/*.parquet to experiments/results/gpu/ and the
# calibration TOML to experiments/calibration/, commit them, and run `gpuwrite figures`.
#
# Usage: bash scripts/gpu_experiments.sh   (SKIP_CALIBRATE=1: keep the stored calibration;
#        GPUWRITE_GIT_COMMIT=<40-digit hash>: the commit the tables record, where .git is
#        stale or absent)
# What comes back: gpu_experiments.log (every step's output and rc), the calibration TOML
# and experiments/results/gpu/*.parquet (figures 4, 5 and 9).
set -u
# The tables record this commit: a full 40-digit hash (a short one is ambiguous and a typo
# in it goes unnoticed); a warning where it is not the HEAD of a .git that is here.
if [ -n "${GPUWRITE_GIT_COMMIT:-}" ]; then
  if ! [[ "$GPUWRITE_GIT_COMMIT" =~ ^[0-9a-f]{40}$ ]]; then
    echo "GPUWRITE_GIT_COMMIT=$GPUWRITE_GIT_COMMIT: allowed a full 40-digit lowercase commit hash" >&2
    exit 2
  fi
  head=$(git rev-parse HEAD 2>/dev/null || true)
  if [ -n "$head" ] && [ "$head" != "$GPUWRITE_GIT_COMMIT" ]; then
    echo "warning: GPUWRITE_GIT_COMMIT=$GPUWRITE_GIT_COMMIT is not this .git's HEAD ($head):" \
         "right only where .git is stale" >&2
  fi
fi
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
LOG="$OUT/gpu_experiments.log"
: > "$LOG"
export PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0 MPLBACKEND=Agg
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >> "$LOG" 2>&1 || { echo "wheel install failed"; tail -20 "$LOG"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi

RCS=""
step() {  # step NAME TIMEOUT_S COMMAND...: run, log, print the rc and the time taken
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  echo "== $name: $*" | tee -a "$LOG"
  timeout "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  echo "== $name rc=$rc ($((SECONDS - started)) s)" | tee -a "$LOG"
  RCS="$RCS $name=$rc"
  return $rc
}

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
  python3 -c "import numpy, numba, numba_cuda, pandas, pyarrow, matplotlib; print('numpy', numpy.__version__, 'numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'pandas', pandas.__version__, 'matplotlib', matplotlib.__version__)"
  git log -1 --oneline 2>/dev/null
} >> "$LOG" 2>&1

step build 300 python3 csrc/ffi_build.py || { tail -30 "$LOG"; exit 1; }
rm -f gpuwrite/_gw_cffi.c csrc/*.o

# Calibration: the file lands in experiments/calibration/<device>-<date>.toml.
[ -z "${SKIP_CALIBRATE:-}" ] && step calibrate 180 python3 -m gpuwrite calibrate
# Figures 4 and 5: measured now (--fresh), not taken from results stored earlier.
# Figure 4: the emulated points only (the model lines are computed anywhere).
step fig4_emulated 420 python3 -m gpuwrite sweep experiments/fig4_throughput.toml --sweep emulated --fresh --json
# Figure 5: per-message latency of each path, one message in flight.
step fig5_cdf 120 python3 -m gpuwrite sweep experiments/fig5_latency_cdf.toml --fresh --json
# Figure 9: latency vs size per path, one message in flight, 32 and 256 threads.
step fig9_latency 300 python3 -m gpuwrite sweep experiments/fig9_emulated_latency.toml --fresh --json
# The figures are drawn afterwards on any machine, from the tables this copies back.

calibration=$(ls -t experiments/calibration/*.toml 2>/dev/null | head -1)
for file in $calibration experiments/results/gpu/*.parquet; do
  [ -f "$file" ] && cp "$file" "$OUT/"
done
echo "== steps:$RCS" | tee -a "$LOG"
ls -la "$OUT" | tee -a "$LOG"
case "$RCS" in *=[1-9]*) exit 1 ;; esac
exit 0
