# Shared helpers of the acceptance test scripts (sourced, bash).
#
# runfile REL      absolute path of workspace file REL in the runfiles
# fail MSG...      print "FAIL: MSG" and exit 1
# wait_file F S    wait up to S seconds for file F to exist
# wait_pid P S     wait up to S seconds for child P; return its exit status
#                  (124 after killing it when it took too long)
# free_port        print a TCP port that nothing on this host uses
# port_listening P true when something listens on TCP port P
# now              seconds since the epoch, with fractions
# run_all_ok LAUNCHER PROG N LABEL [VAR=VALUE...]
#                  PROG as N ranks through hcomm_run with those variables;
#                  fails unless the job exits 0, every rank printed
#                  "ok: all" and none "FAIL"

runfile() {
  local d
  for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
    if [[ -n "$d" && -e "$d/hcomm/$1" ]]; then
      echo "$(cd "$d" && pwd)/hcomm/$1"
      return 0
    fi
  done
  if [[ -e "$1" ]]; then echo "$PWD/$1"; return 0; fi
  echo "cannot find $1 in the runfiles" >&2
  return 1
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

now() { date +%s.%N; }

# elapsed T0 [T1]: seconds between two `now` values, 2 decimals.
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN { printf "%.2f", b - a }'; }

wait_file() {
  local file="$1" deadline=$(( $(date +%s) + $2 ))
  while [[ ! -e "$file" ]]; do
    (( $(date +%s) < deadline )) || return 1
    sleep 0.02
  done
}

wait_pid() {
  local pid="$1" deadline=$(( $(date +%s) + $2 )) rc=0
  while kill -0 "$pid" 2>/dev/null; do
    # A reaped zombie still answers kill -0 until `wait`; check its state.
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]] && break
    if (( $(date +%s) >= deadline )); then
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.02
  done
  wait "$pid" || rc=$?
  return "$rc"
}

port_listening() {
  local hex
  hex="$(printf '%04X' "$1")"
  awk -v p=":$hex" 'FNR > 1 && substr($2, length($2) - 4) == p && $4 == "0A" { found = 1 }
                    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

port_in_use() {
  local hex
  hex="$(printf '%04X' "$1")"
  awk -v p=":$hex" 'FNR > 1 && substr($2, length($2) - 4) == p { found = 1 }
                    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12000 )) # below the ephemeral range
    if ! port_in_use "$p" && ! port_in_use $((p + 1)); then
      echo "$p"
      return 0
    fi
  done
  return 1
}

run_all_ok() {
  local launcher="$1" prog="$2" n="$3" label="$4" out start rc r name
  shift 4
  name="$(basename "$prog")"
  out="$(mktemp "${TEST_TMPDIR:-/tmp}/$name.XXXXXX")"
  start="$(now)"
  # hcomm_run has its own --timeout; `timeout` is a backstop for the launcher.
  env "$@" timeout -k 5 180 "$launcher" -n "$n" --timeout 120 -- "$prog" >"$out" 2>&1
  rc=$?
  cat "$out"
  echo "--- $label: hcomm_run -n $n exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || { rm -f "$out"; fail "$label: hcomm_run -n $n -- $name exited $rc"; }
  for ((r = 0; r < n; r++)); do
    grep -qxF "[rank $r] ok: all" "$out" ||
      { rm -f "$out"; fail "$label, $n ranks: rank $r did not print 'ok: all'"; }
  done
  if grep -q 'FAIL' "$out"; then rm -f "$out"; fail "$label, $n ranks: a rank reported a failure"; fi
  rm -f "$out"
}
