#!/usr/bin/env bash
# Self-test for examples/demo/train.py (stdlib only), without drover:
# launches ranks by hand with the environment drover sets and checks that
#
#   1. an undisturbed run prints "final value=V", every rank its rank line,
#      and the value does not depend on the world size;
#   2. --crash-at makes one rank exit 3 on the first attempt; the others exit
#      143 promptly on SIGTERM (as drover stops them); a relaunch with
#      DROVER_RESUME_FROM=<newest checkpoint>, DROVER_RESTART_COUNT=1 resumes
#      at the checkpoint's step and ends with the same V;
#   3. a rank whose host lacks the checkpoint file recomputes the state,
#      while rank 0 without it fails.
#
# Usage: examples/demo/selftest.sh    (PYTHON=python3 by default)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
train="$here/train.py"
PYTHON=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/drover-demo-selftest.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "selftest: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
fail() { echo "selftest: FAIL: $*" >&2; exit 1; }
pass() { echo "selftest: ok: $*"; }

newest_checkpoint() {
  find "$1" -mindepth 1 -maxdepth 1 ! -name '.*' ! -name '*.tmp' -printf '%T@ %p\n' 2>/dev/null |
    sort -n | tail -n 1 | cut -d' ' -f2-
}

# launch NAME WORLD CKPT RESUME RESTART [args]: ranks in the background.
launch() {
  local name=$1 world=$2 ckpt=$3 resume=$4 restart=$5 r
  shift 5
  pids=()
  for ((r = 0; r < world; r++)); do
    env DROVER_JOB=demo DROVER_ROLE=worker RANK=$r WORLD_SIZE=$world \
      DROVER_CHECKPOINT_DIR="$ckpt" DROVER_RESUME_FROM="$resume" \
      DROVER_RESTART_COUNT="$restart" \
      "$PYTHON" "$train" --steps 12 --ckpt-every 4 --sleep 0.05 "$@" \
      >"$tmp/$name.$r.log" 2>&1 &
    pids+=($!)
  done
}

# wait_rank I: sets st to the exit status of rank I (no $(...): a subshell
# cannot wait for this shell's children).
st=0
wait_rank() { st=0; wait "${pids[$1]}" || st=$?; }

final_value() { sed -n 's/^final value=\([0-9]*\)$/\1/p' "$1"; }

# 1.
launch ref 2 "$tmp/ck-ref" "" 0
for r in 0 1; do wait_rank $r; [ "$st" = 0 ] || fail "undisturbed run: rank $r failed"; done
ref=$(final_value "$tmp/ref.0.log")
[ -n "$ref" ] || fail "undisturbed run printed no final value"
grep -q '^rank 1/2 on .* restart=0 ' "$tmp/ref.1.log" || fail "rank 1 did not print its rank line"
grep -q '^rank 1/2 step 12/12 share=' "$tmp/ref.1.log" || fail "rank 1 did not print its shares"
[ -f "$tmp/ck-ref/step-000012.json" ] || fail "no checkpoint for the last step"
launch ref3 3 "$tmp/ck-ref3" "" 0
for r in 0 1 2; do wait_rank $r; [ "$st" = 0 ] || fail "3-rank run: rank $r failed"; done
[ "$(final_value "$tmp/ref3.0.log")" = "$ref" ] || fail "3 ranks end with another value than 2"
pass "undisturbed: final value=$ref with 2 and with 3 ranks"

# 2. rank 1 crashes at step 6 (after the step-4 checkpoint).
launch crash 2 "$tmp/ck-crash" "" 0 --sleep 0.5 --crash-at 6
wait_rank 1; [ "$st" = 3 ] || fail "--crash-at: rank 1 did not exit 3"
start=$(date +%s%N)
kill -TERM "${pids[0]}"
wait_rank 0
s=$st
ms=$((($(date +%s%N) - start) / 1000000))
[ "$s" = 143 ] || fail "rank 0 exited $s on SIGTERM, want 143"
[ "$ms" -lt 2000 ] || fail "rank 0 took ${ms}ms to exit on SIGTERM"
grep -q '^rank 0: SIGTERM at step' "$tmp/crash.0.log" || fail "rank 0 did not report the SIGTERM"
pids=()
resume=$(newest_checkpoint "$tmp/ck-crash")
[ -n "$resume" ] || fail "no checkpoint after the crash"
launch resume 2 "$tmp/ck-crash" "$resume" 1 --crash-at 6
for r in 0 1; do wait_rank $r; [ "$st" = 0 ] || fail "resumed run: rank $r failed"; done
grep -Eq "^rank 0: resumed from $resume at step [1-9][0-9]* \(loaded\)$" "$tmp/resume.0.log" ||
  fail "rank 0 did not resume from $resume"
[ "$(final_value "$tmp/resume.0.log")" = "$ref" ] || fail "resumed run ends with another value"
pass "crash at step 6, SIGTERM exit in ${ms}ms, resumed from $(basename "$resume"), same value"

# 3. Checkpoints live on rank 0's host only.
ck=$(newest_checkpoint "$tmp/ck-ref")
elsewhere="$tmp/not-on-this-host/$(basename "$ck")"
pids=()
env RANK=1 WORLD_SIZE=2 DROVER_RESUME_FROM="$elsewhere" "$PYTHON" "$train" --steps 12 --sleep 0 \
  >"$tmp/other.1.log" 2>&1 || fail "rank 1 without the checkpoint file failed"
grep -q '(recomputed)$' "$tmp/other.1.log" || fail "rank 1 did not recompute the state"
grep -q "^rank 1 done value=$ref\$" "$tmp/other.1.log" || fail "rank 1 recomputed another value"
if env RANK=0 WORLD_SIZE=2 DROVER_RESUME_FROM="$elsewhere" DROVER_CHECKPOINT_DIR="$tmp/x" \
  "$PYTHON" "$train" --steps 12 --sleep 0 >"$tmp/other.0.log" 2>&1; then
  fail "rank 0 without the checkpoint file succeeded"
fi
grep -q 'does not exist' "$tmp/other.0.log" || fail "rank 0 did not say the checkpoint is missing"
pass "missing checkpoint: rank 1 recomputes, rank 0 fails"

echo "selftest: PASS"
