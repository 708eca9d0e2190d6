# shellcheck shell=bash
# Loaded by every tests/bats/cluster_*.bats after helpers: the local Slurm cluster up once per file (nodes:
# CLUSTER_NODES, set before `load cluster`; default tests/cluster/up's), down at the end, one retry per test,
# and cancel_queued for a test's teardown.

# The real scheduler's timing varies on 2 loaded cores: one retry; twice in a row is still a failure.
# shellcheck disable=SC2034  # read by bats
BATS_TEST_RETRIES=1
bats_require_minimum_version 1.5.0

setup_file() {
  export AGPT_CLUSTER_DIR="$BATS_FILE_TMPDIR/cluster"
  # shellcheck disable=SC2086  # CLUSTER_NODES is one number or empty
  "$AGPT_ROOT/tests/cluster/up" --dir "$AGPT_CLUSTER_DIR" ${CLUSTER_NODES:+--nodes "$CLUSTER_NODES"} \
    >"$BATS_FILE_TMPDIR/cluster.env"
  # shellcheck disable=SC1091
  source "$BATS_FILE_TMPDIR/cluster.env"
}

teardown_file() {
  if [[ -n "${AGPT_CLUSTER_DIR:-}" ]]; then
    "$AGPT_ROOT/tests/cluster/down" --dir "$AGPT_CLUSTER_DIR" || true
  fi
}

# Usage: cancel_queued -> cancels every job still queued or running (nothing of a test may stay queued).
cancel_queued() {
  local ids
  ids="$(squeue -h -o %i 2>/dev/null | paste -sd' ')" || true
  # shellcheck disable=SC2086
  [[ -z "$ids" ]] || scancel $ids 2>/dev/null || true
}
