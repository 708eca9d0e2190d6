# shellcheck shell=bash
# Shared by the bats files that run lib/failover.sh (failover, and in a batch job on the local Slurm cluster
# cluster_failover, cluster_heartbeat, cluster_sweep): wait for the job, read the loop's events, show what it left
# for a failing test's output.  They read RUN (the run directory) and OUT (the job's output file), which the
# batch jobs' local_setup below sets with JOB (the batch script); failover.bats defines its own after loading.

# shellcheck disable=SC2034  # JOB is read by the bats files that load this
local_setup() {  # called by helpers' setup: the per-test run directory, batch script and job output
  RUN="$BATS_TEST_TMPDIR/run"
  JOB="$BATS_TEST_TMPDIR/job.sh"
  OUT="$BATS_TEST_TMPDIR/job.out"
}

wait_job() {  # wait_job ID [SECONDS]: prints the job's exit code once it left the queue (default 180 s)
  local id="$1" secs="${2:-180}" i state
  for ((i = 0; i < secs * 5; i++)); do
    state="$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')"
    case "$state" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;;
    esac
    sleep 0.2
  done
  scontrol show job "$id" | sed -n 's/.*ExitCode=\([0-9]*\):.*/\1/p'
}

ev() {  # ev KIND [FIELD...]: the events of a kind, fields as compact JSON
  python3 - "$RUN/events.jsonl" "$@" <<'PY'
import json, sys
path, kind, *fields = sys.argv[1:]
for line in open(path):
    e = json.loads(line)
    if e.get("event") == kind:
        print(" ".join(json.dumps(e.get(f), separators=(",", ":")) for f in fields) if fields else line.strip())
PY
}

show_job() {  # the job's output, events, classifications and sweep logs
  echo "--- job output"
  cat "$OUT" 2>/dev/null || true
  echo "--- events"
  cat "$RUN/events.jsonl" 2>/dev/null || true
  echo "--- classifications"
  cat "$RUN"/attempts/*.class.json 2>/dev/null || true
  echo "--- sweep logs"
  cat "$RUN"/attempts/*.sweep.log 2>/dev/null || true
}
