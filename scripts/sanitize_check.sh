#!/usr/bin/env bash
# The NIC engine under AddressSanitizer and UndefinedBehaviorSanitizer, CPU only (CUDA
# simulator): builds the extension with GPUWRITE_SANITIZE in a temporary copy of this
# checkout (the normal build here is left as it is), checks that the sanitized extension
# carries the same engine fingerprint as the sources, then runs the adversarial driver
# (tests/foundation/adversary.py) and the engine-heavy tests with the sanitizer runtime
# preloaded. The first report aborts the run (exit status nonzero, report on stderr).
# Usage: bash scripts/sanitize_check.sh [quick|full]
#   quick: the adversary (40 seeds) and the tests that drive the engine from the host
#          (about a minute on 2 cores);
#   (default): also the tests that run simulator kernels against it (about 3 minutes);
#   full: also the slow property runs (-m slow) and 400 adversary seeds (about 15).
# SANITIZE=address,undefined by default; CC names the compiler whose runtime is preloaded.
# SANITIZE=thread (ThreadSanitizer; not with address) first builds the engine's copy pool
# into its stand-alone driver (benchmarks/scripts/copy_pool_bench.c: a submitter, the
# helpers and a thread rewriting the source, every access instrumented) and runs it with
# three and six helpers; then the tests as above, where PYTHON starts under the runtime
# (a pyenv build here crashes at start with it preloaded; Debian's /usr/bin/python3 in a
# virtual environment does not). Races reported inside NumPy or the interpreter are
# suppressed (scripts/tsan.supp): those sides are not instrumented, so TSan cannot see the
# ordering the engine's protocol gives them; a race between two engine threads is reported.
set -euo pipefail
mode=${1:-default}
case $mode in quick|default|full) ;; *) echo "usage: $0 [quick|full]" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SANITIZE=${SANITIZE:-address,undefined}
CC=${CC:-cc}
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gw-sanitize.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The checkout's files (tracked, and new ones git does not ignore), no build outputs.
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$WORK")
cd "$WORK"
case ,$SANITIZE, in
  *,thread,*)
    echo "== the copy pool's driver under ThreadSanitizer"
    $CC -fsanitize=thread -g -O1 -Icsrc -o copy_pool_tsan benchmarks/scripts/copy_pool_bench.c \
      csrc/gw_copy.c -lpthread
    for args in "3 2000" "6 0"; do
      TSAN_OPTIONS=halt_on_error=1 ./copy_pool_tsan $args > copy_pool_tsan.log
      echo "   helpers and gap (ns) $args: no report"
    done ;;
esac

echo "== building with -fsanitize=$SANITIZE in $WORK"
GPUWRITE_SANITIZE=$SANITIZE $PYTHON csrc/ffi_build.py > build.log 2>&1 || { cat build.log; exit 1; }

preload=""
case ,$SANITIZE, in *,address,*) preload=$($CC -print-file-name=libasan.so) ;; esac
case ,$SANITIZE, in
  *,undefined,*) preload="$preload${preload:+:}$($CC -print-file-name=libubsan.so)" ;;
esac
case ,$SANITIZE, in *,thread,*) preload="$preload${preload:+:}$($CC -print-file-name=libtsan.so)" ;; esac
export PYTHONPATH=$WORK NUMBA_ENABLE_CUDASIM=1 PYTHONUNBUFFERED=1
if ! LD_PRELOAD=$preload $PYTHON -c pass 2> /dev/null; then
  echo "$PYTHON does not start with $preload preloaded: name another interpreter (PYTHON=...)" >&2
  exit 1
fi
export LD_PRELOAD=$preload
# Leaks: Python's own allocations would drown the engine's (the tests count those).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:suppressions=$WORK/scripts/tsan.supp}

$PYTHON - <<'EOF'
import importlib.util
from gpuwrite._gw_cffi import ffi, lib
spec = importlib.util.spec_from_file_location("ffi_build", "csrc/ffi_build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
built = ffi.string(lib.gw_csrc_sha256()).decode()
assert built == build.csrc_sha256(), (built, build.csrc_sha256())
print("== engine fingerprint", built, "(the sanitizer flags leave it as it is)")
EOF

seeds=0:40
[ "$mode" = full ] && seeds=0:400
echo "== adversary, seeds $seeds"
$PYTHON tests/foundation/adversary.py --seeds $seeds --steps 1000

host_tests="test_engine_audit.py test_fuzz.py test_protection.py test_safety.py
  test_gaps_engine.py test_hold_drop.py test_copy_pool.py test_timeouts.py
  test_lifecycle_stateful.py"
kernel_tests="test_staging.py test_buffers.py test_agent.py test_gaps_device.py test_paths.py
  test_api.py test_pinning.py test_copy.py"
files=$host_tests
[ "$mode" != quick ] && files="$files $kernel_tests"
marks="not slow"
[ "$mode" = full ] && marks="slow or not slow"
# Under ThreadSanitizer the simulator's threads run several times slower: the slow
# 128-thread copy test took more than its 300 s (session 26). Every test's limit x 6.
case ,$SANITIZE, in *,thread,*) export GPUWRITE_TIMEOUT_SCALE=${GPUWRITE_TIMEOUT_SCALE:-6} ;; esac
# --capture=sys: a sanitizer writes its report to file descriptor 2 and stops the process;
# pytest's default capture of that descriptor would take the report with it.
# The RSS test counts what 300 dropped contexts keep: ASan's quarantine keeps freed
# memory on purpose (it is how a use after free is caught), so it cannot pass here.
echo "== tests ($mode)"
$PYTHON -m pytest -p no:cacheprovider -q --capture=sys -m "$marks" \
  --deselect tests/foundation/test_safety.py::test_dropped_contexts_stop_their_engine_before_memory_is_freed_and_do_not_leak \
  $(for f in $files; do echo tests/foundation/$f; done)
echo "== no sanitizer report"
