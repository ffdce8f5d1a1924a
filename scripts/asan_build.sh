# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the one instrumented build both use, in build-asan/
# (or TESSERA_ASAN_BUILD_DIR). clang-14 with AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's
# coverage (fuzzer-no-link: the fuzz harnesses link -fsanitize=fuzzer, the tests do not); the engine, the CLI,
# the plugins and the tests, without the IDE, the Python module or CUDA. One build for both, as each is a full
# engine build.
#
# libstdc++ 12 gives clang 14 no std::source_location (it needs clang 15's __builtin_source_location), so
# tests/fuzz/clang_source_location.h is force-included to provide it.
ASAN_BUILD_DIR=${TESSERA_ASAN_BUILD_DIR:-build-asan}
ASAN_JOBS=${JOBS:-1}

configure_asan_build() {
  if [[ -f "$ASAN_BUILD_DIR/build.ninja" ]]; then return; fi
  local flags="-include $PWD/tests/fuzz/clang_source_location.h -fsanitize=address,undefined,fuzzer-no-link"
  flags+=" -fno-omit-frame-pointer"
  # -O1 with line tables only: a quicker build, and stacks that still name every line. No NDEBUG: assertions,
  # the libraries' too (toml++'s), are on.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$ASAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DTESSERA_BUILD_STUDIO=OFF -DTESSERA_BUILD_PYTHON=OFF -DTESSERA_CUDA=OFF -DTESSERA_FUZZ=ON -DCMAKE_CXX_FLAGS="$flags"
}

# What the instrumented programs run with. Native CPU kernels are compiled by the compiler that built the
# engine (clang-14 here) into a cache of this build's own.
asan_environment() {
  local supp="$PWD/scripts/sanitize"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0:${ASAN_OPTIONS:-}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp:${UBSAN_OPTIONS:-}"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
  export TESSERA_KERNEL_CACHE="$PWD/$ASAN_BUILD_DIR/kernel-cache"
}
