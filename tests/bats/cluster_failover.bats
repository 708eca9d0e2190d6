#!/usr/bin/env bats
# lib/failover.sh on the real local Slurm cluster: a batch job `sbatch -N 6` (4 active + 2 spares) sources the
# library and runs `failover_run srun --nodelist {hosts} ...` over the fake trainer.  (a) a rank dies naming its
# host, (b) a node really fails (slurmd killed, `srun: error: Node failure on nK`), (c) a silent hang, (d) (a) with
# every rank in a container (SITE_CONTAINER=apptainer, through the stand-in tests/fixtures/fake_bin/apptainer).
# Each asserts the swaps, the verdict and events.jsonl.
# shellcheck disable=SC2016  # single-quoted job lines expand in the job, not here
load helpers
load loop_jobs
load cluster

# Writes the batch script; settings lines come from stdin.  LAUNCH: the launcher words before the trainer
# (default: srun with rank labels, as a site profile would set it).
write_job() {
  local settings launch='srun --label --nodelist {hosts} -N {nhosts} --ntasks-per-node=1 --kill-on-bad-exit=1'
  [[ -z "${LAUNCH:-}" ]] || launch="$LAUNCH"
  settings="$(cat)"
  cat >"$JOB" <<SH
#!/bin/bash
set -euo pipefail
source '$AGPT_ROOT/lib/sched.sh'
source '$AGPT_ROOT/lib/failover.sh'
export AGPT_RUN_DIR='$RUN'
FAILOVER_SPARES=2 FAILOVER_BACKOFF="0 1" FAILOVER_IDLE_TIMEOUT=15 FAILOVER_STARTUP_TIMEOUT=30
FAILOVER_GRACE=2 FAILOVER_RESOLVE_TIMEOUT=2 FAILOVER_MIN_ATTEMPT_S=30
$settings
rc=0
failover_run $launch \\
  python3 '$AGPT_ROOT/tests/fixtures/fake_trainer.py' --steps 8 --step-time 0.15 --ckpt-interval 2 || rc=\$?
echo "verdict: \$rc"
exit "\$rc"
SH
}

# Submits the job (-N 6, 10 min, --no-kill so a failed node does not end the allocation); prints its id.
submit() {
  sbatch --parsable -N 6 -t 10:00 --no-kill -o "$OUT" "$JOB"
}

@test "cluster: a rank dies naming its host: that host is swapped, training resumes and finishes" {
  write_job <<<'export FAKE_TRAINER_FAULTS=die@3:n2'
  id="$(submit)"
  rc="$(wait_job "$id")"
  show_job
  assert_equal "$rc" 0
  run grep -F 'verdict: 0' "$OUT"
  assert_success
  run ev attempt attempt class bad_hosts swapped hosts
  assert_line --index 0 '1 "node" ["n2"] {"out":["n2"],"in":["n5"],"blind":false,"returned":[]} ["n1","n2","n3","n4"]'
  assert_line --index 1 --regexp '^2 "success" .* \["n1","n5","n3","n4"\]$'
  run ev stop verdict exit
  assert_output '"done" 0'
  run cut -f1,3 "$RUN/hosts/bad"
  assert_output "n2	$id"
  run ev attempt last_step
  assert_line --index 1 8
}

@test "cluster: a node fails for real (slurmd killed): srun names it, it is swapped, training finishes" {
  # Through the job layer's launcher, as generated job scripts run it: `agpt launch` reads hosts/active.
  LAUNCH="agpt launch" write_job <<<'export LAUNCH_LAUNCHER=srun AGPT_SITE=generic'
  id="$(submit)"
  # Fail n3 once the first attempt is past step 2.
  for ((i = 0; i < 300; i++)); do
    grep -qsE '^(0: )?step=2 ' "$RUN/attempts/$id.1.log" && break
    sleep 0.1
  done
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" fail n3
  assert_success
  rc="$(wait_job "$id")"
  "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" restore n3 || true
  show_job
  assert_equal "$rc" 0
  run grep -F 'Node failure on n3' "$RUN/attempts/$id.1.log"
  assert_success
  run ev attempt attempt class bad_hosts swapped
  assert_line --index 0 '1 "node" ["n3"] {"out":["n3"],"in":["n5"],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^2 "success" '
  run ev stop verdict exit
  assert_output '"done" 0'
  run cat "$RUN/hosts/active"
  assert_output $'n1\nn2\nn5\nn4'
}

@test "cluster: a silent hang: the watchdog fires, blind swaps reach the guilty host within 4 attempts" {
  # The last resort when no evidence can be had (heartbeats and the health sweep off): the blind rotation.
  write_job <<<'export FAKE_TRAINER_FAULTS=hang@3:n4 AGPT_HEARTBEAT=0; FAILOVER_SWEEP=off FAILOVER_IDLE_TIMEOUT=5 FAILOVER_STARTUP_TIMEOUT=10'
  id="$(submit)"
  rc="$(wait_job "$id" 240)"
  show_job
  assert_equal "$rc" 0
  run ev attempt rc class
  assert_line --index 0 '124 "hang"'
  # at most as many failed attempts as active hosts, then the good one
  ((${#lines[@]} <= 5))
  run ev attempt class swapped
  refute_line --regexp '^"hang" .*"blind":false'
  run ev stop verdict exit
  assert_output '"done" 0'
  run grep -P '^n4\t' "$RUN/hosts/bad"
  assert_output --regexp $'\tblind$'
  run grep -vP '\tblind$' "$RUN/hosts/bad"
  assert_output ""
  run grep -c n4 "$RUN/hosts/active"
  assert_output 0
}

@test "cluster: in a container (apptainer's stand-in) a rank dies naming n3: n3 is swapped, every rank went through the wrapper" {
  # SITE_CONTAINER=apptainer and job.container_image as a generated script exports it; the runtime is
  # tests/fixtures/fake_bin/apptainer (no container runtime runs here): it checks its arguments and the image,
  # records each call with its node, and runs the rank's command on that node as apptainer would.
  mkdir -p "$BATS_TEST_TMPDIR/site/c" "$BATS_TEST_TMPDIR/rt"
  sed -e 's/^SITE_NAME=generic/SITE_NAME=c/' -e 's/^SITE_CONTAINER=none/SITE_CONTAINER=apptainer/' \
    "$AGPT_ROOT/site/generic/profile.sh" >"$BATS_TEST_TMPDIR/site/c/profile.sh"
  ln -s "$AGPT_ROOT/tests/fixtures/fake_bin/apptainer" "$BATS_TEST_TMPDIR/rt/apptainer"
  touch "$BATS_TEST_TMPDIR/pt.sif"
  LAUNCH="agpt launch" write_job <<SH
export LAUNCH_LAUNCHER=srun AGPT_SITE=c AGPT_SITE_DIR='$BATS_TEST_TMPDIR/site' PATH='$BATS_TEST_TMPDIR/rt':\$PATH
export AGPT_CONTAINER_IMAGE='$BATS_TEST_TMPDIR/pt.sif' FAKE_APPTAINER_LOG='$BATS_TEST_TMPDIR/apptainer.log'
export FAKE_TRAINER_FAULTS=die@3:n3
SH
  id="$(submit)"
  rc="$(wait_job "$id")"
  show_job
  cat "$BATS_TEST_TMPDIR/apptainer.log" || true
  assert_equal "$rc" 0
  run grep -F "apptainer exec --bind $RUN,$AGPT_ROOT $BATS_TEST_TMPDIR/pt.sif env AGPT_PYTHON=python3 python3" \
    "$RUN/attempts/$id.1.log"
  assert_success
  run ev attempt attempt class bad_hosts swapped hosts
  assert_line --index 0 '1 "node" ["n3"] {"out":["n3"],"in":["n5"],"blind":false,"returned":[]} ["n1","n2","n3","n4"]'
  assert_line --index 1 --regexp '^2 "success" .* \["n1","n2","n5","n4"\]$'
  run ev stop verdict exit
  assert_output '"done" 0'
  # One call per rank of each attempt, each on its own node, each the trainer in the image with the run dir bound.
  run cut -d' ' -f1 "$BATS_TEST_TMPDIR/apptainer.log"
  assert_equal "$(sort <<<"$output" | paste -sd' ')" "host=n1 host=n1 host=n2 host=n2 host=n3 host=n4 host=n4 host=n5"
  run grep -vc "image=$BATS_TEST_TMPDIR/pt.sif bind=$RUN,$AGPT_ROOT cmd=env AGPT_PYTHON=python3 python3 $AGPT_ROOT/tests/fixtures/fake_trainer.py" \
    "$BATS_TEST_TMPDIR/apptainer.log"
  assert_output 0
}
