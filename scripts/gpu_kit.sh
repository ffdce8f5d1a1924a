#!/usr/bin/env bash
# Builds here (a machine with the CUDA toolkit and the Debian dev packages) what a GPU machine runs, and packs it
# into .gpukit/tessera-gpukit.tar.xz: the tessera CLI, the CUDA tests and bench_cuda_step, stripped, with the
# shared libraries they need that a bare CUDA machine lacks (fmt, OpenBLAS, SQLite, pcre2, ...). The CUDA
# libraries themselves (cuBLASLt, NVRTC, NCCL, cuDNN, whose engine libraries it loads at run time, the driver)
# are the GPU machine's own; glibc and libstdc++ too.
# .gpukit/ is ignored by git (.git/info/exclude) and travels to the GPU machine as a carried path; there,
# tests/bench/gpu/run_all.sh unpacks and runs it.
#
#   scripts/gpu_kit.sh            # build (build-cuda/), pack, check the binaries start here
#   TESSERA_GPUKIT_BUILD=$PWD/build scripts/gpu_kit.sh   # the same from the main build, when it has CUDA
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TESSERA_GPUKIT_BUILD:-$root/build-cuda}
kit=$root/.gpukit
jobs=${JOBS:-2}
targets=(tessera test_cuda_codegen test_cuda_backend bench_cuda_step bench_cuda_gemm)
plugins=(swiglu)  # plugins/NAME.so: the gpt2_swiglu sample's family and op

mkdir -p "$root/.git/info"
grep -qxF '/.gpukit/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpukit/' >>"$root/.git/info/exclude"

# A build folder already configured with CUDA (TESSERA_GPUKIT_BUILD=build: the main build, the IDE's too) is used as
# it is; otherwise build-cuda/ is configured for the kit alone.
if ! grep -q 'test_cuda_backend' "$build/build.ninja" 2>/dev/null; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_BUILD_STUDIO=OFF -DTESSERA_CUDA=ON >/dev/null
fi
nice -n 15 ninja -C "$build" -j"$jobs" "${targets[@]}" "${plugins[@]}"

stage=$kit/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/plugins"
declare -A path=(
  [tessera]=app/cli/tessera
  [test_cuda_codegen]=tests/cuda/test_cuda_codegen
  [test_cuda_backend]=tests/cuda/test_cuda_backend
  [bench_cuda_step]=tests/bench/gpu/bench_cuda_step
  [bench_cuda_gemm]=tests/bench/gpu/bench_cuda_gemm
)
for t in "${targets[@]}"; do
  strip --strip-debug -o "$stage/bin/$t" "$build/${path[$t]}"
done
for p in "${plugins[@]}"; do
  strip --strip-debug -o "$stage/plugins/$p.so" "$build/plugins/$p.so"
done

# Libraries every Linux machine or every CUDA machine has: not packed.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcublas|libcublasLt|libnvrtc|libnccl|libnvJitLink|libcudnn)'
for t in "${targets[@]}"; do
  ldd "$stage/bin/$t" | awk '/=> \// {print $1, $3}' | while read -r name file; do
    [[ $name =~ $skip ]] && continue
    [[ -e $stage/lib/$name ]] || cp -L "$file" "$stage/lib/$name"
  done
done
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true

# The binaries must start with the packed libraries alone and say plainly that there is no GPU.
export LD_LIBRARY_PATH=$stage/lib
"$stage/bin/tessera" ops --json >/dev/null
echo "== test_cuda_backend here (expects skips, exit code 77: no GPU):"
rc=0
log=$("$stage/bin/test_cuda_backend" 2>&1) || rc=$?
grep -E "SKIP|skipped" <<<"$log" | head -3 || true
if ((rc != 0 && rc != 77)); then
  echo "test_cuda_backend failed here (exit code $rc)" >&2
  exit 1
fi
echo "== bench_cuda_step here (expects an error: no GPU):"
"$stage/bin/bench_cuda_step" --project "$root/sample_projects/gpt2_mini" || true
unset LD_LIBRARY_PATH

tar -C "$stage" -cJf "$kit/tessera-gpukit.tar.xz.tmp" .
mv "$kit/tessera-gpukit.tar.xz.tmp" "$kit/tessera-gpukit.tar.xz"
rm -rf "$stage"
size=$(stat -c %s "$kit/tessera-gpukit.tar.xz")
echo "== $kit/tessera-gpukit.tar.xz: $((size / 1048576)) MiB ($(git -C "$root" rev-parse --short HEAD))"
if ((size > 48 * 1048576)); then
  echo "the kit is over 48 MiB: the working tree and the kit must travel together under 64 MiB" >&2
  exit 1
fi
