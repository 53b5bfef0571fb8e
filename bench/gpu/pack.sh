#!/usr/bin/env bash
# Builds rdv here with CUDA and gathers what bench/gpu/check.sh runs on a GPU
# machine that has the CUDA driver but none of rdv's Debian packages: the
# GPU tests and benchmarks, rdv-worker, rdv-bench, the UCX plugin, UCX's
# transport modules, the Python module with its tests and the interpreter
# they run on (Debian's python3, numpy and pytest, compressed: the GPU
# machine's own Python is another version), and every shared library they
# load (from ldd), except the C library and the CUDA driver, which that
# machine brings.
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

# Debian's python3 stdlib, numpy and pytest, what the Python tests import.
python_version=$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
python_stdlib=/usr/lib/python$python_version
python_packages=(numpy _pytest pytest pluggy iniconfig packaging py py.py attr attrs)
mapfile -t python_extensions < <(find /usr/lib/python3/dist-packages/numpy -name '*.so')

# The rdv package with its tests in OUT/python, and the interpreter as
# OUT/python-runtime.tar.xz (bin/, lib/pythonX.Y, lib/python3/dist-packages).
pack_python() {
  local out=$1 runtime
  mkdir -p "$out/python/rdv" "$out/python/tests"
  cp "$build"/python/rdv/__init__.py "$build"/python/rdv/_rdv.*.so "$out/python/rdv/"
  cp tests/python/*.py "$out/python/tests/"
  strip --strip-unneeded "$out"/python/rdv/*.so
  runtime=$(mktemp -d)
  mkdir -p "$runtime/bin" "$runtime/lib/python3/dist-packages"
  cp /usr/bin/python"$python_version" "$runtime/bin/"
  cp -a "$python_stdlib" "$runtime/lib/"
  for package in "${python_packages[@]}"; do
    cp -a "/usr/lib/python3/dist-packages/$package" "$runtime/lib/python3/dist-packages/"
  done
  (cd "$runtime/lib/python$python_version" && rm -rf test idlelib tkinter lib2to3 ensurepip \
    pydoc_data config-* turtledemo dist-packages site-packages sitecustomize.py)
  find "$runtime" \( -name __pycache__ -o -path '*/numpy/*/tests' \) -prune -exec rm -rf {} +
  tar -C "$runtime" -cJf "$out/python-runtime.tar.xz" .
  rm -rf "$runtime"
}

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/rdv" "$out/lib/ucx"
cp "${binaries[@]}" "$out/bin/"
cp "$build/plugins/librdv_transport_ucx.so" "$out/lib/rdv/"
cp -L "${ucx_modules[@]}" "$out/lib/ucx/"
cp bench/gpu/check.sh "$out/"
strip --strip-unneeded "$out"/bin/* "$out"/lib/rdv/*.so
pack_python "$out"

# The libraries every packed file loads, resolved here; the machine's own
# loader, C library and CUDA driver stay.
# (ldd exits 1 when any file is not dynamic; the others still list.)
{ ldd "$out"/bin/* "$out"/lib/rdv/*.so "$out"/lib/ucx/*.so* "$out"/python/rdv/*.so \
      "${python_extensions[@]}" 2>/dev/null || true; } |
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
