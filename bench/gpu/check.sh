#!/usr/bin/env bash
# The GPU check, run from a folder made by bench/gpu/pack.sh on a machine
# with a GPU and its driver:  ./check.sh RESULTS_DIR
# Runs the GPU tests, then the GPU benchmarks, each step bounded, all within
# ten minutes, and writes into RESULTS_DIR:
#   gpu.txt                         nvidia-smi's view of the machine
#   tests-<binary>.json             GoogleTest results (GPU cases skip
#                                   themselves, saying why, without a GPU)
#   tests-python.xml                the Python module's tests, its GPU and
#                                   DLPack cases among them (pytest, JUnit
#                                   XML), on the packed interpreter
#   bench_gpu.json                  H2D, D2H, D2D through rdv beside
#                                   cudaMemcpy (Google Benchmark, 5 repetitions)
#   rdv_bench-<setting>.json        two processes, GPU 0 to GPU 0: CUDA IPC,
#                                   and staged through host memory over
#                                   grpc+ucx and grpc
#   steps.json                      each step's exit status and seconds
#   <step>.log                      each step's output
# Exit status 1 when a step failed. bench/gpu/summarize.py RESULTS_DIR turns
# the results into the ratios the bars name.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${1:?usage: check.sh RESULTS_DIR}
mkdir -p "$results"
results=$(cd "$results" && pwd)

export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RDV_PLUGIN_PATH="$here/lib/rdv"
export RDV_WORKER_BINARY="$here/bin/rdv-worker"
export UCX_MODULE_DIR="$here/lib/ucx"
export RDV_LOG_LEVEL=${RDV_LOG_LEVEL:-info}

steps=()
failed=0
# step NAME SECONDS COMMAND...: runs COMMAND under a time bound, output to
# RESULTS_DIR/NAME.log, and records how it ended.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "check.sh: $name" >&2
  timeout --kill-after=10 "$limit" "$@" >"$results/$name.log" 2>&1
  local status=$?
  ((status == 0)) || failed=1
  ((status == 0)) || echo "check.sh: $name failed with status $status (see $name.log)" >&2
  steps+=("{\"step\": \"$name\", \"exit_status\": $status, \"seconds\": $((SECONDS - start))}")
}

(nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv) \
  >"$results/gpu.txt" 2>&1 || echo "nvidia-smi: not available" >>"$results/gpu.txt"

for test in rdv_intra_process_test rdv_chunked_copy_test rdv_executor_test; do
  step "tests-$test" 120 "$here/bin/$test" --gtest_output="json:$results/tests-$test.json"
done
# The GPU cases of the cross-process suite, over the protocols that need no
# RDMA device (this machine has none), the fast path's among them.
gpu_cases='*Gpu*/grpc:*Gpu*/grpc_ucx_tcp:*Gpu*/grpc_ucx_shm:*ForgedCudaIpc*'
gpu_cases+=':*FastPathGpu*/grpc_ucx_tcp_fast:*FastPathGpu*/grpc_ucx_shm_fast'
step tests-rdv_remote_conformance_test 180 "$here/bin/rdv_remote_conformance_test" \
  --gtest_filter="$gpu_cases" \
  --gtest_output="json:$results/tests-rdv_remote_conformance_test.json"

# The Python module's tests (GPU and DLPack cases among them), this process
# and a peer process, on the interpreter the pack brings.
runtime=$(mktemp -d)
tar -C "$runtime" -xJf "$here/python-runtime.tar.xz"
step tests-python 180 env PYTHONHOME="$runtime" PYTHONDONTWRITEBYTECODE=1 \
  PYTHONPATH="$here/python:$runtime/lib/python3/dist-packages" \
  "$runtime"/bin/python3* -m pytest -p no:cacheprovider -q -rs \
  --junitxml="$results/tests-python.xml" "$here/python/tests/test_rdv.py"
rm -rf "$runtime"

step bench_gpu 150 "$here/bin/rdv_bench_gpu" --benchmark_repetitions=5 \
  --benchmark_min_time=0.2 --benchmark_out="$results/bench_gpu.json" \
  --benchmark_out_format=json

sizes=1M,64M,256M
step rdv_bench-cuda_ipc 60 "$here/bin/rdv-bench" --local --protocol grpc --memory cuda \
  --sizes "$sizes" --iters 20 --json "$results/rdv_bench-cuda_ipc.json"
step rdv_bench-staged_grpc_ucx_shm 60 env RDV_CUDA_IPC=0 UCX_TLS=posix,cma,self \
  "$here/bin/rdv-bench" --local --protocol grpc+ucx --memory cuda --sizes "$sizes" --iters 20 \
  --json "$results/rdv_bench-staged_grpc_ucx_shm.json"
step rdv_bench-staged_grpc 60 env RDV_CUDA_IPC=0 "$here/bin/rdv-bench" --local --protocol grpc \
  --memory cuda --sizes "$sizes" --iters 20 --json "$results/rdv_bench-staged_grpc.json"

{
  echo "["
  for ((i = 0; i < ${#steps[@]}; ++i)); do
    echo "  ${steps[i]}$( ((i + 1 < ${#steps[@]})) && echo ,)"
  done
  echo "]"
} >"$results/steps.json"
exit "$failed"
