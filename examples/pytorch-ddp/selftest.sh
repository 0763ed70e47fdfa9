#!/usr/bin/env bash
# Self-test for examples/pytorch-ddp/train.py, without drover: launches the
# ranks by hand with the environment drover sets and checks that
#
#   1. an undisturbed run of WORLD ranks prints a params hash;
#   2. a run where one rank is SIGKILLed after the first checkpoint (the
#      others then SIGTERMed, as drover does), relaunched with
#      DROVER_RESUME_FROM=<newest checkpoint> and DROVER_RESTART_COUNT=1,
#      prints "resumed from ... at step N" with N > 0 and the SAME hash;
#   3. the same holds when rank 0 itself (the checkpoint writer) is killed;
#   4. torchrun (PYTHON -m torch.distributed.run --nnodes 1 --node_rank 0
#      --nproc_per_node WORLD --master_addr --master_port, as drover starts
#      it) gives the same hash, also after one of its workers is SIGKILLed
#      and torchrun is relaunched with DROVER_RESUME_FROM, and when torchrun
#      restarts its workers in place (--max_restarts 1);
#   5. DROVER_RESUME_FROM naming a missing file makes the run fail.
#
# Usage: examples/pytorch-ddp/selftest.sh            (WORLD=2 by default)
#        WORLD=4 examples/pytorch-ddp/selftest.sh
# Env:   PYTHON (default /usr/bin/python3, which must import torch),
#        QUICK=1 skips the checks that drover's end-to-end tests
#        (examples/e2e_test.go, which run this script so) repeat through
#        drover itself: the second undisturbed run, the rank-1 kill and the
#        torchrun kill-and-relaunch; about half the time,
#        KEEP_TMP=1 keeps the scratch directory.
# Exits 0 when every check passes, 1 on the first failure.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
train="$here/train.py"
PYTHON=${PYTHON:-/usr/bin/python3}
WORLD=${WORLD:-2}
STEPS=${STEPS:-60}
CKPT_EVERY=${CKPT_EVERY:-10}
SLEEP=${SLEEP:-0.1}   # per step in the runs that get killed: 60 steps = 6 s

if ! "$PYTHON" -c 'import torch.distributed' 2>/dev/null; then
  echo "selftest: $PYTHON cannot import torch.distributed" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/drover-ddp-selftest.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "selftest: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

fail() { echo "selftest: FAIL: $*" >&2; exit 1; }
pass() { echo "selftest: ok: $*"; }

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# newest_checkpoint DIR: drover's rule, the newest entry by mtime that is
# not a temp entry (name starting with "." or ending in ".tmp").
newest_checkpoint() {
  find "$1" -mindepth 1 -maxdepth 1 ! -name '.*' ! -name '*.tmp' -printf '%T@ %p\n' 2>/dev/null |
    sort -n | tail -n 1 | cut -d' ' -f2-
}

# wait_for_checkpoint DIR: until DIR holds a complete checkpoint (30 s max).
wait_for_checkpoint() {
  local i
  for i in $(seq 300); do
    [ -n "$(newest_checkpoint "$1")" ] && return 0
    sleep 0.1
  done
  fail "no checkpoint appeared in $1 within 30s"
}

# launch NAME CKPT_DIR RESUME RESTART [train.py args...]: starts WORLD ranks
# in the background with drover's environment; their pids go to pids[] and
# rank r's output to $tmp/NAME.r.log.
launch() {
  local name=$1 ckpt=$2 resume=$3 restart=$4 r port
  shift 4
  port=$(free_port)
  pids=()
  for ((r = 0; r < WORLD; r++)); do
    env DROVER_JOB=selftest DROVER_ROLE=worker \
      DROVER_RESTART_COUNT="$restart" DROVER_RESUME_FROM="$resume" \
      DROVER_CHECKPOINT_DIR="$ckpt" \
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE="$WORLD" \
      RANK="$r" LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$WORLD" NODE_RANK=0 \
      GROUP_RANK=0 TORCHELASTIC_RESTART_COUNT="$restart" CUDA_VISIBLE_DEVICES= \
      "$PYTHON" "$train" --steps "$STEPS" --ckpt-every "$CKPT_EVERY" "$@" \
      >"$tmp/$name.$r.log" 2>&1 &
    pids+=($!)
  done
}

# wait_all: waits for every launched rank; returns the first non-zero status.
wait_all() {
  local p rc=0 s
  for p in "${pids[@]}"; do
    s=0
    wait "$p" || s=$?
    [ $rc -eq 0 ] && rc=$s
  done
  pids=()
  return $rc
}

# final_hash LOG: the params hash of rank 0's final line.
final_hash() {
  sed -n 's/^final loss=[0-9.e+-]* params_sha256=\([0-9a-f]\{64\}\)$/\1/p' "$1"
}

# resumed_step LOG: N of "resumed from PATH at step N".
resumed_step() {
  sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$1"
}

show_logs() { tail -n 20 "$tmp"/"$1".*.log >&2 || true; }

# 1. The reference: an undisturbed run.
launch ref "$tmp/ck-ref" "" 0
wait_all || { show_logs ref; fail "undisturbed run exited non-zero"; }
ref=$(final_hash "$tmp/ref.0.log")
[ -n "$ref" ] || { show_logs ref; fail "undisturbed run printed no final params hash"; }
grep -q '^starting from step 0$' "$tmp/ref.0.log" || fail "undisturbed run did not say 'starting from step 0'"
for ((r = 0; r < WORLD; r++)); do
  grep -Eq "^rank $r/$WORLD local_rank $r on .+ restart=0$" "$tmp/ref.$r.log" ||
    fail "rank $r did not print its rank line"
done
pass "undisturbed run of $WORLD ranks: params_sha256=$ref"

# A second undisturbed run must agree with the first: the baseline for
# everything below is reproducibility itself.
quick() { [ "${QUICK:-0}" = 1 ]; }
if ! quick; then
  launch ref2 "$tmp/ck-ref2" "" 0
  wait_all || { show_logs ref2; fail "second undisturbed run exited non-zero"; }
  [ "$(final_hash "$tmp/ref2.0.log")" = "$ref" ] || fail "two undisturbed runs disagree"
  pass "a second undisturbed run gives the same hash"
fi

# kill_and_resume NAME VICTIM: one rank SIGKILLed after the first
# checkpoint, the rest SIGTERMed, then a relaunch from the newest checkpoint.
kill_and_resume() {
  local name=$1 victim=$2 ck="$tmp/ck-$1" p resume step got
  launch "$name" "$ck" "" 0 --sleep-per-step "$SLEEP"
  wait_for_checkpoint "$ck"
  kill -KILL "${pids[$victim]}"
  wait "${pids[$victim]}" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  if wait_all; then fail "$name: the killed run exited 0"; fi
  if grep -q '^final loss=' "$tmp/$name.0.log"; then
    fail "$name: the run finished before it was killed (raise SLEEP)"
  fi
  resume=$(newest_checkpoint "$ck")
  [ -n "$resume" ] || fail "$name: no checkpoint left after the kill"

  # What a rank 0 killed while writing a checkpoint leaves behind: drover
  # skips it, and rank 0 removes it when it starts.
  echo torn >"$ck/.step-000005.pt.999.tmp"

  launch "$name-resume" "$ck" "$resume" 1
  wait_all || { show_logs "$name-resume"; fail "$name: resumed run exited non-zero"; }
  [ ! -e "$ck/.step-000005.pt.999.tmp" ] || fail "$name: the stale temp checkpoint was not removed"
  step=$(resumed_step "$tmp/$name-resume.0.log")
  [ -n "$step" ] && [ "$step" -gt 0 ] ||
    { show_logs "$name-resume"; fail "$name: resumed run did not print 'resumed from $resume at step N>0'"; }
  grep -q "^resumed from $resume at step $step\$" "$tmp/$name-resume.0.log" ||
    fail "$name: resumed from another file than $resume"
  grep -Eq "^rank 1/$WORLD local_rank 1 on .+ restart=1$" "$tmp/$name-resume.1.log" ||
    fail "$name: rank 1 did not report restart=1"
  got=$(final_hash "$tmp/$name-resume.0.log")
  [ "$got" = "$ref" ] || fail "$name: resumed at step $step, params_sha256=$got, want $ref"
  pass "$name: rank $victim SIGKILLed, resumed at step $step, same hash"
}

# 2. and 3.
quick || kill_and_resume kill-rank1 1
kill_and_resume kill-rank0 0

# 4. torchrun: the same training, ranks started by torchrun's agent.
# launch_torchrun NAME CKPT RESUME RESTART [train args...]
launch_torchrun() {
  local name=$1 ckpt=$2 resume=$3 restart=$4 port
  shift 4
  pids=()
  # The command line and environment drover's torchrun plan gives the one
  # node of a one-host job; torchrun sets RANK etc. for its workers, and the
  # DROVER_* variables pass through to them unchanged.
  # --redirects 2 --tee 2: torch 1.13 under Python 3.11 (Debian bookworm)
  # crashes in torchrun with "'NoneType' object has no attribute 'get'"
  # when redirects/tee are left at "0" (enum.IntFlag no longer iterates its
  # zero member); sending stderr through torchrun's tee avoids the "0" and
  # leaves stdout as it is. Harmless on fixed versions.
  port=$(free_port)
  env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE \
    DROVER_JOB=selftest DROVER_ROLE=node \
    DROVER_RESTART_COUNT="$restart" DROVER_RESUME_FROM="$resume" \
    DROVER_CHECKPOINT_DIR="$ckpt" CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" NODE_RANK=0 GROUP_RANK=0 \
    TORCHELASTIC_RESTART_COUNT="$restart" \
    "$PYTHON" -m torch.distributed.run --nnodes 1 --node_rank 0 \
    --nproc_per_node "$WORLD" --master_addr 127.0.0.1 --master_port "$port" \
    --redirects 2 --tee 2 ${TR_FLAGS:-} "$train" --steps "$STEPS" --ckpt-every "$CKPT_EVERY" "$@" \
    >"$tmp/$name.log" 2>&1 &
  pids+=($!)
}

if ! quick; then
  launch_torchrun tr "$tmp/ck-tr" "" 0
  wait_all || { tail -n 30 "$tmp/tr.log" >&2; fail "torchrun run exited non-zero"; }
  got=$(final_hash "$tmp/tr.log")
  [ "$got" = "$ref" ] || { tail -n 30 "$tmp/tr.log" >&2; fail "torchrun run: params_sha256=$got, want $ref"; }
  pass "torchrun --nproc_per_node $WORLD: same hash"

  launch_torchrun tr-kill "$tmp/ck-tr-kill" "" 0 --sleep-per-step "$SLEEP"
  wait_for_checkpoint "$tmp/ck-tr-kill"
  # The workers are torchrun's children; kill the last one.
  victim=$(pgrep -P "${pids[0]}" | tail -n 1)
  [ -n "$victim" ] || fail "torchrun: found no worker process to kill"
  kill -KILL "$victim"
  if wait_all; then fail "torchrun: the run with a killed worker exited 0"; fi
  grep -q '^final loss=' "$tmp/tr-kill.log" && fail "torchrun: the run finished before it was killed (raise SLEEP)"
  resume=$(newest_checkpoint "$tmp/ck-tr-kill")
  [ -n "$resume" ] || fail "torchrun: no checkpoint left after the kill"
  launch_torchrun tr-resume "$tmp/ck-tr-kill" "$resume" 1
  wait_all || { tail -n 30 "$tmp/tr-resume.log" >&2; fail "torchrun: resumed run exited non-zero"; }
  step=$(resumed_step "$tmp/tr-resume.log")
  [ -n "$step" ] && [ "$step" -gt 0 ] || { tail -n 30 "$tmp/tr-resume.log" >&2; fail "torchrun: no 'resumed from ... at step N>0'"; }
  got=$(final_hash "$tmp/tr-resume.log")
  [ "$got" = "$ref" ] || fail "torchrun: resumed at step $step, params_sha256=$got, want $ref"
  pass "torchrun: worker SIGKILLed, torchrun relaunched, resumed at step $step, same hash"
fi

# 4b. torchrun restarting its workers itself (--max_restarts 1): the
# environment still says DROVER_RESUME_FROM= (empty), and rank 0 finds the
# checkpoint written since in its own checkpoint dir.
TR_FLAGS="--max_restarts 1 --monitor_interval 1" launch_torchrun tr-inplace "$tmp/ck-tr-inplace" "" 0 --sleep-per-step "$SLEEP"
wait_for_checkpoint "$tmp/ck-tr-inplace"
victim=$(pgrep -P "${pids[0]}" | tail -n 1)
[ -n "$victim" ] || fail "torchrun: found no worker process to kill"
kill -KILL "$victim"
wait_all || { tail -n 30 "$tmp/tr-inplace.log" >&2; fail "torchrun --max_restarts 1: run exited non-zero"; }
step=$(resumed_step "$tmp/tr-inplace.log")
[ -n "$step" ] && [ "$step" -gt 0 ] || { tail -n 30 "$tmp/tr-inplace.log" >&2; fail "torchrun --max_restarts 1: workers did not resume from the checkpoint dir"; }
got=$(final_hash "$tmp/tr-inplace.log")
[ "$got" = "$ref" ] || fail "torchrun --max_restarts 1: resumed at step $step, params_sha256=$got, want $ref"
pass "torchrun restarted its workers in place, resumed at step $step from the checkpoint dir, same hash"

# 5. A DROVER_RESUME_FROM that is not there is an error, not a fresh start.
launch missing "$tmp/ck-missing" "$tmp/ck-missing/step-000010.pt" 1
if wait_all; then fail "a missing DROVER_RESUME_FROM did not fail the run"; fi
grep -q 'does not exist' "$tmp/missing.0.log" || { show_logs missing; fail "missing checkpoint: rank 0 did not say why"; }
pass "a missing DROVER_RESUME_FROM fails the run loudly"

if quick; then
  echo "selftest: PASS ($WORLD ranks, QUICK=1)"
else
  echo "selftest: PASS ($WORLD ranks)"
fi
