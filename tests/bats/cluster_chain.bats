#!/usr/bin/env bats
# The chain for real on the local Slurm cluster: generated job scripts (1-minute limit) whose trainer needs
# four jobs' worth of steps run as a chain to completion and cancel their last successor; a trainer that
# fails before any progress stops the chain after one job with `stuck`; the same chain through the PBS-style
# qsub/qdel wrappers.  The trainer is tests/fixtures/fake_trainer.py launched by srun on two nodes: it stops
# with 75 after 3 steps, as the real trainer does when its deadline nears.
# shellcheck disable=SC2016
load helpers
load cluster

local_setup() {
  cd "$BATS_TEST_TMPDIR" || return 1
  unset SLURM_JOB_ID PBS_JOBID SCHED_KIND
  RUN="$BATS_TEST_TMPDIR/run"
}

teardown() {
  cancel_queued
}

# Usage: config EXTRA_ARGS MAXJOBS -> writes t.yaml: 2 nodes, 1-minute limit, srun, the fake trainer
config() {
  cat >t.yaml <<EOF
job:
  nodes: 2
  spares: 0
  walltime: 1
  account: ''
  run_dir: $RUN
  launcher: srun
  ranks_per_node: 1
  max_jobs: ${2:-8}
  command: [python3, $AGPT_ROOT/tests/fixtures/fake_trainer.py, --run-dir, '{run_dir}', --steps, '12',
            --step-time, '0.1', --ckpt-interval, '3', --max-steps-per-run, '3' $1]
  env: {FAILOVER_MIN_ATTEMPT_S: 5, FAILOVER_BACKOFF: 0, FAILOVER_WALLTIME_MARGIN: 5}
EOF
}

# Usage: wait_stop [SECS] -> waits until chain.jsonl records a `stop` decision (default 150 s)
wait_stop() {
  local i
  for ((i = 0; i < ${1:-150} * 2; i++)); do
    grep -q '"decision": "stop"' "$RUN/chain.jsonl" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "the chain did not stop; chain.jsonl:" >&2
  cat "$RUN/chain.jsonl" >&2 || true
  tail -n 30 ./*.o* >&2 || true
  return 1
}

state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }

jq1() {  # jq1 INDEX KEY: a field of a chain.jsonl record
  python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(r[int(sys.argv[2])][sys.argv[3]])' \
    "$RUN/chain.jsonl" "$1" "$2"
}

@test "Slurm: a 4-job chain runs to completion, then cancels its last successor; proven-bad hosts excluded" {
  config "" 8
  # A host proven bad by an earlier job: every successor must avoid it (sbatch --exclude, scontrol update).
  mkdir -p "$RUN/hosts"
  printf 'n6\t1700000000\t0\tsrun: error: Node failure on n6\n' >"$RUN/hosts/bad"
  run agpt jobgen --site generic --scheduler slurm -o job.slurm t.yaml
  assert_success
  first="$(sbatch --parsable job.slurm)"
  wait_stop
  run agpt chain status "$RUN"
  assert_success
  # (the whole table when it is not the four jobs)
  assert_equal "${#lines[@]}" 6 || {
    printf "%s\n" "$output" "chain.jsonl:"
    cat "$RUN/chain.jsonl" "$RUN"/attempts/*.log
    false
  }
  assert_line --index 1 --regexp "^$first .* 0->3 +[0-9>-]+ +resubmit +[0-9]+$"
  assert_line --index 2 --regexp " 3->6 +[0-9>-]+ +resubmit +[0-9]+$"
  assert_line --index 3 --regexp " 6->9 +[0-9>-]+ +resubmit +[0-9]+$"
  assert_line --index 4 --regexp " 9->12 +[0-9>-]+ +done +cancelled [0-9]+$"
  assert_line --index 5 "chain: 4 job(s), last verdict done, checkpoint step 12"
  last="$(jq1 3 cancelled_jobid)"
  [[ "$(state "$last")" == CANCELLED ]]
  [[ -f "$RUN/ckpt/step-12/.complete" ]]
  # Each successor was submitted by its predecessor with afterany, and kept off n6.
  run cat ./*.o*
  for i in 0 1 2; do
    assert_output --partial "successor $(jq1 "$i" next_jobid) submitted (afterany:$(jq1 "$i" jobid))"
  done
  assert_output --partial "--dependency=afterany:$first --exclude=n6"
  assert_output --partial "chain: keeping successor $(jq1 0 next_jobid) off hosts proven bad: n6"
  run scontrol show job "$last"
  assert_output --partial "ExcNodeList=n6"
  # The deadline came from the scheduler (squeue %e): about the 1-minute limit after the job started.
  deadline="$(sed -n "s/^agpt job $first on .*: deadline \([0-9]*\)$/\1/p" "t.o$first")"
  started="$(jq1 0 started)"
  ((deadline - started >= 30 && deadline - started <= 90))
  [[ ! -e "$RUN/chain.lock" ]]
}

@test "Slurm: a trainer that fails before any progress stops the chain after one job with stuck" {
  config ", --fault, 'app@1'" 8
  run agpt jobgen --site generic --scheduler slurm -o job.slurm t.yaml
  assert_success
  first="$(sbatch --parsable job.slurm)"
  wait_stop 90
  run agpt chain status "$RUN"
  assert_line --index 1 --regexp "^$first .* 0->0 +[0-9>-]+ +stuck +cancelled [0-9]+$"
  assert_line --index 2 "chain: 1 job(s), last verdict stuck, checkpoint step 0"
  [[ "$(state "$(jq1 0 cancelled_jobid)")" == CANCELLED ]]
  [[ "$(jq1 0 rc)" == 3 ]]
}

@test "Slurm: a job killed mid-run still hands over (afterany); its successor records it and resumes" {
  config "" 8
  sed -i -e "s/, --max-steps-per-run, '3'//" -e "s/'0.1'/'0.3'/" t.yaml
  run agpt jobgen --site generic --scheduler slurm -o job.slurm t.yaml
  assert_success
  first="$(sbatch --parsable job.slurm)"
  for ((i = 0; i < 120; i++)); do
    [[ -f "$RUN/ckpt/step-3/.complete" ]] && break
    sleep 0.5
  done
  [[ -f "$RUN/ckpt/step-3/.complete" ]]
  scancel "$first"
  wait_stop 120
  run agpt chain status "$RUN"
  assert_line --index 1 --regexp "^$first .* 0->([3-9]|1[01]) +[0-9>-]+ +(lost \(no end record.*\)|signal15) +[0-9]+$"
  assert_line --index 2 --regexp "->12 +[0-9>-]+ +done +cancelled [0-9]+$"
  assert_equal "$(jq1 0 progress)" True
}

@test "PBS: qsub of a generated .pbs script chains through the qsub/qdel wrappers to completion" {
  config "" 8
  sed -i "s/'12'/'6'/" t.yaml
  run agpt jobgen --site generic --scheduler pbs -o smoke.pbs t.yaml
  assert_success
  run grep -E '^#PBS' smoke.pbs
  assert_line "#PBS -l select=2"
  assert_line "#PBS -l walltime=00:01:00"
  first="$(qsub smoke.pbs)"
  wait_stop 90
  tail -n 40 ./*.o* ./*.e* || true  # (bats shows it when the test fails)
  run agpt chain status "$RUN"
  assert_line --index 1 --regexp "^$first .* 0->3 +[0-9>-]+ +resubmit +[0-9]+$"
  assert_line --index 2 --regexp " 3->6 +[0-9>-]+ +done +cancelled [0-9]+$"
  run cat ./*.o* ./*.e*
  # The job saw PBS's variables (spank_pbs), submitted with qsub -W depend=afterany and cancelled with qdel.
  assert_output --partial "sched: submitted $(jq1 0 next_jobid): qsub -W depend=afterany:$first"
  assert_output --partial "chain: successor $(jq1 1 cancelled_jobid) cancelled"
  [[ "$(state "$(jq1 1 cancelled_jobid)")" == CANCELLED ]]
}
