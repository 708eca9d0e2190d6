#!/usr/bin/env bats
# lib/failover.sh without a scheduler: sourcing leaves the caller alone, and the whole loop runs on this machine
# with tests/fixtures/fake_launch.sh starting one fake trainer per host of a fake allocation (h1..h6).
# shellcheck disable=SC2016  # single-quoted job lines expand in the job, not here
load helpers
load loop_jobs

# The suite runs this file under BASH_ENV with `set -u` (it sources lib/failover.sh): every bash it starts,
# the loop's job scripts and fake trainers included, has `set -u`.

local_setup() {
  RUN="$BATS_TEST_TMPDIR/run"
  ALLOC="$BATS_TEST_TMPDIR/alloc"
  printf 'h%s\n' 1 2 3 4 5 6 >"$ALLOC"
}

# Writes a job script that sources the library under `set -euo pipefail` and runs the loop with the fake
# launcher; extra lines (settings) come from stdin.  Prints the script's path.  The fake trainer's steps take
# 0.02 s: the loop's decisions are under test, not the pace (0.05 s steps only waited: 104 s for this file, not 82).
job() {
  local f="$BATS_TEST_TMPDIR/job.sh"
  {
    echo 'set -euo pipefail'
    echo "source '$AGPT_ROOT/lib/failover.sh'"
    echo "export AGPT_RUN_DIR='$RUN'"
    echo "FAILOVER_HOSTS_FROM='$ALLOC' FAILOVER_SPARES=2 FAILOVER_BACKOFF=0 FAILOVER_RESOLVE_TIMEOUT=0"
    echo 'FAILOVER_IDLE_TIMEOUT=15 FAILOVER_STARTUP_TIMEOUT=30 FAILOVER_GRACE=1 FAILOVER_JOBID=j1'
    cat
    echo 'export FAKE_TRAINER_FAULTS="${FAULTS:-}"'
    echo 'rc=0'
    echo "failover_run '$AGPT_ROOT/tests/fixtures/fake_launch.sh' python3 '$AGPT_ROOT/tests/fixtures/fake_trainer.py' \\"
    echo '  --steps "${STEPS:-10}" --step-time 0.02 --ckpt-interval 2 || rc=$?'
    echo 'echo "verdict: $rc"'
    echo 'exit "$rc"'
  } >"$f"
  echo "$f"
}

# Snapshot of a shell's state: options, shopt, variables and functions (dynamic variables left out).
state_script() {
  cat <<'SH'
snap() {
  set -o
  shopt
  declare -p | grep -Ev '^declare -[-a-zA-Z]* (_|BASH_[A-Z_]+|FUNCNAME|LINENO|RANDOM|SRANDOM|SECONDS|EPOCH[A-Z]+|PIPESTATUS|OLDPWD)='
  declare -F
}
SH
}

check_sourcing() {  # check_sourcing "SET OPTIONS": sourcing changes nothing outside the library's prefixes
  local f="$BATS_TEST_TMPDIR/src.sh"
  {
    echo "$1"
    state_script
    echo 'caller_var=keep; declare -a arr=(1 2); declare -A map=([k]=v)'
    echo "snap >'$BATS_TEST_TMPDIR/before'"
    echo "source '$AGPT_ROOT/lib/failover.sh'"
    echo "snap >'$BATS_TEST_TMPDIR/after'"
    echo 'echo sourced-ok'
  } >"$f"
  run bash "$f"
  assert_success
  assert_output sourced-ok
  run diff "$BATS_TEST_TMPDIR/before" "$BATS_TEST_TMPDIR/after"
  # Every added line names something of the library: FAILOVER_*, failover_*, _failover_*.
  local added
  added="$(grep '^>' <<<"$output" | grep -Ev '^> declare -[-a-zA-Z]* (FAILOVER_|failover_|_failover_)' || true)"
  assert_equal "$added" ""
  refute_line --regexp '^<'
}

@test "sourcing under set -euo pipefail changes no option, shopt or variable outside the prefixes" {
  check_sourcing 'set -euo pipefail'
}

@test "sourcing under set -u changes nothing outside the prefixes" {
  check_sourcing 'set -u'
}

@test "sourcing with no options changes nothing outside the prefixes; settings keep the caller's values" {
  check_sourcing ''
  run bash -c "FAILOVER_MAX_REPEAT=7; source '$AGPT_ROOT/lib/failover.sh'; echo \$FAILOVER_MAX_REPEAT \$FAILOVER_BACKOFF"
  assert_output "7 5 10 20 40 60"
}

@test "failover_run: no command or no run dir is a usage error (2), not an exit" {
  run bash -c "set -euo pipefail; source '$AGPT_ROOT/lib/failover.sh'; rc=0; failover_run || rc=\$?; echo rc=\$rc"
  assert_output --partial "rc=2"
  run bash -c "set -u; unset AGPT_RUN_DIR; source '$AGPT_ROOT/lib/failover.sh'; failover_run true; echo rc=\$?"
  assert_output --partial "AGPT_RUN_DIR is not set"
  assert_output --partial "rc=2"
}

@test "a bad setting is bad input (2) before any attempt, naming the setting" {
  run bash "$(job <<<'FAILOVER_MAX_REPEAT=1')"
  assert_failure 2
  assert_output --partial "FAILOVER_MAX_REPEAT must be at least 2"
  run bash "$(job <<<'FAILOVER_PROGRESS_RE="step=("')"
  assert_failure 2
  assert_output --partial "FAILOVER_PROGRESS_RE"
}

@test "failover_init: too few hosts for FAILOVER_ACTIVE is refused with the numbers (exit 2)" {
  run bash -c "set -euo pipefail; source '$AGPT_ROOT/lib/failover.sh'; export AGPT_RUN_DIR='$RUN'
    FAILOVER_HOSTS_FROM='$ALLOC' FAILOVER_ACTIVE=8 FAILOVER_RESOLVE_TIMEOUT=0; rc=0; failover_init || rc=\$?; echo rc=\$rc"
  assert_output --partial "asked for 8 active"
  assert_output --partial "rc=2"
}

@test "clean run: done (0), one attempt, the command got the hosts and attempt number" {
  run bash "$(job <<<'')"
  assert_success
  assert_line "verdict: 0"
  run ev attempt attempt rc class first_step last_step hosts
  assert_output '1 0 "success" 1 10 ["h1","h2","h3","h4"]'
  run ev stop verdict exit
  assert_output '"done" 0'
  assert [ -s "$RUN/attempts/j1.1.log" ]
  run grep -c 'starting at step 0 (attempt 1)' "$RUN/attempts/j1.1.log"
  assert_output 4
  # The same job id again (a requeue): the attempt count continues, the first log stays.
  run bash "$BATS_TEST_TMPDIR/job.sh"
  assert_success
  run ev attempt attempt rc
  assert_output $'1 0\n2 0'
  assert [ -s "$RUN/attempts/j1.1.log" ]
  assert [ -s "$RUN/attempts/j1.2.log" ]
}

@test "a link planted at the next attempt's log is removed, never truncated or written through (issue 37)" {
  mkdir -p "$RUN/attempts"
  echo precious >"$BATS_TEST_TMPDIR/victim"
  ln -s "$BATS_TEST_TMPDIR/victim" "$RUN/attempts/j1.1.log"
  run bash "$(job <<<'')"
  assert_success
  assert_line "verdict: 0"
  run cat "$BATS_TEST_TMPDIR/victim"
  assert_output precious
  assert [ ! -L "$RUN/attempts/j1.1.log" ]
  assert [ -s "$RUN/attempts/j1.1.log" ]
}

@test "{hosts} {nhosts} {hostfile} are replaced and FAILOVER_* exported to each attempt" {
  f="$BATS_TEST_TMPDIR/echo.sh"
  cat >"$f" <<SH
set -euo pipefail
source '$AGPT_ROOT/lib/failover.sh'
export AGPT_RUN_DIR='$RUN' AGPT_DEADLINE_EPOCH=\$((EPOCHSECONDS + 100000))
FAILOVER_HOSTS_FROM='$ALLOC' FAILOVER_SPARES=2 FAILOVER_RESOLVE_TIMEOUT=0
failover_run bash -c 'echo "args=\$1,\$2,\$3 env=\$FAILOVER_HOSTS,\$FAILOVER_NUM_HOSTS,\$FAILOVER_ATTEMPT,\${AGPT_DEADLINE_EPOCH:+dl}"' x {hosts} {nhosts} {hostfile}
SH
  run bash "$f"
  assert_success
  assert_line "args=h1,h2,h3,h4,4,$RUN/hosts/active env=h1,h2,h3,h4,4,1,dl"
}

@test "a rank dies naming its host: exactly that host is swapped, training resumes and finishes" {
  run bash "$(job <<<'FAULTS=die@3:h2')"
  assert_success
  assert_line "verdict: 0"
  run ev attempt attempt class bad_hosts swapped
  assert_line --index 0 '1 "node" ["h2"] {"out":["h2"],"in":["h5"],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^2 "success" '
  run cat "$RUN/hosts/active"
  assert_output $'h1\nh5\nh3\nh4'
  run cut -f1,3,4 "$RUN/hosts/bad"
  assert_output --regexp $'^h2\tj1\t.*ECC'
  run ev attempt last_step
  assert_line --index 1 10
}

@test "a config bug: stuck (3) after two attempts without progress, spares untouched" {
  run bash "$(job <<<'FAULTS=app@1')"
  assert_failure 3
  assert_line "verdict: 3"
  run ev attempt attempt class swapped first_step
  assert_line --index 0 '1 "app" {"out":[],"in":[],"blind":false,"returned":[]} null'
  assert_line --index 1 '2 "app" {"out":[],"in":[],"blind":false,"returned":[]} null'
  assert_equal "${#lines[@]}" 2
  run ev stop verdict exit
  assert_output '"stuck" 3'
  run cat "$RUN/hosts/spare"
  assert_output $'h5\nh6'
  assert [ ! -e "$RUN/hosts/bad" ]
}

@test "a deterministic failure at step k: repeat (4) after FAILOVER_MAX_REPEAT attempts" {
  # rank 0 reports a non-finite loss at step 5 every time, after resuming from the checkpoint at step 4
  run bash "$(job <<<'FAULTS=nan@5')"
  assert_failure 4
  run ev attempt class last_step ckpt_step swapped
  assert_output "$(printf '"app" 5 4 {"out":[],"in":[],"blind":false,"returned":[]}\n%.0s' 1 2 3)"
  run ev stop verdict exit
  assert_output '"repeat" 4'
  run cat "$RUN/hosts/active"
  assert_output $'h1\nh2\nh3\nh4'
}

@test "the same failure with node memory ahead of the global checkpoint: saved before the stop for a person" {
  # the global checkpoint is step 4, node memory holds step 5 and every attempt fails at step 6
  run bash "$(job <<<'FAULTS=nan@6; export FAKE_TRAINER_LOCAL=1')"
  assert_failure 4
  run ev attempt last_step held action
  assert_output "$(printf '6 true "relaunch"\n6 true "relaunch"\n6 true "relaunch"\nnull true "stop"\n')"
  run ev stop verdict exit
  assert_output '"repeat" 4'
  run grep -c "save before a stop: step 5 saved globally" "$RUN/attempts/j1.4.log"
  assert_output 1
  assert [ -f "$RUN/ckpt/step-5/.complete" ]
}

@test "spares exhausted after progress: resubmit (75), every bad host recorded for the next job" {
  run bash "$(job <<<'FAULTS=die@3:h2,die@5:h5,die@7:h6
STEPS=12')"
  assert_failure 75
  run ev attempt attempt class bad_hosts action
  assert_output $'1 "node" ["h2"] "relaunch"\n2 "node" ["h5"] "relaunch"\n3 "node" ["h6"] "stop"'
  run ev stop verdict exit
  assert_output '"resubmit" 75'
  run cut -f1 "$RUN/hosts/bad"
  assert_output $'h2\nh5\nh6'
  # The next job in the chain never makes a proven-bad host active.
  printf 'h%s\n' 1 2 3 4 5 6 7 8 >"$ALLOC"
  run bash -c "source '$AGPT_ROOT/lib/failover.sh'; export AGPT_RUN_DIR='$RUN' FAILOVER_HOSTS_FROM='$ALLOC' \
    FAILOVER_SPARES=1 FAILOVER_RESOLVE_TIMEOUT=0 FAILOVER_JOBID=j2; failover_init && cat '$RUN/hosts/active' '$RUN/hosts/spare'"
  assert_success
  assert_output --partial $'h1\nh3\nh4\nh7\nh8'
  refute_output --regexp $'(^|\n)h[256]($|\n)'
}

@test "no spare left, FAILOVER_SHRINK: the loop goes on on 3 hosts to the end; below FAILOVER_MIN_NODES: 75 and why" {
  # What `agpt check --run-dir` writes at job start: 4 nodes of 1 rank, a global batch of 12 in micro batches of 1.
  layout='{"format": "agpt-layout/1", "nodes": 4, "ranks_per_node": 1, "tp": 1, "global_batch": 12, "micro_batch": 1}'
  mkdir -p "$RUN"
  printf '%s\n' "$layout" >"$RUN/layout.json"
  # Each rank says whether the trainer would split its batch unevenly (set on attempts on fewer hosts).
  f="$(job <<<'FAULTS=die@3:h2,die@5:h5,die@7:h6
STEPS=12 FAILOVER_MIN_NODES=3')"
  sed -i 's|python3 |bash -c '"'"'echo "uneven=${AGPT_TRAIN_UNEVEN_BATCH:-}"; exec "$@"'"'"' - python3 |' "$f"
  run bash "$f"
  assert_success
  assert_line "verdict: 0"
  run ev attempt attempt class action hosts
  assert_line --index 2 '3 "node" "relaunch" ["h1","h6","h3","h4"]'
  assert_line --index 3 '4 "success" "stop" ["h1","h3","h4"]'
  run ev shrink nodes_before nodes_after out throughput
  assert_output '4 3 ["h6"] 0.75'
  run grep -h 'uneven=' "$RUN"/attempts/j1.3.log "$RUN"/attempts/j1.4.log
  assert_output --regexp $'^(h[0-9]: uneven=\n){4}(h[0-9]: uneven=true\n?){3}$'
  # The same failures with a floor of all 4 nodes: handed over as without a shrink, the reason in the log.
  rm -rf "$RUN" && mkdir -p "$RUN" && printf '%s\n' "$layout" >"$RUN/layout.json"
  run bash "$(job <<<'FAULTS=die@3:h2,die@5:h5,die@7:h6
STEPS=12 FAILOVER_MIN_NODES=4')"
  assert_failure 75
  assert_output --partial "cannot shrink: 3 healthy node(s) < FAILOVER_MIN_NODES=4 (4 of 4)"
  run ev stop verdict exit
  assert_output '"resubmit" 75'
}

@test "deadline near: resubmit (75) without starting an attempt" {
  run bash "$(job <<<'export AGPT_DEADLINE_EPOCH=$((EPOCHSECONDS + 30)); FAILOVER_MIN_ATTEMPT_S=120')"
  assert_failure 75
  run ev stop verdict exit reason
  assert_output --regexp '^"resubmit" 75 ".*FAILOVER_MIN_ATTEMPT_S'
  run ev attempt
  assert_output ""
  run ls "$RUN/attempts"
  assert_output ""
}

@test "deadline near after a failure: resubmit (75) instead of a doomed relaunch" {
  # An application error backs off before its relaunch (a node swapped on evidence relaunches at once): 60 s of
  # backoff and a 200 s attempt do not fit in the 240 s left.
  run bash "$(job <<<'export AGPT_DEADLINE_EPOCH=$((EPOCHSECONDS + 240)); FAILOVER_MIN_ATTEMPT_S=200
FAILOVER_BACKOFF=60; FAULTS=app@3')"
  assert_failure 75
  run ev attempt attempt class action
  assert_output '1 "app" "stop"'
  run ev stop verdict reason
  assert_output --regexp '^"resubmit" ".*FAILOVER_MIN_ATTEMPT_S'
  assert [ ! -s "$RUN/hosts/bad" ]
}

@test "a silent hang: the watchdog fires, blind swaps reach the guilty host, recorded as blind" {
  # The last resort, when no evidence can be had: the health sweep off.
  run bash "$(job <<<'FAULTS=hang@3:h3; FAILOVER_IDLE_TIMEOUT=3 FAILOVER_STARTUP_TIMEOUT=6 FAILOVER_SWEEP=off')"
  assert_success
  run ev attempt class swapped
  assert_line --index 0 --regexp '^"hang" \{"out":\["h[1-4]"\],"in":\["h5"\],"blind":true'
  (( ${#lines[@]} <= 5 ))
  run ev stop verdict
  assert_output '"done"'
  run grep -P '^h3\t' "$RUN/hosts/bad"
  assert_output --regexp $'\tblind$'
  run grep -vP '\tblind$' "$RUN/hosts/bad"
  assert_output ""
}

# The health sweep through the fake launcher: fake_probe.sh answers for each host (PROBE_FAIL_HOSTS fail).
sweep_job() {
  job <<SH
export FAKE_LAUNCH_NAME_HOSTS=1 AGPT_SWEEP_PROGRAM='$AGPT_ROOT/tests/fixtures/fake_probe.sh'
export AGPT_PREFLIGHT_PROGRAM='$AGPT_ROOT/tests/fixtures/fake_collective.sh'
FAILOVER_SWEEP_LAUNCH='$AGPT_ROOT/tests/fixtures/fake_launch.sh' FAILOVER_SWEEP_TIMEOUT=10
$(cat)
SH
}

@test "a crash naming nobody: the sweep evicts the host whose probe fails, on its evidence, in one attempt" {
  run bash "$(sweep_job <<<'FAULTS=crash@3:h3:once; export PROBE_FAIL_HOSTS=h3')"
  assert_success
  run ev attempt class swapped
  assert_line --index 0 '"node" {"out":["h3"],"in":["h5"],"blind":false,"returned":[]}'
  assert_line --index 1 --regexp '^"success" '
  run cut -f1,4 "$RUN/hosts/bad"
  assert_output $'h3	sweep: h3: agpt-probe: h3 FAILED: /dev/shm /dev/shm: 3 MiB free, less than 1024 MiB'
  run grep -c . "$RUN/attempts/j1.1.sweep.log"
  assert_success
}

@test "the same crash with every host healthy: the sweep evicts nobody and the relaunch keeps the hosts" {
  run bash "$(sweep_job <<<'FAULTS=crash@3:h3:once')"
  assert_success
  run ev attempt class swapped hosts
  assert_line --index 0 '"crash" {"out":[],"in":[],"blind":false,"returned":[]} ["h1","h2","h3","h4"]'
  assert_line --index 1 '"success" {"out":[],"in":[],"blind":false,"returned":[]} ["h1","h2","h3","h4"]'
  assert [ ! -e "$RUN/hosts/bad" ]
  run ev attempt reason
  assert_line --index 0 --partial "the health sweep passed every host: no node to blame"
}

@test "a probe program that does not exist is one configuration error: blind rotation, said once" {
  run bash "$(sweep_job <<<'FAULTS=crash@3:h3:once; export AGPT_SWEEP_PROGRAM=/no/such/probe')"
  assert_success
  run ev attempt reason
  assert_line --index 0 --partial "(the health sweep could not run: configuration error: the probe: /no/such/probe: not found)"
  run grep -c "could not run" "$RUN/events.jsonl"
  assert_output 1
}

@test "cleanup hook runs on each host of the next attempt before the relaunch; preflight evicts a bad host" {
  run bash "$(job <<SH
FAILOVER_CLEANUP_HOOK='echo cleaned {host} >>"$BATS_TEST_TMPDIR/cleanup.log"'
FAILOVER_PREFLIGHT='[ {host} != h4 ] || { echo "no GPU on {host}"; exit 1; }'
FAULTS=die@3:h2
SH
)"
  assert_success
  run sort "$BATS_TEST_TMPDIR/cleanup.log"
  assert_output $'cleaned h1\ncleaned h3\ncleaned h5\ncleaned h6'
  run cut -f1,4 "$RUN/hosts/bad"
  assert_line --index 0 $'h4\tpreflight rc=1: no GPU on h4'
  assert_line --index 1 --regexp $'^h2\t'
  run ev attempt hosts
  assert_line --index 0 '["h1","h2","h3","h5"]'
  assert_line --index 1 '["h1","h6","h3","h5"]'
}

@test "a command that does not exist is nobody's host's fault: stuck (3), no swap" {
  f="$BATS_TEST_TMPDIR/missing.sh"
  cat >"$f" <<SH
set -euo pipefail
source '$AGPT_ROOT/lib/failover.sh'
export AGPT_RUN_DIR='$RUN'
FAILOVER_HOSTS_FROM='$ALLOC' FAILOVER_SPARES=2 FAILOVER_RESOLVE_TIMEOUT=0 FAILOVER_BACKOFF=0
rc=0
failover_run '$BATS_TEST_TMPDIR/no-such-trainer' --steps 3 || rc=\$?
exit "\$rc"
SH
  run bash "$f"
  assert_failure 3
  run ev attempt rc class swapped
  assert_output "$(printf '127 "app" {"out":[],"in":[],"blind":false,"returned":[]}\n%.0s' 1 2)"
  assert [ ! -e "$RUN/hosts/bad" ]
}

@test "a hostile allocation line is refused (2) naming the file and line; nothing in it runs" {
  printf 'h1\nh2;touch %s/pwned\n$(touch %s/pwned)\n' "$BATS_TEST_TMPDIR" "$BATS_TEST_TMPDIR" >"$ALLOC"
  run bash "$(job <<<'')"
  assert_failure 2
  assert_output --partial "$ALLOC:2: not a host name"
  assert [ ! -e "$BATS_TEST_TMPDIR/pwned" ]
}

@test "the cleanup hook gets {hosts} and {hostfile} shell-quoted: a planted host list runs nothing" {
  local run="$BATS_TEST_TMPDIR/a dir/run \$(touch $BATS_TEST_TMPDIR/pwned)"
  mkdir -p "$run/hosts"
  printf 'h1\nh2\n' >"$run/hosts/active"
  run bash -c "source '$AGPT_ROOT/lib/failover.sh'; AGPT_RUN_DIR='$run'
    FAILOVER_CLEANUP_HOOK='printf \"<%s>\\n\" {hosts} {nhosts} {hostfile}'; _failover_cleanup"
  assert_success
  assert_line "<h1,h2>"
  assert_line "<2>"
  assert_line "<$run/hosts/active>"
  assert [ ! -e "$BATS_TEST_TMPDIR/pwned" ]
  # A host list that is not host names (planted by hand) runs nothing: the hook is refused, the loop goes on.
  printf 'h1\n$(touch %s/pwned)\n' "$BATS_TEST_TMPDIR" >"$run/hosts/active"
  run bash -c "source '$AGPT_ROOT/lib/failover.sh'; AGPT_RUN_DIR='$run'
    FAILOVER_CLEANUP_HOOK='printf \"<%s>\\n\" {hosts}'; _failover_cleanup"
  assert_success
  assert_output --partial "not a host name"
  assert_output --partial "cleanup hook failed (rc 2); relaunching anyway"
  assert [ ! -e "$BATS_TEST_TMPDIR/pwned" ]
}

@test "failover_run works under a caller's IFS without a space; a near deadline still prints the report" {
  run bash "$(job <<<$'IFS=$\'\\n\\t\'')"
  assert_success
  assert_line "verdict: 0"
  run ev attempt attempt rc class
  assert_output '1 0 "success"'
  run bash "$(job <<<$'IFS=$\'\\n\\t\'\nexport AGPT_DEADLINE_EPOCH=$((EPOCHSECONDS + 30)); FAILOVER_MIN_ATTEMPT_S=120')"
  assert_failure 75
  assert_output --partial "not starting attempt 2: stop, resubmit (exit 75)"
  assert_output --partial "failover report: $RUN"
}
