#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while on its seed
# corpus (tests/fuzz/corpus/<target>). Exits non-zero on the first crash, leak or sanitizer
# report; the reproducer is left in OUT_DIR.
#   run.sh SRC_ROOT OUT_DIR [SECONDS]      (SECONDS, or FUZZ_SECONDS, default 10 per target)
# For hours: bash tests/fuzz/run.sh . /tmp/fuzz 3600  (docs/operations.md)
set -euo pipefail
src=$(cd "$1" && pwd)
out=$2
secs=${3:-${FUZZ_SECONDS:-10}}
mkdir -p "$out"
cxx=$(command -v clang++ || command -v clang++-14)
# Line tables only: a crash report needs file:line, and full debug info doubles the build time.
flags=(-std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src" -I"$src/src")
read -r -a dpdk_cflags <<< "$(pkg-config --cflags libdpdk)"
read -r -a dpdk_libs <<< "$(pkg-config --libs libdpdk)"
read -r -a yaml_flags <<< "$(pkg-config --cflags --libs yaml-cpp)"

# The targets build and run two at a time (one per core of a CI machine); each one's output
# is kept in its own log and printed whole once it ends, so reports do not interleave.
pids=()
build() {  # target, sources and libraries
  local t=$1; shift
  if [ ! -x "$out/$t" ] || [ -n "$(find "$src/src" "$src/tests/fuzz" -newer "$out/$t" -name '*.[ch]*' -print -quit)" ]; then
    throttle
    "$cxx" "${flags[@]}" "$@" -o "$out/$t" > "$out/$t.build.log" 2>&1 &
    pids+=("$!:$t")
  fi
}
status=0
reap() {  # waits for the oldest job, prints its log; any failure fails the run
  local job=${pids[0]} t log
  pids=("${pids[@]:1}")
  t=${job#*:}
  wait "${job%%:*}" || { echo "== $t FAILED"; status=1; }
  for log in "$out/$t.build.log" "$out/$t.run.log"; do
    if [ -s "$log" ]; then cat "$log"; rm -f "$log"; fi
  done
}
throttle() { while ((${#pids[@]} >= 2)); do reap; done; }
build fuzz_ina_parse "$src/tests/fuzz/fuzz_ina_parse.cc" "$src/src/ina/protocol.cc" \
  "$src/src/wire/bitstring.cc"
build fuzz_bier_parse "$src/tests/fuzz/fuzz_bier_parse.cc" "$src/src/wire/bier_header.cc" \
  "$src/src/wire/bitstring.cc"
build fuzz_roce_parse "${dpdk_cflags[@]}" "$src/tests/fuzz/fuzz_roce_parse.cc" \
  "$src/src/roce/icrc.cc" "$src/src/roce/crc32.cc" "${dpdk_libs[@]}" -lz
reduce=("$src/src/reduce/reduce.cc" "$src/src/reduce/kernels_scalar.cc"
        "$src/src/reduce/kernels_avx2.cc" "$src/src/reduce/kernels_avx512.cc"
        "$src/src/reduce/fixed_point.cc")
build fuzz_chunk_table -ffp-contract=off "$src/tests/fuzz/fuzz_chunk_table.cc" \
  "$src/src/ina/chunk_table.cc" "$src/src/agg/agg_core.cc" "$src/src/wire/bitstring.cc" \
  "${reduce[@]}"
build fuzz_config "$src/tests/fuzz/fuzz_config.cc" "$src/src/config/config.cc" \
  "$src/src/net/addr.cc" "$src/src/wire/bitstring.cc" "$src/src/wire/bier_header.cc" \
  "${reduce[@]}" "${yaml_flags[@]}"

while ((${#pids[@]})); do reap; done
((status == 0)) || exit $status
for t in fuzz_ina_parse fuzz_chunk_table fuzz_bier_parse fuzz_roce_parse fuzz_config; do
  work="$out/$t.corpus"
  mkdir -p "$work"
  throttle
  # New inputs go to the work corpus; the committed seeds are only read.
  (
    set -o pipefail
    echo "== $t: ${secs}s"
    cd "$out" && ASAN_OPTIONS=detect_leaks=1 "./$t" -max_total_time="$secs" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      "$work" "$src/tests/fuzz/corpus/$t" 2>&1 | tail -n 20
  ) > "$out/$t.run.log" 2>&1 &
  pids+=("$!:$t")
done
while ((${#pids[@]})); do reap; done
exit $status
