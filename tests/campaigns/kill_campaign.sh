#!/usr/bin/env bash
# Kill campaign: SIGKILL a random rank of a running job and check what the
# survivors see (docs/reliability.md, "Campaigns").
#
#   tests/campaigns/kill_campaign.sh [-r RANKS] [-x TRANSPORTS] [-T TRIALS]
#                                    [-s SEED] [-n OPS] [-k VICTIM] [-D F] [-q]
#
#   -r RANKS       ranks per job, or a comma list (default 4; e.g. 4,8)
#   -x TRANSPORTS  shm, tcp or mixed, or a comma list (default shm). mixed:
#                  two pretend hosts (HCOMM_HOST_ID: ranks 0..R/2-1 on one,
#                  the rest on the other), shm within a host, TCP between
#   -T TRIALS      trials per (ranks, transport) pair (default 10)
#   -s SEED        seeds the choice of victims and delays, and each trial's
#                  op sequence (default 1); the same seed repeats a campaign
#   -n OPS         operations per job (default 5000; mixed_ops.c says which)
#   -k VICTIM      kill this rank in every trial instead of a random one
#   -D F           delays are drawn from [0, F x D) (default 1; see below)
#   -q             print only failing trials and the summaries
# The same as environment variables: CAMPAIGN_RANKS, CAMPAIGN_TRANSPORTS,
# CAMPAIGN_TRIALS, CAMPAIGN_SEED, CAMPAIGN_OPS, CAMPAIGN_VICTIM,
# CAMPAIGN_MAX_DELAY (flags win).
# MIXED_OPS=PATH runs that mixed_ops binary instead of building one;
# CAMPAIGN_LOGS=DIR keeps every trial's rank logs in DIR.
#
# For each (ranks, transport) pair, one job runs to its end first without a
# kill (it must succeed; its duration D bounds the delays). Then, per trial:
# the ranks are started by hand (HCOMM_RANK, ..., a fresh HCOMM_JOB_KEY so
# that the job's /dev/shm names are known), each signals when its init and a
# first barrier are done; after a random delay in [0, D) the victim is
# SIGKILLed. A trial passes when
#   - every survivor exits with PEER_FAILURE (mixed_ops exit 3), or exits 0
#     having finished before the kill (counted apart, as are trials whose
#     victim itself had already finished);
#   - every survivor has exited within 10 s of the kill (each has 30 s
#     before it is counted hung and killed; timeout_ms is 20 s, so a
#     survivor waiting on the dead rank ends as TIMEOUT, not as a hang);
#   - no process of the job is left, and no /dev/shm/hcomm-<key>-* file.
# Prints one line per trial, then a summary per pair and in all. Exit
# status: 0 when every trial passed, 1 otherwise, 2 on bad usage.
set -uo pipefail

ranks_list="${CAMPAIGN_RANKS:-4}"
transports_list="${CAMPAIGN_TRANSPORTS:-shm}"
trials="${CAMPAIGN_TRIALS:-10}"
seed="${CAMPAIGN_SEED:-1}"
ops="${CAMPAIGN_OPS:-5000}"
forced_victim="${CAMPAIGN_VICTIM:-}"
max_frac="${CAMPAIGN_MAX_DELAY:-1}"
quiet=0
usage() {
  sed -n '5,23p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while getopts "r:x:T:s:n:k:D:qh" opt; do
  case "$opt" in
    r) ranks_list="$OPTARG" ;;
    x) transports_list="$OPTARG" ;;
    T) trials="$OPTARG" ;;
    s) seed="$OPTARG" ;;
    n) ops="$OPTARG" ;;
    k) forced_victim="$OPTARG" ;;
    D) max_frac="$OPTARG" ;;
    q) quiet=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
(( $# == 0 )) || usage
for v in "$trials" "$seed" "$ops"; do [[ "$v" =~ ^[0-9]+$ ]] || usage; done
[[ -z "$forced_victim" || "$forced_victim" =~ ^[0-9]+$ ]] || usage
[[ "$max_frac" =~ ^(0?\.[0-9]+|1(\.0*)?)$ ]] || usage

kill_limit=10   # a survivor must have exited this many seconds after the kill
hang_limit=30   # ... and is counted hung (and killed) after this many

# The program and the shared test helpers: from the runfiles inside Bazel,
# else from the checkout (building mixed_ops unless MIXED_OPS names one).
here="$(cd "$(dirname "$0")" && pwd)"
prog="${MIXED_OPS:-}" testlib=""
for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [[ -n "$d" && -x "$d/hcomm/tests/campaigns/mixed_ops" ]]; then
    [[ -n "$prog" ]] || prog="$d/hcomm/tests/campaigns/mixed_ops"
    testlib="$d/hcomm/tests/acceptance/testlib.sh"
    break
  fi
done
if [[ -z "$testlib" ]]; then
  root="$(cd "$here/../.." && pwd)"
  testlib="$root/tests/acceptance/testlib.sh"
  if [[ -z "$prog" ]]; then
    (cd "$root" && bazel build //tests/campaigns:mixed_ops) >&2 || exit 1
    prog="$(cd "$root" && bazel info bazel-bin 2>/dev/null)/tests/campaigns/mixed_ops"
  fi
fi
# shellcheck source=../acceptance/testlib.sh
source "$testlib"
[[ -x "$prog" ]] || fail "no mixed_ops at $prog"

work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/kill_campaign.XXXXXX")"
wrappers=()
cur_dir=""
main_pid=$BASHPID
cleanup() {
  local p f
  # Subshells may inherit this trap (bash runs it where a subshell sets one).
  [[ "$BASHPID" == "$main_pid" ]] || return 0
  # Only the ranks of the job in progress (an ended rank's pid may be reused).
  for f in "$cur_dir"/ready.*; do
    [[ -e "$f" && ! -e "$cur_dir/exit.${f##*.}" ]] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  for p in "${wrappers[@]}"; do kill -9 "$p" 2>/dev/null; done
  [[ -e "$cur_dir/watchdog" ]] && kill "$(cat "$cur_dir/watchdog")" 2>/dev/null
  { wait; } 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS \
  HCOMM_RANK HCOMM_WORLD_SIZE HCOMM_STORE_ADDR HCOMM_JOB_TOKEN HCOMM_TIMEOUT_MS \
  HCOMM_JOB_KEY HCOMM_HOST_ID HCOMM_TRANSPORTS

hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# start_job DIR N TRANSPORT OPS SEED: starts N ranks of mixed_ops; each runs
# inside a subshell that writes DIR/exit.R = "<exit status> <epoch seconds>"
# when its rank ends. Sets job_key.
start_job() {
  local dir="$1" n="$2" transport="$3" jops="$4" jseed="$5" port tok r host tr
  mkdir -p "$dir"
  cur_dir="$dir"
  port="$(free_port)" || fail "no free port"
  tok="$(hex 16)"
  job_key="$(hex 8)"
  wrappers=()
  for ((r = 0; r < n; r++)); do
    host="" tr=""
    case "$transport" in
      shm) tr=shm ;;
      tcp) tr=tcp ;;
      mixed) host="campaignhost$((r < n / 2 ? 0 : 1))" ;;
    esac
    (
      [[ -n "$tr" ]] && export HCOMM_TRANSPORTS="$tr"
      [[ -n "$host" ]] && export HCOMM_HOST_ID="$host"
      HCOMM_RANK="$r" HCOMM_WORLD_SIZE="$n" HCOMM_STORE_ADDR="127.0.0.1:$port" \
        HCOMM_JOB_TOKEN="$tok" HCOMM_JOB_KEY="$job_key" \
        "$prog" -n "$jops" -s "$jseed" -t 20000 -d "$dir" >"$dir/r$r.log" 2>&1 </dev/null &
      wait $!
      echo "$? $EPOCHREALTIME" >"$dir/.exit.$r" && mv "$dir/.exit.$r" "$dir/exit.$r"
    ) 2>/dev/null &
    wrappers+=("$!")
  done
}

# wait_ready DIR N: every rank's init and first barrier done (60 s at most).
wait_ready() {
  local r
  for ((r = 0; r < $2; r++)); do wait_file "$1/ready.$r" 60 || return 1; done
}

# finish_job DIR N: waits for every rank (a watchdog SIGKILLs whatever still
# runs hang_limit seconds from now); sets rc_R and end_R per rank.
finish_job() {
  local dir="$1" n="$2" r pids=() wd p
  for ((r = 0; r < n; r++)); do
    [[ -e "$dir/ready.$r" ]] && pids+=("$(cat "$dir/ready.$r")")
  done
  # The watchdog: killing its sleep (pid in DIR/watchdog) disarms it.
  (
    sleep "$hang_limit" &
    echo "$!" >"$dir/watchdog"
    wait "$!" && for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ) &
  wd=$!
  for p in "${wrappers[@]}"; do wait "$p" 2>/dev/null; done
  wait_file "$dir/watchdog" 5 && kill "$(cat "$dir/watchdog")" 2>/dev/null
  wait "$wd" 2>/dev/null
  wrappers=()
  for ((r = 0; r < n; r++)); do
    read -r "rc_$r" "end_$r" <"$dir/exit.$r" || { printf -v "rc_$r" 255; printf -v "end_$r" 0; }
  done
}

# leftovers DIR: "<processes> <shm files>" the job left behind.
leftovers() {
  local dir="$1" procs
  # Job directories end in "-job", so no name is a prefix of another; the
  # pattern "[-]job" keeps grep from matching its own command line.
  procs="$(grep -la -- "${dir%-job}[-]job" /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"
  echo "$procs $(find /dev/shm -maxdepth 1 -name "hcomm-$job_key-*" 2>/dev/null | wc -l)"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-";
  else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Totals over every pair.
all_trials=0 all_failed_trials=0 all_surv=0 all_pf=0 all_fin=0 all_to=0 all_other=0 all_hang=0
all_late=0 all_slow=0 all_shm=0 all_procs=0 all_times=()
failures=()

# campaign N TRANSPORT
campaign() {
  local n="$1" transport="$2" dir t r victim delay kill_at last rc end dt verdict
  local t_run t0 cal_ok procs shm line times=() tseed
  local c_surv=0 c_pf=0 c_fin=0 c_to=0 c_other=0 c_hang=0 c_late=0 c_slow=0 c_shm=0
  local c_procs=0 c_failed=0 c_mid=0 c_named=0
  # Calibration: one whole run without a kill.
  dir="$work/$n-$transport-cal-job"
  t0="$EPOCHREALTIME"
  start_job "$dir" "$n" "$transport" "$ops" "$seed"
  wait_ready "$dir" "$n" || true
  t0="$EPOCHREALTIME"
  finish_job "$dir" "$n"
  t_run="$(elapsed "$t0")"
  cal_ok=1
  for ((r = 0; r < n; r++)); do
    rc="rc_$r"
    [[ "${!rc}" == 0 ]] || cal_ok=0
  done
  read -r procs shm <<<"$(leftovers "$dir")"
  echo "== $n ranks over $transport: a run of $ops ops without a kill took $t_run s" \
    "($(grep -ho 'over [a-z]*' "$dir"/r*.log | sort | uniq -c | awk '{printf "%s%s links %s", (NR > 1 ? ", " : ""), $1, $3}'))"
  if ((cal_ok == 0 || procs > 0 || shm > 0)); then
    cat "$dir"/r*.log
    failures+=("$n ranks $transport: the run without a kill failed (procs left $procs, shm left $shm)")
    all_failed_trials=$((all_failed_trials + 1))
    return
  fi
  rm -rf "$dir"
  for ((t = 1; t <= trials; t++)); do
    tseed=$((seed * 100003 + t))
    if [[ -n "$forced_victim" ]]; then victim="$forced_victim"; else victim=$((RANDOM % n)); fi
    ((victim < n)) || fail "-k $victim: no such rank in a job of $n"
    delay="$(awk -v d="$t_run" -v f="$max_frac" -v x="$RANDOM" 'BEGIN { printf "%.3f", d * f * x / 32768 }')"
    dir="$work/$n-$transport-$t-job"
    start_job "$dir" "$n" "$transport" "$ops" "$tseed"
    if ! wait_ready "$dir" "$n"; then
      finish_job "$dir" "$n"
      cat "$dir"/r*.log
      failures+=("$n ranks $transport trial $t (seed $tseed): a rank never got ready")
      c_failed=$((c_failed + 1))
      continue
    fi
    sleep "$delay"
    kill -9 "$(cat "$dir/ready.$victim")" 2>/dev/null
    kill_at="$EPOCHREALTIME"
    finish_job "$dir" "$n"
    read -r procs shm <<<"$(leftovers "$dir")"
    local pf=0 fin=0 to=0 other=0 hang=0 surv=0 late=0 named=0 notes=""
    last=0
    rc="rc_$victim"
    if [[ "${!rc}" == 0 ]]; then late=1; notes+=" victim had finished;"; fi
    for ((r = 0; r < n; r++)); do
      ((r == victim)) && continue
      surv=$((surv + 1))
      rc="rc_$r" end="end_$r"
      dt="$(awk -v a="$kill_at" -v b="${!end}" 'BEGIN { d = b - a; printf "%.3f", d < 0 ? 0 : d }')"
      case "${!rc}" in
        3)
          pf=$((pf + 1))
          # Does the message name the killed rank ("rank V" or "world rank V")?
          sed -n 's/^rank [0-9]*: op [0-9]* ([^)]*): HCOMM_ERR_PEER_FAILURE: //p' "$dir/r$r.log" |
            grep -qE "rank $victim([^0-9]|\$)" && named=$((named + 1))
          ;;
        0) fin=$((fin + 1)) ;;
        4) to=$((to + 1)); notes+=" rank $r TIMEOUT;" ;;
        137) hang=$((hang + 1)); notes+=" rank $r HUNG (killed after $hang_limit s);" ;;
        *) other=$((other + 1)); notes+=" rank $r exit ${!rc};" ;;
      esac
      if [[ "${!rc}" != 0 ]] && awk -v d="$dt" -v l="$last" 'BEGIN { exit !(d > l) }'; then
        last="$dt"
      fi
    done
    verdict=ok
    ((to + other + hang > 0)) && verdict=FAIL
    ((procs + shm > 0)) && verdict=FAIL
    if awk -v d="$last" -v l="$kill_limit" 'BEGIN { exit !(d > l) }'; then
      verdict=FAIL
      c_slow=$((c_slow + 1))
      notes+=" over $kill_limit s;"
    fi
    ((late == 0 && pf > 0)) && { times+=("$last"); c_mid=$((c_mid + 1)); }
    line="trial $t: $n ranks $transport seed $tseed: killed rank $victim $delay s after ready;"
    line+=" survivors $surv: PEER_FAILURE $pf (naming rank $victim: $named), finished $fin,"
    line+=" TIMEOUT $to, other $other,"
    line+=" hung $hang; last survivor exit $last s after the kill; procs left $procs,"
    line+=" shm left $shm:${notes} $verdict"
    if [[ "$verdict" != ok ]]; then
      echo "$line"
      for ((r = 0; r < n; r++)); do
        echo "  --- rank $r (exit $(eval echo "\$rc_$r")):"
        grep -v '^rank [0-9]*: pid' "$dir/r$r.log" | cut -c1-600 | sed 's/^/  /'
      done
      failures+=("$line")
      c_failed=$((c_failed + 1))
    else
      ((quiet)) || echo "$line"
    fi
    c_named=$((c_named + named))
    c_surv=$((c_surv + surv)) c_pf=$((c_pf + pf)) c_fin=$((c_fin + fin)) c_to=$((c_to + to))
    c_other=$((c_other + other)) c_hang=$((c_hang + hang)) c_late=$((c_late + late))
    c_shm=$((c_shm + shm)) c_procs=$((c_procs + procs))
    # CAMPAIGN_LOGS=DIR keeps every trial's rank logs there.
    [[ -n "${CAMPAIGN_LOGS:-}" ]] && mkdir -p "$CAMPAIGN_LOGS" && cp -r "$dir" "$CAMPAIGN_LOGS/"
    [[ "$verdict" == ok ]] && rm -rf "$dir"
  done
  local med max
  med="$(printf '%s\n' "${times[@]}" | median)"
  max="$(printf '%s\n' "${times[@]}" | sort -g | tail -1)"
  echo "summary $n ranks $transport: trials $trials (killed mid-run $c_mid, victim already" \
    "finished $c_late), failed $c_failed; survivors $c_surv: PEER_FAILURE $c_pf" \
    "(naming the killed rank $c_named)," \
    "finished before the kill $c_fin, TIMEOUT $c_to, other $c_other, hung $c_hang;" \
    "kill to last survivor exit: median ${med} s, max ${max:--} s, over ${kill_limit} s $c_slow;" \
    "leftover shm files $c_shm, leftover processes $c_procs"
  all_trials=$((all_trials + trials)) all_failed_trials=$((all_failed_trials + c_failed))
  all_surv=$((all_surv + c_surv)) all_pf=$((all_pf + c_pf)) all_fin=$((all_fin + c_fin))
  all_to=$((all_to + c_to)) all_other=$((all_other + c_other)) all_hang=$((all_hang + c_hang))
  all_late=$((all_late + c_late)) all_slow=$((all_slow + c_slow)) all_shm=$((all_shm + c_shm))
  all_procs=$((all_procs + c_procs))
  all_times+=("${times[@]}")
}

RANDOM="$seed"
echo "kill campaign: ranks $ranks_list, transports $transports_list, $trials trials each," \
  "$ops ops per job, seed $seed, victim ${forced_victim:-random}; $(nproc) CPUs"
IFS=, read -ra rank_counts <<<"$ranks_list"
IFS=, read -ra transports <<<"$transports_list"
for n in "${rank_counts[@]}"; do
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 2)) || usage
  for x in "${transports[@]}"; do
    case "$x" in shm | tcp | mixed) ;; *) usage ;; esac
    campaign "$n" "$x"
  done
done
med="$(printf '%s\n' "${all_times[@]}" | median)"
max="$(printf '%s\n' "${all_times[@]}" | sort -g | tail -1)"
echo "TOTAL: trials $all_trials, failed $all_failed_trials; victim already finished $all_late;" \
  "survivors $all_surv: PEER_FAILURE $all_pf, finished before the kill $all_fin," \
  "TIMEOUT $all_to, other $all_other, hung $all_hang; kill to last survivor exit: median" \
  "${med} s, max ${max:--} s, over ${kill_limit} s $all_slow; leftover shm files $all_shm," \
  "leftover processes $all_procs"
if ((${#failures[@]} > 0)); then
  echo "FAILED:"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "PASS"
