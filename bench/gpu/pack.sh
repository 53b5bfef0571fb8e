#!/usr/bin/env bash
# Builds rdv here with CUDA and gathers what bench/gpu/check.sh runs on a GPU
# machine that has the CUDA driver but none of rdv's Debian packages: the
# GPU tests and benchmarks, rdv-worker, rdv-bench, the UCX plugin, UCX's
# transport modules, and every shared library they load (from ldd), except
# the C library and the CUDA driver, which that machine brings.
#
#   bench/gpu/pack.sh [OUT]      (default build/gpu-pack; at most 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:-build/gpu-pack}
limit_mib=64

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "pack.sh: the CUDA toolkit is not in /usr/local/cuda; the pack needs a CUDA build" >&2
  exit 1
fi
scripts/build release -DRDV_WITH_CUDA=ON
build=build/release

binaries=(
  "$build/apps/rdv-worker"
  "$build/apps/rdv-bench"
  "$build/bench/rdv_bench_gpu"
  "$build/tests/core/rdv_intra_process_test"
  "$build/tests/core/rdv_chunked_copy_test"
  "$build/tests/control/rdv_remote_conformance_test"
  "$build/tests/graph/rdv_executor_test"
)
ucx_modules=(/usr/lib/x86_64-linux-gnu/ucx/lib*.so.0)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/rdv" "$out/lib/ucx"
cp "${binaries[@]}" "$out/bin/"
cp "$build/plugins/librdv_transport_ucx.so" "$out/lib/rdv/"
cp -L "${ucx_modules[@]}" "$out/lib/ucx/"
cp bench/gpu/check.sh "$out/"
strip --strip-unneeded "$out"/bin/* "$out"/lib/rdv/*.so

# The libraries every packed file loads, resolved here; the machine's own
# loader, C library and CUDA driver stay.
# (ldd exits 1 when any file is not dynamic; the others still list.)
{ ldd "$out"/bin/* "$out"/lib/rdv/*.so "$out"/lib/ucx/*.so* 2>/dev/null || true; } |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux[^/]*|libcuda)\.so' |
  while read -r library; do cp -L "$library" "$out/lib/"; done
strip --strip-unneeded "$out"/lib/*.so* "$out"/lib/ucx/*.so* 2>/dev/null || true

size_mib=$(du -sm "$out" | cut -f1)
echo "pack.sh: $out holds $(find "$out" -type f | wc -l) files, ${size_mib} MiB"
if ((size_mib > limit_mib)); then
  echo "pack.sh: over the ${limit_mib} MiB the GPU machine accepts" >&2
  exit 1
fi
