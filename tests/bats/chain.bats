#!/usr/bin/env bats
# shellcheck disable=SC2016
# lib/chain.sh + agpt chain: successors, verdicts, guard rails, the lock (PBS through recording fakes; the
# same chain on Slurm for real is in cluster_chain.bats).
load helpers
load joblib

local_setup() {
  unset SLURM_JOB_ID SLURM_JOB_NODELIST PBS_NODEFILE CHAIN_MAX_JOBS CHAIN_MAX_NO_PROGRESS
  export FAKE_PBS_DIR="$BATS_TEST_TMPDIR/pbs"
  export PATH="$FAKE_BIN:$PATH" SCHED_KIND=pbs PBS_JOBID=500.fakepbs
  export AGPT_RUN_DIR="$BATS_TEST_TMPDIR/run"
  mkdir -p "$FAKE_PBS_DIR/jobs" "$AGPT_RUN_DIR"
  printf '#!/bin/bash\n#PBS -l select=1\ntrue\n' >"$BATS_TEST_TMPDIR/job.pbs"
  JOB="$BATS_TEST_TMPDIR/job.pbs"
  # This job exists (running) on the fake server.
  printf 'Job Id: 500.fakepbs\n    job_state = R\n' >"$FAKE_PBS_DIR/jobs/500.fakepbs"
}

ckpt() {  # ckpt STEP: a complete checkpoint, as the trainer leaves it
  mkdir -p "$AGPT_RUN_DIR/ckpt/step-$1"
  echo "{\"step\": $1}" >"$AGPT_RUN_DIR/ckpt/step-$1/.complete"
}

calls() { grep -E '^(qsub|qdel)' "$FAKE_PBS_DIR/calls.log" 2>/dev/null || true; }
field() { python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(r[int(sys.argv[2])][sys.argv[3]])' "$AGPT_RUN_DIR/chain.jsonl" "$1" "$2"; }

@test "sourcing lib/chain.sh changes no caller option" {
  assert_sourcing_keeps_options chain.sh
}

@test "resubmit (75): the successor, submitted at start with afterany, is kept; chain.jsonl records it" {
  run_strict "chain_start '$JOB'; echo next=\$CHAIN_NEXT_JOB_ID; $(declare -f ckpt); ckpt 10; chain_end 75"
  assert_success
  assert_line next=1001.fakepbs
  assert_line "chain: successor 1001.fakepbs submitted (afterany:500.fakepbs)"
  assert_line "chain: verdict resubmit (rc 75): the chain goes on"
  run calls
  assert_output "qsub -W depend=afterany:500.fakepbs $JOB"
  run cut -d' ' -f1,2 "$AGPT_RUN_DIR/chain.lock"
  assert_output "1001.fakepbs 500.fakepbs"
  assert_equal "$(field 0 verdict)/$(field 0 next_jobid)/$(field 0 start_step)/$(field 0 end_step)" "resubmit/1001.fakepbs/0/10"
}

@test "done (0), stuck (3), repeat (4), usage (2): the successor is cancelled and the lock released" {
  for rc in 0 3 4 2; do
    rm -rf "$AGPT_RUN_DIR" "$FAKE_PBS_DIR/calls.log"
    mkdir -p "$AGPT_RUN_DIR"
    run_strict "chain_start '$JOB'; chain_end $rc"
    assert_success
    assert_line --partial "(rc $rc): the chain stops"
    run calls
    assert_line --index 1 --regexp '^qdel [0-9]+\.fakepbs$'
    [[ ! -e "$AGPT_RUN_DIR/chain.lock" ]]
  done
  assert_equal "$(field 0 verdict)" usage
  run_strict 'cd / ; rc=0; chain_end 0 || rc=$?; echo "no start: $rc"'
  assert_line "no start: 0"
}

@test "the successor takes the chain over: it submits the next one; its predecessor is not 'lost'" {
  run_strict "chain_start '$JOB'; chain_end 75"
  # 1001 now runs.
  printf 'Job Id: 1001.fakepbs\n    job_state = R\n' >"$FAKE_PBS_DIR/jobs/1001.fakepbs"
  PBS_JOBID=1001.fakepbs run_strict "chain_start '$JOB'; chain_end 0"
  assert_success
  assert_line "chain: successor 1002.fakepbs submitted (afterany:1001.fakepbs)"
  run calls
  assert_line --index 1 "qsub -W depend=afterany:1001.fakepbs $JOB"
  assert_line --index 2 "qdel 1002.fakepbs"
  run agpt chain status "$AGPT_RUN_DIR"
  assert_success
  assert_line --index 0 --regexp '^JOB +START +END +STEPS +NODES +VERDICT +NEXT$'
  assert_line --index 1 --regexp '^500\.fakepbs .* 0->0 +- +resubmit +1001\.fakepbs$'
  assert_line --index 2 --regexp '^1001\.fakepbs .* 0->0 +- +done +cancelled 1002\.fakepbs$'
  assert_line --index 3 "chain: 2 job(s), last verdict done, checkpoint step 0"
}

@test "a predecessor killed before it could record itself is recorded as lost" {
  echo '{"jobid": "498.fakepbs", "end_step": 10, "verdict": "resubmit", "progress": true}' >"$AGPT_RUN_DIR/chain.jsonl"
  ckpt 15
  echo "500.fakepbs 499.fakepbs 1" >"$AGPT_RUN_DIR/chain.lock"
  run_strict "chain_start '$JOB'"
  assert_success
  assert_equal "$(field 1 jobid)/$(field 1 verdict)/$(field 1 next_jobid)" "499.fakepbs/lost/500.fakepbs"
  assert_equal "$(field 1 start_step)->$(field 1 end_step) $(field 1 progress)" "10->15 True"
}

@test "never two live successors: a queued successor in the lock stops a second submission" {
  printf 'Job Id: 777.fakepbs\n    job_state = Q\n' >"$FAKE_PBS_DIR/jobs/777.fakepbs"
  echo "777.fakepbs 400.fakepbs 1" >"$AGPT_RUN_DIR/chain.lock"
  run_strict "chain_start '$JOB'; chain_end 75"
  assert_success
  assert_line "chain: successor 777.fakepbs (submitted by 400.fakepbs) is already queued; not submitting another"
  run calls
  assert_output ""
  run cut -d' ' -f1 "$AGPT_RUN_DIR/chain.lock"
  assert_output 777.fakepbs
}

@test "a second job started while the chain's current job runs refuses to train (exit 1)" {
  printf 'Job Id: 777.fakepbs\n    job_state = Q\n' >"$FAKE_PBS_DIR/jobs/777.fakepbs"
  printf 'Job Id: 400.fakepbs\n    job_state = R\n' >"$FAKE_PBS_DIR/jobs/400.fakepbs"
  echo "777.fakepbs 400.fakepbs 1" >"$AGPT_RUN_DIR/chain.lock"
  run_strict "chain_start '$JOB'"
  assert_failure 1
  assert_output "chain: job 400.fakepbs of this chain is running (successor 777.fakepbs queued): not training twice in $AGPT_RUN_DIR"
}

@test "a requeued job keeps the successor it submitted before and still cancels it when done" {
  printf 'Job Id: 777.fakepbs\n    job_state = Q\n' >"$FAKE_PBS_DIR/jobs/777.fakepbs"
  echo "777.fakepbs 500.fakepbs 1" >"$AGPT_RUN_DIR/chain.lock"
  run_strict "chain_start '$JOB'; chain_end 0"
  assert_success
  assert_line "chain: successor 777.fakepbs (submitted by this job before a requeue) is still queued; keeping it"
  assert_line "chain: successor 777.fakepbs cancelled"
  run calls
  assert_output "qdel 777.fakepbs"
}

@test "a stale lock (its successor is gone) is detected and taken over" {
  printf 'Job Id: 777.fakepbs\n    job_state = F\n' >"$FAKE_PBS_DIR/jobs/777.fakepbs"
  echo "777.fakepbs 400.fakepbs 1" >"$AGPT_RUN_DIR/chain.lock"
  mkdir "$AGPT_RUN_DIR/.chain.mutex"
  touch -d '5 minutes ago' "$AGPT_RUN_DIR/.chain.mutex"
  run_strict "chain_start '$JOB'"
  assert_success
  assert_line --partial "removing a mutex left by a dead process"
  assert_line "chain: stale lock: successor 777.fakepbs (submitted by 400.fakepbs) is gone; taking the chain over"
  assert_line "chain: successor 1001.fakepbs submitted (afterany:500.fakepbs)"
  [[ ! -f "$AGPT_RUN_DIR/chain.jsonl" ]]  # 400 is not this job's predecessor: nothing invented about it
}

@test "CHAIN_MAX_JOBS: the last job submits no successor and stops the chain" {
  for j in 1 2; do
    echo "{\"jobid\": \"$j\", \"verdict\": \"resubmit\", \"progress\": true}" >>"$AGPT_RUN_DIR/chain.jsonl"
  done
  CHAIN_MAX_JOBS=3 run_strict "chain_start '$JOB'; chain_end 75"
  assert_success
  assert_line "chain: this is the chain's last job (max_jobs(3))"
  assert_line "chain: verdict resubmit (rc 75): the chain stops (max_jobs(3))"
  run calls
  assert_output ""
}

@test "CHAIN_MAX_NO_PROGRESS: two jobs in a row without a new checkpoint stop the chain" {
  ckpt 20
  echo '{"jobid": "499.fakepbs", "verdict": "failed", "progress": false}' >>"$AGPT_RUN_DIR/chain.jsonl"
  run_strict "chain_start '$JOB'; chain_end 1"
  assert_success
  assert_line "chain: verdict failed (rc 1): the chain stops (no_progress(2))"
  run calls
  assert_line --index 1 "qdel 1001.fakepbs"
  # With progress the same failure keeps the chain going.
  rm -f "$FAKE_PBS_DIR/calls.log"
  run_strict "chain_start '$JOB'; $(declare -f ckpt); ckpt 25; chain_end 1"
  assert_line "chain: verdict failed (rc 1): the chain goes on"
}

@test "hosts proven bad (not blind) are excluded from the successor; PBS says it cannot" {
  mkdir -p "$AGPT_RUN_DIR/hosts"
  printf 'x1\t1700000000\t499\tCUDA error: uncorrectable ECC error encountered on x1\n' >"$AGPT_RUN_DIR/hosts/bad"
  printf 'x2\t1700000001\t499\tblind\n' >>"$AGPT_RUN_DIR/hosts/bad"
  run_strict "chain_start '$JOB'; chain_end 75"
  assert_success
  assert_line "sched: PBS cannot exclude hosts at submit; not excluding: x1"
  assert_line "chain: keeping successor 1001.fakepbs off hosts proven bad: x1"
  assert_line "sched: PBS cannot exclude hosts from a queued job; job 1001.fakepbs may land on: x1"
  assert_equal "$(field 0 excluded)" "['x1']"
}

@test "a failed submission at start is retried at the end" {
  FAKE_QSUB_FAIL=1 run_strict "chain_start '$JOB'; export FAKE_QSUB_FAIL=0; chain_end 75"
  assert_success
  assert_line "chain: could not submit the successor now; will retry at the end of this job"
  assert_line "chain: successor 1001.fakepbs submitted at the end of job 500.fakepbs"
}

@test "outside a batch job, or with CHAIN_DISABLE=1, nothing is submitted or recorded" {
  PBS_JOBID='' run_lax "chain_start '$JOB'; chain_end 0"
  assert_success
  assert_line "chain: not chaining (not in a batch job)"
  CHAIN_DISABLE=1 run_strict "chain_start '$JOB'; chain_end 75"
  assert_line "chain: not chaining (CHAIN_DISABLE=1)"
  [[ ! -f "$AGPT_RUN_DIR/chain.jsonl" ]]
  run calls
  assert_output ""
}

@test "bad input: no run dir is exit 2; a missing job script is exit 2 and named" {
  AGPT_RUN_DIR='' run_strict "chain_start '$JOB'"
  assert_failure 2
  run_strict "chain_start /nope.pbs"
  assert_failure 2
  assert_output --partial "job script '/nope.pbs' not found"
}

@test "agpt chain status --json; a missing run dir is exit 2" {
  run_strict "chain_start '$JOB'; chain_end 75"
  run agpt chain status --json "$AGPT_RUN_DIR"
  assert_success
  assert_output --partial '"pending": "1001.fakepbs"'
  assert_output --partial '"verdict": "resubmit"'
  run agpt chain status "$BATS_TEST_TMPDIR/nope"
  assert_failure 2
  assert_output --partial "no such run directory"
}

@test "chain_start and chain_end work under a caller's IFS without a space" {
  run_strict "IFS=\$'\\n\\t'; chain_start '$JOB'; $(declare -f ckpt); ckpt 10; chain_end 75; chain_start '$JOB'"
  assert_success
  assert_line "chain: verdict resubmit (rc 75): the chain goes on"
  assert_line "chain: successor 1001.fakepbs (submitted by this job before a requeue) is still queued; keeping it"
  assert_equal "$(field 0 verdict)" resubmit
}

@test "CHAIN_EVAL_POLL_S=nan: no evaluation watcher is started (it would spin), and it is said" {
  printf '#!/bin/bash\n#PBS -l select=1\ntrue\n' >"$BATS_TEST_TMPDIR/eval.pbs"
  run_strict "CHAIN_EVAL_SCRIPT='$BATS_TEST_TMPDIR/eval.pbs' CHAIN_EVAL_EVERY=2 CHAIN_EVAL_POLL_S=nan; chain_start '$JOB'; echo \"watcher pid '\$CHAIN_EVAL_PID'\""
  assert_success
  assert_line --partial "CHAIN_EVAL_POLL_S: must be a number from 0.1"
  assert_line "chain: no evaluation watcher: CHAIN_EVAL_POLL_S is not a number of seconds (0.1 or more)"
  assert_line "watcher pid ''"
}

@test "CHAIN_EVAL_SCRIPT: every 2nd new checkpoint is held and the eval job submitted, beside training" {
  printf '#!/bin/bash\n#PBS -l select=1\ntrue\n' >"$BATS_TEST_TMPDIR/eval.pbs"
  export CHAIN_EVAL_SCRIPT="$BATS_TEST_TMPDIR/eval.pbs" CHAIN_EVAL_EVERY=2 CHAIN_EVAL_POLL_S=0.2
  # The job's command makes checkpoints 10..40 while the watcher looks (it waits, up to 120 s, for the watcher
  # to hold step 20 before it makes 30 and 40: a loaded machine can take seconds to start its Python);
  # chain_end takes one last look.
  local held="$AGPT_RUN_DIR/ckpt/step-20/.eval-hold"
  run_strict "$(declare -f ckpt); chain_start '$JOB'; ckpt 10; ckpt 20; for _ in \$(seq 1200); do [[ -e '$held' ]] && break; sleep 0.1; done; ckpt 30; ckpt 40; w=\$CHAIN_EVAL_PID; chain_end 75; kill -0 \$w 2>/dev/null && echo watcher alive || echo watcher gone"
  assert_success
  assert_line --partial "chain: evaluating one checkpoint in 2 with $CHAIN_EVAL_SCRIPT"
  assert_line "chain: checkpoint step(s) 20 held for evaluation: submitted $CHAIN_EVAL_SCRIPT"
  assert_line "chain: checkpoint step(s) 40 held for evaluation: submitted $CHAIN_EVAL_SCRIPT"
  assert_line "watcher gone"  # chain_end stopped it
  run calls
  assert_line --index 1 "qsub $CHAIN_EVAL_SCRIPT"
  assert_line --index 2 "qsub $CHAIN_EVAL_SCRIPT"
  [[ -e "$AGPT_RUN_DIR/ckpt/step-20/.eval-hold" && -e "$AGPT_RUN_DIR/ckpt/step-40/.eval-hold" ]]
  [[ ! -e "$AGPT_RUN_DIR/ckpt/step-10/.eval-hold" && ! -e "$AGPT_RUN_DIR/ckpt/step-30/.eval-hold" ]]
  run agpt chain eval-pending "$AGPT_RUN_DIR"
  assert_output "20 40"
}
