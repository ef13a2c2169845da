#!/usr/bin/env bash
# Builds and runs hcomm's libFuzzer targets (fuzz/*_fuzzer.cc) with clang,
# outside Bazel (Bazel's toolchain here is gcc, which has no libFuzzer).
#
#   bash tools/fuzz.sh TARGET SECONDS    # one target
#   bash tools/fuzz.sh all SECONDS       # every target, SECONDS each
#   bash tools/fuzz.sh list              # the targets
#
# Targets: store_request (the store's request loop after the handshake),
# tcp_frames (the TCP transport's frame parser), handshake (the job-token
# handshake, both sides), config (Config::Set / ParseOption / Resolve),
# fabric_frames (the point-to-point protocol, Engine::OnFrame/OnPayload,
# behind a TCP connection whose peer passed the handshake), delta_frames
# (the delta codec's decoder, algorithms/kernels/delta.h).
#
# Each target is compiled with -fsanitize=fuzzer,address,undefined together
# with the library sources it exercises (system Abseil, protobuf and
# OpenSSL; store.pb.{h,cc} generated with protoc), then run for SECONDS on
# a working corpus seeded from fuzz/corpus/TARGET/ (the seeds are read,
# never written). Objects are cached by content under the work directory.
#
# Environment: HCOMM_FUZZ_DIR (work directory; default $TEST_TMPDIR or
# /tmp, + /hcomm-fuzz), CXX (default clang++), HCOMM_FUZZ_FLAGS (extra
# libFuzzer flags, e.g. "-jobs=2 -workers=2"), HCOMM_FUZZ_OPT (the
# optimization flag, default -O1; the CI smoke test compiles with -O0,
# which builds faster and runs its few seconds slower).
#
# Prints one line per target ("fuzz TARGET: N executions in S s, ...,
# findings: none" or the crashing input and how to replay it) and, last,
# "fuzz: T targets, N executions, F findings". Exit status: 0 when nothing
# was found, 1 on a finding or a build failure, 3 when clang or its
# libFuzzer runtime is missing (`bash tools/setup.sh` installs them; the
# smoke test, fuzz/fuzz_smoke_test.sh, fails then).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGETS=(store_request tcp_frames handshake config fabric_frames delta_frames)

usage() {
  echo "usage: $0 {$(IFS='|'; echo "${TARGETS[*]}")|all} SECONDS | list" >&2
  exit 2
}

[ $# -ge 1 ] || usage
if [ "$1" = list ]; then
  printf '%s\n' "${TARGETS[@]}"
  exit 0
fi
[ $# -eq 2 ] || usage
WHICH="$1"
SECONDS_EACH="$2"
[[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] && [ "$SECONDS_EACH" -ge 1 ] || usage
if [ "$WHICH" = all ]; then
  RUN=("${TARGETS[@]}")
else
  case " ${TARGETS[*]} " in *" $WHICH "*) RUN=("$WHICH") ;; *) usage ;; esac
fi

CXX="${CXX:-clang++}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "fuzz: compiler $CXX not found; install the packages clang and libclang-rt-14-dev (bash tools/setup.sh)" >&2
  exit 3
fi
RES="$("$CXX" -print-resource-dir 2>/dev/null)"
if ! ls "$RES"/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
  echo "fuzz: $CXX has no libFuzzer runtime (libclang_rt.fuzzer-*.a) under ${RES:-its resource directory}; install the package libclang-rt-14-dev (bash tools/setup.sh)" >&2
  exit 3
fi

WORK="${HCOMM_FUZZ_DIR:-${TEST_TMPDIR:-/tmp}/hcomm-fuzz}"
GEN="$WORK/gen"
OBJ="$WORK/obj"
mkdir -p "$GEN/core/bootstrap" "$OBJ" "$WORK/bin" "$WORK/corpus" "$WORK/artifacts" "$WORK/logs"

# The point-to-point engine's sources (every .cc of core/p2p but its tests).
p2p_sources() {
  (cd "$ROOT" && ls core/p2p/*.cc | grep -v '_test\.cc$' | tr '\n' ' ')
}

# Library sources per target (paths relative to the repository root).
COMMON=(core/base/status.cc core/base/forks.cc core/base/clock.cc core/base/interrupt.cc core/base/net.cc)
sources_of() {
  case "$1" in
    store_request) echo "${COMMON[*]} core/bootstrap/store_server.cc core/bootstrap/handshake.cc @pb fuzz/store_request_fuzzer.cc" ;;
    tcp_frames)    echo "${COMMON[*]} core/base/priority.cc transports/tcp/tcp_transport.cc fuzz/tcp_frames_fuzzer.cc" ;;
    handshake)     echo "${COMMON[*]} core/bootstrap/handshake.cc @pb fuzz/handshake_fuzzer.cc" ;;
    config)        echo "${COMMON[*]} core/base/config.cc fuzz/config_fuzzer.cc" ;;
    fabric_frames) echo "${COMMON[*]} core/base/config.cc core/bootstrap/handshake.cc core/bootstrap/store_server.cc \
                         core/bootstrap/store_client.cc core/bootstrap/job.cc $(p2p_sources) @pb \
                         core/topology/placement.cc core/topology/switches.cc core/topology/host_topology.cc @topopb \
                         transports/provider.cc transports/registry.cc \
                         transports/tcp/tcp_transport.cc transports/tcp/tcp_protocol.cc \
                         transports/shm/shm_transport.cc transports/shm/shm_send.cc \
                         transports/shm/shm_receive.cc transports/shm/shm_progress.cc \
                         transports/shm/shm_protocol.cc \
                         algorithms/kernels/shared_copy.cc core/base/shm_file.cc core/base/priority.cc \
                         fuzz/fabric_frames_fuzzer.cc" ;;
    delta_frames)  echo "${COMMON[*]} algorithms/kernels/delta.cc fuzz/delta_frames_fuzzer.cc" ;;
  esac
}
max_len_of() {
  case "$1" in
    store_request|tcp_frames|fabric_frames) echo 65536 ;;
    *) echo 4096 ;;
  esac
}

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CXXFLAGS=(-std=c++17 "${HCOMM_FUZZ_OPT:--O1}" -g -fno-omit-frame-pointer $SAN -fsanitize=fuzzer-no-link
          -I"$ROOT" -I"$ROOT/c_api/include" -I"$GEN" -include "$ROOT/fuzz/clang_compat.h"
          -Wno-unused-command-line-argument)
LIBS="$(pkg-config --libs absl_statusor absl_synchronization absl_str_format absl_time \
          absl_strings absl_flat_hash_map protobuf libcrypto 2>/dev/null) -lzstd -lxxhash -lhwloc -lpthread -ldl"

# store.pb.{h,cc} and topology.pb.{h,cc}, regenerated when their .proto
# changes.
gen_proto() {
  local proto stamp sum
  for proto in core/bootstrap/store core/topology/topology; do
    stamp="$GEN/$proto.proto.sha"
    sum="$(sha1sum "$ROOT/$proto.proto" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ] || [ ! -f "$GEN/$proto.pb.cc" ]; then
      protoc --proto_path="$ROOT" --cpp_out="$GEN" "$ROOT/$proto.proto" || return 1
      echo "$sum" > "$stamp"
    fi
  done
}

# A source's path: @pb and @topopb are the generated store and topology
# messages.
src_path() {
  case "$1" in
    @pb) echo "$GEN/core/bootstrap/store.pb.cc" ;;
    @topopb) echo "$GEN/core/topology/topology.pb.cc" ;;
    *) echo "$ROOT/$1" ;;
  esac
}

# The object for one source: cached under a hash of the source, every
# header it may include from this repository, and the flags.
HDR_SUM=""
obj_for() {
  local src="$1" path
  path="$(src_path "$src")"
  local key
  key="$( { cat "$path"; echo "$HDR_SUM"; echo "${CXXFLAGS[*]}"; "$CXX" --version | head -1; } \
          | sha1sum | cut -c1-16)"
  echo "$OBJ/$(basename "$path" .cc)-$key.o"
}

compile() {
  local src="$1" out="$2" path
  path="$(src_path "$src")"
  [ -f "$out" ] && return 0
  "$CXX" "${CXXFLAGS[@]}" -c "$path" -o "$out.tmp.$$" 2>"$out.log" \
    && mv "$out.tmp.$$" "$out" && rm -f "$out.log" && return 0
  echo "fuzz: compiling $src failed:" >&2
  cat "$out.log" >&2
  return 1
}

build() {
  local t="$1" bin="$WORK/bin/${1}_fuzzer" objs=() pids=() src o ok=0
  for src in $(sources_of "$t"); do
    o="$(obj_for "$src")"
    objs+=("$o")
    if [ ! -f "$o" ]; then
      compile "$src" "$o" &
      pids+=($!)
      # Two compilations at a time (the machines are small).
      if [ ${#pids[@]} -ge 2 ]; then
        wait "${pids[0]}" || ok=1
        pids=("${pids[@]:1}")
      fi
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || ok=1; done
  [ $ok -eq 0 ] || return 1
  local link_key
  link_key="$(printf '%s\n' "${objs[@]}" | sha1sum | cut -c1-16)"
  if [ -x "$bin" ] && [ "$(cat "$bin.key" 2>/dev/null)" = "$link_key" ]; then return 0; fi
  "$CXX" $SAN -fsanitize=fuzzer "${objs[@]}" $LIBS -o "$bin" 2>"$bin.log" || {
    echo "fuzz: linking $t failed:" >&2
    cat "$bin.log" >&2
    return 1
  }
  echo "$link_key" > "$bin.key"
}

gen_proto || { echo "fuzz: protoc failed"; echo "fuzz: ${#RUN[@]} targets, 0 executions, build failed"; exit 1; }
HDR_SUM="$(cat "$ROOT"/fuzz/*.h "$ROOT"/c_api/include/hcomm/* "$ROOT"/core/*/*.h "$ROOT"/algorithms/kernels/*.h "$ROOT"/transports/*.h "$ROOT"/transports/*/*.h \
             "$GEN/core/bootstrap/store.pb.h" | sha1sum | cut -d' ' -f1)"

total_execs=0
findings=0
failed_builds=0
for t in "${RUN[@]}"; do
  if ! build "$t"; then
    echo "fuzz $t: BUILD FAILED"
    failed_builds=$((failed_builds + 1))
    continue
  fi
  corpus="$WORK/corpus/$t"
  mkdir -p "$corpus"
  log="$WORK/logs/$t.log"
  rm -f "$WORK/artifacts/$t-"*
  # -timeout: one input running this long is a hang; -rss_limit_mb: the
  # store accepts values of 64 MiB, so a frame may legitimately take that.
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$WORK/bin/${t}_fuzzer" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2560 \
      -max_len="$(max_len_of "$t")" -print_final_stats=1 -print_pcs=0 \
      -artifact_prefix="$WORK/artifacts/$t-" ${HCOMM_FUZZ_FLAGS:-} \
      "$corpus" "$ROOT/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs="$(grep -h 'stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')"
  speed="$(grep -h 'stat::average_exec_per_sec' "$log" | awk '{s += $2} END {print s + 0}')"
  cov="$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')"
  ncorpus="$(find "$corpus" -type f | wc -l)"
  total_execs=$((total_execs + execs))
  artifacts=$(find "$WORK/artifacts" -maxdepth 1 -name "$t-*" -type f 2>/dev/null)
  if [ "$rc" -eq 0 ] && [ -z "$artifacts" ]; then
    echo "fuzz $t: $execs executions in ${SECONDS_EACH} s (${speed}/s), coverage ${cov:-?} edges, corpus $ncorpus inputs, findings: none"
  else
    findings=$((findings + 1))
    echo "fuzz $t: $execs executions, FINDING (libFuzzer exit $rc)"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*invariant violated|.*ERROR: libFuzzer)' "$log" \
      | head -5 | sed 's/^/  /'
    for a in $artifacts; do
      echo "  input: $a"
      echo "  replay: $WORK/bin/${t}_fuzzer $a"
    done
    echo "  log: $log"
  fi
done
echo "fuzz: ${#RUN[@]} targets, $total_execs executions, $findings findings$([ $failed_builds -gt 0 ] && echo ", $failed_builds builds failed")"
[ $findings -eq 0 ] && [ $failed_builds -eq 0 ]
