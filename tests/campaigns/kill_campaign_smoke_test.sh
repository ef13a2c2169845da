#!/usr/bin/env bash
# A short kill campaign (kill_campaign.sh): 4 ranks over shm and over tcp,
# 3 trials each with a random victim, then 1 each with rank 0 (the store's
# host) as the victim. Every trial must pass: each survivor fails with
# HCOMM_ERR_PEER_FAILURE (or had finished) within 10 s of the kill, no
# process and no /dev/shm segment of the job is left.
set -uo pipefail
script=""
for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [[ -n "$d" && -f "$d/hcomm/tests/campaigns/kill_campaign.sh" ]]; then
    script="$d/hcomm/tests/campaigns/kill_campaign.sh"
    break
  fi
done
[[ -n "$script" ]] || { echo "FAIL: kill_campaign.sh not in the runfiles" >&2; exit 1; }
out="$(mktemp "${TEST_TMPDIR:-/tmp}/kill_campaign_smoke.XXXXXX")"
trap 'rm -f "$out"' EXIT

# run LABEL ARGS...: one campaign; it must print PASS and exit 0.
run() {
  local label="$1" rc
  shift
  bash "$script" -n 2000 -D 0.6 "$@" >"$out" 2>&1
  rc=$?
  cat "$out"
  [[ $rc -eq 0 ]] || { echo "FAIL: $label: kill_campaign.sh $* exited $rc" >&2; exit 1; }
  grep -q '^PASS$' "$out" || { echo "FAIL: $label: no PASS" >&2; exit 1; }
  grep -q '^TOTAL: .* TIMEOUT 0, other 0, hung 0;.* leftover shm files 0, leftover processes 0$' \
    "$out" || { echo "FAIL: $label: the totals show a failure" >&2; exit 1; }
}
run "random victims" -r 4 -x shm,tcp -T 2 -s 11
run "rank 0 killed" -r 4 -x shm,tcp -T 1 -s 12 -k 0
echo "PASS: kill campaign smoke (4 ranks, shm and tcp, random victims and rank 0)"
