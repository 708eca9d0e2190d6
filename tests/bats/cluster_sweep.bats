#!/usr/bin/env bats
# The health sweep on the real local Slurm cluster: a batch job `sbatch -N 6` (4 active + 2 spares) runs the fake
# trainer under lib/failover.sh, and a rank on n3 dies of a segfault at step 3 (once): srun's exit notice names
# the task's node, a hint, no proof.  The loop then sweeps the 4 active hosts with the real probe (agpt.probe:
# memory, /dev/shm, the run directory, device and backend initialisation) through the real launcher (`agpt launch`
# -> srun, one rank per node) and the cross-host collective (agpt.preflight's allreduce).
#   (a) n3's backend cannot initialise (tests/fixtures/broken_node.sh points gloo at a missing interface there):
#       exactly n3 is evicted on the probe's failing line, in one attempt, and training finishes on the spare;
#   (b) every host healthy: the same crash evicts nobody, and the relaunch keeps the same hosts;
#   (c) an application error on every rank (a KeyError, once) while n3's probe fails: n3 is evicted on that
#       evidence, not a stop for a person;
#   (d) the same error every attempt, every host healthy: the sweep passes, one relaunch reproduces it, and the
#       loop stops (repeat, 4) with a line naming both attempts and the sweep; no second sweep.
# shellcheck disable=SC2016  # single-quoted job lines expand in the job, not here
load helpers
load loop_jobs
load cluster

# Writes the batch script; extra settings come from stdin.
write_job() {
  local settings broken="$AGPT_ROOT/tests/fixtures/broken_node.sh" py="$AGPT_ROOT/.venv/bin/python"
  settings="$(cat)"
  cat >"$JOB" <<SH
#!/bin/bash
set -euo pipefail
source '$AGPT_ROOT/lib/sched.sh'
source '$AGPT_ROOT/lib/failover.sh'
export AGPT_RUN_DIR='$RUN' AGPT_SITE=generic LAUNCH_LAUNCHER=srun MASTER_ADDR=127.0.0.1 AGPT_PYTHON='$py'
export AGPT_SWEEP_PROGRAM='$broken $py -m agpt.probe' AGPT_PREFLIGHT_PROGRAM='$broken $py -m agpt.preflight --rank'
export FAKE_TRAINER_FAULTS=crash@3:n3:once
FAILOVER_SPARES=2 FAILOVER_BACKOFF="0 1" FAILOVER_IDLE_TIMEOUT=20 FAILOVER_STARTUP_TIMEOUT=40
FAILOVER_GRACE=2 FAILOVER_RESOLVE_TIMEOUT=2 FAILOVER_MIN_ATTEMPT_S=30 FAILOVER_SWEEP_TIMEOUT=150
$settings
rc=0
failover_run srun --label --nodelist {hosts} -N {nhosts} --ntasks-per-node=1 --kill-on-bad-exit=1 \\
  python3 '$AGPT_ROOT/tests/fixtures/fake_trainer.py' --steps 8 --step-time 0.15 --ckpt-interval 2 || rc=\$?
echo "verdict: \$rc"
exit "\$rc"
SH
}

# Submits the job and waits until it has left the queue (at most 600 s); prints its exit code.
run_job() {
  wait_job "$(sbatch --parsable -N 6 -t 15:00 --no-kill -o "$OUT" "$JOB")" 600
}

@test "(a) sweep cluster: a crash naming nobody on a host whose backend cannot start: exactly that host evicted on evidence" {
  write_job <<<'export AGPT_TEST_BROKEN_NODES=n3'
  rc="$(run_job)"
  show_job
  assert_equal "$rc" 0
  run grep -E 'srun: error: n3: task 2: Segmentation fault' "$RUN"/attempts/*.1.log
  assert_success
  run ev attempt attempt class bad_hosts swapped hosts
  assert_line --index 0 '1 "node" ["n3"] {"out":["n3"],"in":["n5"],"blind":false,"returned":[]} ["n1","n2","n3","n4"]'
  assert_line --index 1 --regexp '^2 "success" .* \["n1","n2","n5","n4"\]$'
  ((${#lines[@]} == 2))
  # the evidence: n3's own probe line, naming the interface gloo could not find there
  run cut -f1,4 "$RUN/hosts/bad"
  assert_output --regexp $'^n3\tsweep: n3: agpt-probe: n3 FAILED: device: exit 1: .*agpt-no-such-if0'
  run ev attempt sweep
  assert_line --index 0 --regexp '"ran":true,"mode":"full","hosts":4,"failed":\{"n3":'
  run agpt failover report "$RUN"
  assert_output --regexp 'sweep after [0-9]+\.1: 4 host\(s\), 1 round\(s\), .*n3 failed: agpt-probe: n3 FAILED: device'
  assert_output --partial "1 health sweep(s)"
}

@test "(b) sweep cluster: the same crash with every host healthy: nobody evicted, the relaunch keeps the hosts" {
  write_job <<<''
  rc="$(run_job)"
  show_job
  assert_equal "$rc" 0
  run ev attempt attempt class swapped hosts
  assert_line --index 0 '1 "crash" {"out":[],"in":[],"blind":false,"returned":[]} ["n1","n2","n3","n4"]'
  assert_line --index 1 '2 "success" {"out":[],"in":[],"blind":false,"returned":[]} ["n1","n2","n3","n4"]'
  assert [ ! -e "$RUN/hosts/bad" ]
  run ev attempt sweep
  assert_line --index 0 --regexp '"ran":true,"mode":"full","hosts":4,"failed":\{\},.*"site_wide":false'
  run ev attempt reason
  assert_line --index 0 --partial "the health sweep passed every host: no node to blame"
}

@test "(c) sweep cluster: an application-looking error on every rank, one host's probe failing: that host evicted on the sweep's evidence, no stop" {
  write_job <<<'export AGPT_TEST_BROKEN_NODES=n3 FAKE_TRAINER_FAULTS=app@3::once'
  rc="$(run_job)"
  show_job
  assert_equal "$rc" 0
  run grep -c "KeyError: 'model.hidden_sizee'" "$RUN"/attempts/*.1.log
  assert_output 4
  run ev attempt attempt class bad_hosts swapped
  assert_line --index 0 '1 "node" ["n3"] {"out":["n3"],"in":["n5"],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^2 "success" '
  run cut -f1,4 "$RUN/hosts/bad"
  assert_output --regexp $'^n3\tsweep: n3: agpt-probe: n3 FAILED: device'
}

@test "(d) sweep cluster: the same application error with every host healthy: one reproduction after the sweep, then a stop naming both attempts" {
  write_job <<<'export FAKE_TRAINER_FAULTS=app@3'
  rc="$(run_job)"
  show_job
  assert_equal "$rc" 4
  run ev attempt attempt class passed swapped
  assert_line --index 0 '1 "app" "probe + collective" {"out":[],"in":[],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^2 "app" "" '
  ((${#lines[@]} == 2))
  run ev stop verdict reason
  assert_output --regexp "^\"repeat\" \"app: \`[0-9]+: KeyError: 'model.hidden_sizee' \(unknown config key\)\` at step 2 on attempts 1 and 2, every host passed the sweep \(probe \+ collective\): a person is needed\"$"
  run grep -c 'agpt-probe: n[1-4] ok' "$RUN"/attempts/*.1.sweep.log
  assert_output 4
  assert [ ! -e "$RUN"/attempts/*.2.sweep.log ]
  assert [ ! -e "$RUN/hosts/bad" ]
}
