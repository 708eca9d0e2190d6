# shellcheck shell=bash disable=SC2016
# Shared by the JOB-layer bats files (sched, launch, env, chain, jobgen, site): run a snippet in a fresh
# bash that has sourced lib/{sched,env,launch,chain}.sh, as a strict caller (set -euo pipefail) or a lax one.
# shellcheck disable=SC2034
JOBLIB_SOURCE='for _l in sched env launch chain; do [[ -f "$AGPT_ROOT/lib/$_l.sh" ]] && source "$AGPT_ROOT/lib/$_l.sh"; done; unset _l'
FAKE_BIN="$AGPT_ROOT/tests/fixtures/fake_bin"
QSTAT_FIXTURES="$AGPT_ROOT/tests/fixtures/qstat"

# Usage: run_strict 'SNIPPET'   (the snippet runs after `set -euo pipefail` and sourcing the libraries)
run_strict() {
  run bash -c "set -euo pipefail; $JOBLIB_SOURCE; $1"
}

# Usage: run_lax 'SNIPPET'      (no shell options at all, as in a user's interactive shell)
run_lax() {
  run bash -c "set +euo pipefail; $JOBLIB_SOURCE; $1"
}

# Usage: assert_sourcing_keeps_options LIB   (in a strict caller and a lax one: shell options and shopt
# settings are the same after sourcing LIB as before, and sourcing prints nothing)
assert_sourcing_keeps_options() {
  local lib="$1" mode
  for mode in "set -euo pipefail" "set +euo pipefail"; do
    run bash -c "$mode; b=\"\$(set +o; shopt -p)\"; source \"\$AGPT_ROOT/lib/$lib\"; a=\"\$(set +o; shopt -p)\"; [[ \"\$a\" == \"\$b\" ]] || { diff <(echo \"\$b\") <(echo \"\$a\"); exit 1; }"
    assert_success
    assert_output ""
  done
}
