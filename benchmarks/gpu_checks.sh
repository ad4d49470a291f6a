#!/usr/bin/env bash
# lmlab's GPU checks on a machine with an NVIDIA GPU, from the repository root: `bash benchmarks/gpu_checks.sh`.
# Installs any wheels in .whl/ (what an offline GPU machine lacks, e.g. gguf) and lmlab itself into /tmp/site,
# prints the GPU, runs tests/gpu, then the GPU benchmarks that need no downloaded model (training throughput in
# fp32 and bf16, long attention, encoder-decoders), each under `timeout`. Everything is logged to $OUT/check.log,
# pytest's junit XML to $OUT/pytest.xml, the benchmarks' JSON and figures packed into $OUT/bench.tar.gz
# (OUT defaults to /tmp/gpuout). About 6 minutes on an H200.
#
# A trial on a machine without a GPU: OUT=/tmp/gpuout LMLAB_GPU_TESTS_DEVICE=cpu BENCH_DEVICE=cpu \
#   BENCH_ARGS=--quick bash benchmarks/gpu_checks.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpuout}
BENCH_DEVICE=${BENCH_DEVICE:-cuda}
BENCH_ARGS=${BENCH_ARGS:-}
mkdir -p "$OUT/bench"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

setup() {
    if compgen -G ".whl/*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl || return 1
    fi
    # lmlab itself too, for its metadata (`lmlab --version`, which every command's parser reads); src/ comes first
    python3 -m pip install -q --no-deps --no-index --no-build-isolation --no-compile --target /tmp/site . ||
        { echo "pip could not install lmlab; its metadata written by hand"; mkdir -p /tmp/site/lmlab-0.1.0.dist-info
          printf 'Metadata-Version: 2.1\nName: lmlab\nVersion: 0.1.0\n' >/tmp/site/lmlab-0.1.0.dist-info/METADATA; }
    export PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv 2>/dev/null
    python3 - <<'EOF'
import os, platform, torch
print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"cuda available {torch.cuda.is_available()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB, "
          f"{p.multi_processor_count} SMs, TF32 matmul {torch.backends.cuda.matmul.allow_tf32}")
import importlib.metadata, lmlab, gguf  # what the tests import
print("lmlab", importlib.metadata.version("lmlab"), "from", lmlab.__file__)
EOF
}

# The quantized kernels (C++, for the CPU side of the comparisons) build in the background into the cache the
# tests link (~/.cache/lmlab/kernels), while the tests that need none run; torch's build lock makes a test
# that asks for them sooner wait for this build instead of starting its own.
build_kernels() {
    python3 -c "import time; t = time.time(); from lmlab.modules.kernels.build import kernel_ops
print('quantized kernels built:', kernel_ops() is not None, f'in {time.time() - t:.0f} s')" >"$OUT/kernels.log" 2>&1
}

run_tests() {
    local t0=$SECONDS
    timeout 110 python3 -m pytest -q -n 0 -p no:cacheprovider -rfEs --durations=12 -o junit_family=xunit1 \
        --junitxml="$OUT/pytest.xml" \
        tests/gpu/test_decoding.py tests/gpu/test_training.py tests/gpu/test_post_training.py \
        tests/gpu/test_serving.py tests/gpu/test_quantized.py
    echo "== tests/gpu: exit $?, $((SECONDS - t0)) s"
    cat "$OUT/kernels.log"
}

bench() {  # bench SECONDS NAME SCRIPT ARGS...: one benchmark, bounded, its exit status and time logged
    local limit=$1 name=$2 t0=$SECONDS
    shift 2
    echo "== benchmark $name: $*"
    timeout "$limit" python3 "$@"
    echo "== benchmark $name: exit $?, $((SECONDS - t0)) s"
}

main() {
    setup || { echo "setup failed"; return 1; }
    build_kernels &
    run_tests
    local b=benchmarks
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
    bench 140 train_fp32 $b/train_throughput.py --device "$BENCH_DEVICE" --rounds 1 $BENCH_ARGS \
        --out "$OUT/bench/train_throughput_fp32.json"
    # shellcheck disable=SC2086
    bench 110 train_bf16 $b/train_throughput.py --device "$BENCH_DEVICE" --rounds 1 --bf16 $BENCH_ARGS \
        --out "$OUT/bench/train_throughput_bf16.json"
    # shellcheck disable=SC2086
    bench 25 long_attention $b/long_attention.py --device "$BENCH_DEVICE" --rounds 2 $BENCH_ARGS \
        --out "$OUT/bench/long_attention.json"
    # shellcheck disable=SC2086
    bench 120 encoder_decoder $b/encoder_decoder.py --device "$BENCH_DEVICE" --rounds 1 $BENCH_ARGS \
        --out "$OUT/bench/encoder_decoder.json"
    wait
    tar czf "$OUT/bench.tar.gz" -C "$OUT" bench && rm -r "$OUT/bench"
    echo "== done in $SECONDS s"
}

main 2>&1 | tee "$OUT/check.log"
