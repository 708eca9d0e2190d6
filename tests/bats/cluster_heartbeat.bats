#!/usr/bin/env bats
# Heartbeats on the real local Slurm cluster: a batch job `sbatch -N 9` (6 active + 3 spares, 2 ranks per node)
# runs the failover loop over the fake trainer, which publishes heartbeats every second.  (a) a rank frozen with
# SIGSTOP, (b) a rank asleep in its forward pass: the first relaunch swaps exactly that node, on evidence;
# (c) a node 3x slower: a straggler, swapped after a checkpoint with no step lost; (d) heartbeats off: the blind
# rotation still finds the hang.
# shellcheck disable=SC2016  # single-quoted job lines expand in the job, not here
load helpers
load loop_jobs
# shellcheck disable=SC2034  # read by cluster.bash
CLUSTER_NODES=9
load cluster

# Writes the batch script; settings lines come from stdin.
write_job() {
  local settings
  settings="$(cat)"
  cat >"$JOB" <<SH
#!/bin/bash
set -euo pipefail
source '$AGPT_ROOT/lib/sched.sh'
source '$AGPT_ROOT/lib/failover.sh'
export AGPT_RUN_DIR='$RUN' AGPT_HEARTBEAT_INTERVAL_S=1 AGPT_HEARTBEAT_TICK_S=0.25
FAILOVER_SPARES=3 FAILOVER_BACKOFF="0 1" FAILOVER_IDLE_TIMEOUT=8 FAILOVER_STARTUP_TIMEOUT=40
FAILOVER_GRACE=2 FAILOVER_RESOLVE_TIMEOUT=2 FAILOVER_MIN_ATTEMPT_S=30
$settings
# the allocation's task count (2 per node of 9) must not leak into the 6-node steps
unset SLURM_NTASKS SLURM_NPROCS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE
rc=0
failover_run srun --label --nodelist {hosts} -N {nhosts} --ntasks-per-node=2 --kill-on-bad-exit=1 \\
  python3 '$AGPT_ROOT/tests/fixtures/fake_trainer.py' --steps \${STEPS:-12} --step-time 0.15 --ckpt-interval 2 \\
  || rc=\$?
echo "verdict: \$rc"
exit "\$rc"
SH
}

submit() {
  sbatch --parsable -N 9 --ntasks-per-node=2 -t 10:00 --no-kill -o "$OUT" "$JOB"
}

wait_step() {  # wait_step LOG STEP: until rank 0 logged STEP (at most 60 s)
  local i
  for ((i = 0; i < 600; i++)); do
    grep -qsE "^ *(0: )?step=$2 " "$1" && return 0
    sleep 0.1
  done
  return 1
}

@test "(a) heartbeat cluster: a rank frozen with SIGSTOP on n3: the first relaunch swaps exactly n3, on evidence" {
  # Kill on evidence ends the hang once two looks one interval apart, after two intervals of silence, find n3
  # stopped (about 3 s here), before the 8-s watchdog: the live ranks dump their stacks after 1 s without a step.
  STEPS=30 write_job <<<'export AGPT_HEARTBEAT_DUMP_S=1'
  id="$(STEPS=30 submit)"
  wait_step "$RUN/attempts/$id.1.log" 3
  # the pid of n3's second rank (local rank 1: its node's publisher, local rank 0, stays alive)
  pid="$(python3 -c 'import json,sys; print([r["pid"] for r in json.load(open(sys.argv[1]))["ranks"] if r["local_rank"] == 1][0])' "$RUN/heartbeat/n3.json")"
  kill -STOP "$pid"
  rc="$(wait_job "$id")"
  kill -KILL "$pid" 2>/dev/null || true
  show_job
  assert_equal "$rc" 0
  run ev attempt attempt rc class bad_hosts swapped
  assert_line --index 0 '1 124 "node" ["n3"] {"out":["n3"],"in":["n7"],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^2 0 "success" '
  assert_equal "${#lines[@]}" 2
  run grep -c "agpt watch: evidence: heartbeat: n3 stopped" "$RUN/attempts/$id.1.log"
  assert_output 1
  run grep -P "^n3\t" "$RUN/hosts/bad"
  assert_output --regexp $'\theartbeat: n3 stopped: rank 5 tick [0-9]+ unchanged for [0-9.]+ s \\(process state T: stopped\\)'
  # every live rank dumped its stacks before the kill; the report links them
  run cat "$RUN/attempts/$id.1.stacks/n1.txt"
  assert_output --partial 'rank 0 pid'
  run agpt failover report "$RUN"
  assert_output --partial "stacks: $RUN/attempts/$id.1.stacks/"
}

@test "(b) heartbeat cluster: a rank asleep in its forward pass on n4 is named behind and swapped in one attempt" {
  write_job <<<'export FAKE_TRAINER_FAULTS=sleep@4:n4'
  id="$(submit)"
  rc="$(wait_job "$id")"
  show_job
  assert_equal "$rc" 0
  run ev attempt attempt rc class bad_hosts swapped
  assert_line --index 0 '1 124 "node" ["n4"] {"out":["n4"],"in":["n7"],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^2 0 "success" '
  run grep -P "^n4\t" "$RUN/hosts/bad"
  assert_output --regexp $'\theartbeat: n4 behind: rank [67] at step 3 in forward for [0-9.]+ s while 10 other rank\\(s\\) wait at step 3 in collective'
}

@test "(c) heartbeat cluster: a node 3x slower is a straggler; with swap it is replaced at a checkpoint, no step lost" {
  write_job <<<'export AGPT_FAULT_SLOW_HOST=n5:3 FAILOVER_STRAGGLER=swap FAILOVER_STRAGGLER_WINDOWS=3 STEPS=40'
  id="$(submit)"
  rc="$(wait_job "$id" 240)"
  show_job
  assert_equal "$rc" 0
  run ev straggler host action windows
  assert_output '"n5" "swap" 3'
  run ev attempt attempt rc class bad_hosts swapped
  assert_line --index 0 '1 75 "node" ["n5"] {"out":["n5"],"in":["n7"],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^2 0 "success" '
  # no step lost: the first attempt stopped right after a checkpoint, the second resumed from the next step
  run ev attempt last_step first_step
  last="${lines[0]%% *}"
  assert_equal "$((last % 2))" 0
  assert_equal "${lines[1]#* }" "$((last + 1))"
  run grep -P "^n5\t" "$RUN/hosts/bad"
  assert_output --regexp $'\tstraggler: n5 computes 0\\.[0-9]+ s/step, its peers\' median 0\\.[0-9]+ s \\(\\+[0-9]+%'
  run agpt failover report "$RUN"
  assert_output --regexp 'straggler: n5 computes .* -> swap'
}

@test "(d) heartbeat cluster: heartbeats and the sweep off: the hang is found by the blind rotation as before" {
  write_job <<<'export AGPT_HEARTBEAT=0 FAKE_TRAINER_FAULTS=sleep@3:n2; FAILOVER_SWEEP=off'
  id="$(submit)"
  rc="$(wait_job "$id" 300)"
  show_job
  assert_equal "$rc" 0
  run ev attempt class swapped
  assert_line --index 0 --regexp '^"hang" .*"blind":true'
  refute_line --regexp '^"hang" .*"blind":false'
  run grep -c n2 "$RUN/hosts/active"
  assert_output 0
  run test -e "$RUN/heartbeat"
  assert_failure
}
