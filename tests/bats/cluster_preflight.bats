#!/usr/bin/env bats
# Preflight for real on the local Slurm cluster: a generated job script for the real trainer (the tiny config,
# one node plus one spare, two ranks per node).  On the first node of the allocation the collective backend
# cannot initialise (a node-local fault: tests/fixtures/broken_node.sh points gloo at a missing interface
# there).  The node is up for Slurm, so only the preflight can tell: it must evict that node into hosts/bad
# with the failing line before the first attempt, and training must then run to the end on the spare.
# shellcheck disable=SC2016
load helpers
load cluster

local_setup() {
  cd "$BATS_TEST_TMPDIR" || return 1
  unset SLURM_JOB_ID PBS_JOBID SCHED_KIND FAILOVER_PREFLIGHT
  RUN="$BATS_TEST_TMPDIR/run"
}

teardown() {
  cancel_queued
}

# Usage: wait_gone JOBID [SECS] -> waits until the job has left the queue (default 400 s)
wait_gone() {
  local i
  for ((i = 0; i < ${2:-400}; i++)); do
    [[ -z "$(squeue -h -j "$1" -o %i 2>/dev/null)" ]] && return 0
    sleep 1
  done
  echo "job $1 still queued or running" >&2
  return 1
}

@test "Slurm: preflight evicts a node whose backend cannot initialise; training then runs on the spare" {
  sed '/^job:/,$d' "$AGPT_ROOT/jobs/configs/tiny.yaml" >t.yaml
  cat >>t.yaml <<YAML
job:
  name: pf
  nodes: 1
  spares: 1
  walltime: "00:06:00"
  account: ''
  run_dir: $RUN
  launcher: srun
  ranks_per_node: 2
  max_jobs: 1
  env:
    FAILOVER_MIN_ATTEMPT_S: 30
    AGPT_TRAIN_DEADLINE_MARGIN_S: 10
    AGPT_TEST_BROKEN_NODES: n1
    AGPT_PREFLIGHT_PROGRAM: "$AGPT_ROOT/tests/fixtures/broken_node.sh $AGPT_ROOT/.venv/bin/python -m agpt.preflight --rank"
YAML
  run agpt jobgen --site generic --scheduler slurm -o job.slurm t.yaml
  assert_success
  run grep -F "export FAILOVER_PREFLIGHT='agpt preflight {host}'" job.slurm
  assert_success
  # n1 first: it is the active host, n2 the spare.
  id="$(sbatch --parsable --nodelist=n1,n2 job.slurm)"
  wait_gone "$id"
  run cat "pf.o$id"
  assert_output --partial "preflight evicted 1 host(s): n1"
  assert_output --partial "agpt check"
  assert_output --partial "agpt: train: WARNING: SYNTHETIC DATA"
  assert_output --partial "agpt job $id: exit 0"
  # The evidence: the failing rank's own line (srun --label prefixes its rank), naming the backend's error.
  run cut -f1,4 "$RUN/hosts/bad"
  assert_output --regexp $'^n1\tpreflight rc=1: preflight: n1 FAILED \\(rc 1\\): ([0-9]+: )?preflight: rank [01]/2 on .* FAILED: RuntimeError: .*agpt-no-such-if0'
  run cat "$RUN/hosts/active"
  assert_output "n2"
  [[ -f "$RUN/ckpt/step-40/.complete" ]]
  run grep -c '"class": "success"' "$RUN/events.jsonl"
  assert_output 1
  # The preflight's full output is kept, each line prefixed with its host.
  run grep -c "^\[n2\] .*preflight: rank [01]/2 on .* ok: cpu gloo" "$RUN/attempts/$id.preflight.log"
  assert_output 2
}
