# lib/chain.sh: one submission becomes a chain of jobs that runs until training is done.
# shellcheck shell=bash
#
# Source it after lib/sched.sh:
#   source "$AGPT_HOME/lib/sched.sh"; source "$AGPT_HOME/lib/chain.sh"
#   chain_start jobs/agpt_20b.pbs          # at job start: submit the successor (afterany on this job)
#   rc=0; failover_run ... || rc=$?        # or any command: its exit code is the verdict
#   chain_end "$rc"                         # done/stuck/repeat cancel the successor; resubmit keeps it
#
# Functions
#   chain_start SCRIPT     submit SCRIPT as this job's successor, under the run directory's lock
#   chain_end RC           record this job in chain.jsonl; cancel or keep the successor; exclude bad hosts
#   chain_eval_watch       (chain_start calls it) with CHAIN_EVAL_SCRIPT set, in the background: every
#                          CHAIN_EVAL_EVERY-th new complete checkpoint is held and CHAIN_EVAL_SCRIPT submitted
#   chain_eval_stop        (chain_end calls it) stop the watcher after one last look
#
# Files (in AGPT_RUN_DIR): chain.jsonl (one record per job), chain.lock (`SUCCESSOR SUBMITTER EPOCH`:
# the one pending successor; a lock whose successor is no longer queued is stale and is taken over),
# .chain.mutex/ (held for a moment around lock updates).
#
# Settings
#   AGPT_RUN_DIR            the run directory (required)
#   CHAIN_MAX_JOBS          jobs a chain may run, this one included (default 50)
#   CHAIN_MAX_NO_PROGRESS   stop after this many jobs in a row with no new complete checkpoint (default 2)
#   CHAIN_DISABLE           1: record nothing, submit nothing (default 0)
#   CHAIN_EVAL_SCRIPT       an evaluation job script (jobs/agpt_eval_*.{pbs,slurm}: `agpt eval --held`); "" (default): none
#   CHAIN_EVAL_EVERY        evaluate every N-th complete checkpoint (default 1)
#   CHAIN_EVAL_POLL_S       seconds between looks at the run's checkpoints (default 60)
#   CHAIN_LOG               a file messages are appended to (default "": standard error; not reopened as /dev/stderr, which
#                           would reopen a redirected batch log and write over the job's own output)
# Globals written: CHAIN_JOB_ID, CHAIN_NEXT_JOB_ID, CHAIN_STARTED, CHAIN_START_STEP, CHAIN_SCRIPT_PATH,
#   CHAIN_EVAL_PID
#
# Why a successor at the start and not at the end: a job killed at walltime never reaches its end, and the
# afterany dependency still releases the successor.

: "${CHAIN_MAX_JOBS:=50}"
: "${CHAIN_MAX_NO_PROGRESS:=2}"
: "${CHAIN_DISABLE:=0}"
: "${CHAIN_LOG:=}"
: "${CHAIN_EVAL_SCRIPT:=}"
: "${CHAIN_EVAL_EVERY:=1}"
: "${CHAIN_EVAL_POLL_S:=60}"
CHAIN_JOB_ID=""
CHAIN_NEXT_JOB_ID=""
CHAIN_STARTED=""
CHAIN_START_STEP=0
CHAIN_SCRIPT_PATH=""
CHAIN_EVAL_PID=""

_chain_say() {
  if [[ -n "$CHAIN_LOG" ]]; then
    printf 'chain: %s\n' "$*" >>"$CHAIN_LOG"
  else
    printf 'chain: %s\n' "$*" >&2
  fi
}

_chain_root="$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The stdlib-only decisions (python/agpt/chain.py), runnable without the training venv (bin/agpt-chain).
_chain_py() {
  "$_chain_root/bin/agpt-chain" "$@"
}

# A short-lived mutex around chain.lock (mkdir is atomic on NFS and Lustre); one older than 60 s belongs
# to a process that died holding it.
_chain_mutex() {
  local m="$AGPT_RUN_DIR/.chain.mutex" tries=0 age
  while ! mkdir "$m" 2>/dev/null; do
    age=$(($(date +%s) - $(stat -c %Y "$m" 2>/dev/null || date +%s)))
    if ((age > 60)); then
      _chain_say "removing a mutex left by a dead process ($m, ${age}s old)"
      rmdir "$m" 2>/dev/null || true
      continue
    fi
    tries=$((tries + 1))
    if ((tries > 150)); then
      _chain_say "could not take $m"
      return 1
    fi
    sleep 0.2
  done
}

_chain_unmutex() {
  rmdir "$AGPT_RUN_DIR/.chain.mutex" 2>/dev/null || true
}

# Usage: _chain_lock_write SUCCESSOR : chain.lock = `SUCCESSOR THIS_JOB EPOCH`, in one step (temporary + mv).
_chain_lock_write() {
  local tmp
  # A temporary name made exclusively (mktemp), so a link planted beside chain.lock is never written through.
  tmp="$(mktemp "$AGPT_RUN_DIR/.chain.lock.XXXXXX")" || return 1
  if chmod 0644 "$tmp" && printf '%s %s %s\n' "$1" "$CHAIN_JOB_ID" "$(date +%s)" >"$tmp" &&
    mv -f "$tmp" "$AGPT_RUN_DIR/chain.lock"; then
    return 0
  fi
  rm -f -- "$tmp"
  return 1
}

# Usage: _chain_lock_state (under the mutex) : what chain.lock means for this job, one line:
#   keep SUCC        this job submitted SUCC before a requeue, and SUCC is still queued: keep it
#   busy SUBMITTER   another job of this chain is running on the run directory: do not train twice
#   queued SUCC      a successor submitted by a job that has ended is queued: submit nothing
#   free [PRED]      no live successor: submit one (PRED: the job that submitted this one, from the lock)
_chain_lock_state() {
  local IFS=$' \t\n' succ="" submitter=""
  if [[ -f "$AGPT_RUN_DIR/chain.lock" ]]; then
    read -r succ submitter _ <"$AGPT_RUN_DIR/chain.lock" || true
  fi
  if [[ -n "$succ" && "$succ" != "$CHAIN_JOB_ID" ]]; then
    if sched_job_alive "$succ"; then
      if [[ "$submitter" == "$CHAIN_JOB_ID" ]]; then
        _chain_say "successor $succ (submitted by this job before a requeue) is still queued; keeping it"
        echo "keep $succ"
      elif [[ -n "$submitter" ]] && sched_job_alive "$submitter"; then
        _chain_say "job $submitter of this chain is running (successor $succ queued): not training twice in $AGPT_RUN_DIR"
        echo "busy $submitter"
      else
        _chain_say "successor $succ (submitted by $submitter) is already queued; not submitting another"
        echo "queued $succ"
      fi
      return 0
    fi
    _chain_say "stale lock: successor $succ (submitted by $submitter) is gone; taking the chain over"
  fi
  [[ "$succ" == "$CHAIN_JOB_ID" ]] || submitter=""
  echo "free $submitter"
}

# Usage: chain_start SCRIPT
# Globals read: AGPT_RUN_DIR, CHAIN_MAX_JOBS, CHAIN_DISABLE; written: CHAIN_JOB_ID, CHAIN_NEXT_JOB_ID,
#   CHAIN_STARTED, CHAIN_START_STEP
# Returns: 0 (a failed submission is logged: chain_end tries again); 1 when another job of this chain is
#   running on the same run directory (do not train twice); 2 on bad arguments
chain_start() {
  local IFS=$' \t\n' script="${1:-}" state="" who="" decision exclude next
  CHAIN_STARTED="$(date +%s)"
  CHAIN_NEXT_JOB_ID=""
  if [[ -z "${AGPT_RUN_DIR:-}" ]]; then
    _chain_say "AGPT_RUN_DIR is not set"
    return 2
  fi
  mkdir -p "$AGPT_RUN_DIR"
  CHAIN_START_STEP="$(_chain_py step "$AGPT_RUN_DIR")" || CHAIN_START_STEP=0
  CHAIN_JOB_ID="$(sched_job_id)"
  if [[ "$CHAIN_DISABLE" == 1 || -z "$CHAIN_JOB_ID" ]]; then
    if [[ -z "$CHAIN_JOB_ID" ]]; then
      _chain_say "not chaining (not in a batch job)"
    else
      _chain_say "not chaining (CHAIN_DISABLE=1)"
    fi
    return 0
  fi
  if [[ -z "$script" || ! -f "$script" ]]; then
    _chain_say "job script '${script}' not found: no successor will be submitted"
    return 2
  fi
  _chain_mutex || return 0
  read -r state who <<<"$(_chain_lock_state)" || true
  case "$state" in
    keep) CHAIN_NEXT_JOB_ID="$who" CHAIN_SCRIPT_PATH="$script" ;;
    busy) _chain_unmutex; return 1 ;;
  esac
  chain_eval_watch
  if [[ "$state" != free ]]; then
    _chain_unmutex
    return 0
  fi
  decision="$(_chain_py start "$AGPT_RUN_DIR" --job "$CHAIN_JOB_ID" --predecessor "$who" \
    --max-jobs "$CHAIN_MAX_JOBS")" || decision="submit"
  if [[ "$decision" != submit ]]; then
    _chain_say "this is the chain's last job (${decision#last })"
    rm -f "$AGPT_RUN_DIR/chain.lock"
    _chain_unmutex
    return 0
  fi
  exclude="$(_chain_py bad-hosts "$AGPT_RUN_DIR")" || exclude=""
  if next="$(sched_submit --after "$CHAIN_JOB_ID" --exclude "$exclude" "$script")"; then
    CHAIN_NEXT_JOB_ID="$next"
    _chain_lock_write "$next"
    _chain_say "successor $next submitted (afterany:$CHAIN_JOB_ID)"
  else
    _chain_say "could not submit the successor now; will retry at the end of this job"
  fi
  CHAIN_SCRIPT_PATH="$script"
  _chain_unmutex
  return 0
}

# Usage: chain_end RC
# RC: the failover verdict (docs/contract.md exit codes) or the job command's own exit code.
# Globals read: CHAIN_* from chain_start, AGPT_RUN_DIR, CHAIN_MAX_JOBS, CHAIN_MAX_NO_PROGRESS
# Returns: 0 once recorded; 1 when recording failed
chain_end() {
  local IFS=$' \t\n' rc="${1:?chain_end: exit code}" out decision verdict reason exclude next
  if [[ "$CHAIN_DISABLE" == 1 || -z "$CHAIN_JOB_ID" ]]; then
    return 0
  fi
  chain_eval_stop
  if ! out="$(_chain_py end "$AGPT_RUN_DIR" --job "$CHAIN_JOB_ID" --rc "$rc" --started "$CHAIN_STARTED" \
    --start-step "$CHAIN_START_STEP" --next "$CHAIN_NEXT_JOB_ID" --max-jobs "$CHAIN_MAX_JOBS" \
    --max-no-progress "$CHAIN_MAX_NO_PROGRESS")"; then
    _chain_say "could not record job $CHAIN_JOB_ID in $AGPT_RUN_DIR/chain.jsonl"
    return 1
  fi
  read -r decision verdict reason exclude <<<"$out"
  next="$CHAIN_NEXT_JOB_ID"
  if [[ "$decision" == stop ]]; then
    _chain_say "verdict $verdict (rc $rc): the chain stops${reason:+ ($reason)}"
    if [[ -n "$next" ]]; then
      sched_cancel "$next" || _chain_say "cancelling successor $next failed"
      _chain_say "successor $next cancelled"
    fi
    if _chain_mutex; then
      rm -f "$AGPT_RUN_DIR/chain.lock"
      _chain_unmutex
    fi
    return 0
  fi
  _chain_say "verdict $verdict (rc $rc): the chain goes on"
  if [[ -z "$next" && -n "${CHAIN_SCRIPT_PATH:-}" ]]; then
    # The submission at start failed: try once more while this job still exists for afterany.
    if next="$(sched_submit --after "$CHAIN_JOB_ID" "$CHAIN_SCRIPT_PATH")" && _chain_mutex; then
      _chain_lock_write "$next"
      _chain_unmutex
      _chain_say "successor $next submitted at the end of job $CHAIN_JOB_ID"
    fi
  fi
  if [[ -n "$next" && "$exclude" != - ]]; then
    _chain_say "keeping successor $next off hosts proven bad: $exclude"
    sched_exclude "$next" "$exclude" || _chain_say "could not exclude $exclude from $next"
  fi
  return 0
}

# One look: hold every CHAIN_EVAL_EVERY-th new complete checkpoint (python/agpt/evals/due.py); submit
# CHAIN_EVAL_SCRIPT when one was held.  Held checkpoints are never pruned, and the eval job evaluates every
# held one, so a failed submission is caught up by the next.
_chain_eval_poll() {
  local held
  held="$(_chain_py eval-mark "$AGPT_RUN_DIR" --every "$CHAIN_EVAL_EVERY")" || return 0
  [[ -n "$held" ]] || return 0
  if sched_submit "$CHAIN_EVAL_SCRIPT" >/dev/null; then
    _chain_say "checkpoint step(s) $held held for evaluation: submitted $CHAIN_EVAL_SCRIPT"
  else
    _chain_say "could not submit $CHAIN_EVAL_SCRIPT; step(s) $held stay held for the next evaluation job"
  fi
}

# Usage: chain_eval_watch
# Globals read: CHAIN_EVAL_SCRIPT, CHAIN_EVAL_EVERY, CHAIN_EVAL_POLL_S, AGPT_RUN_DIR; written: CHAIN_EVAL_PID
# Returns: 0 (nothing to do without CHAIN_EVAL_SCRIPT). Training never waits for it: it runs beside the job's
#   command, and the evaluation is its own small job.
chain_eval_watch() {
  [[ -n "$CHAIN_EVAL_SCRIPT" && -z "$CHAIN_EVAL_PID" ]] || return 0
  # A poll that `sleep` cannot take (nan, 0) would spin: checked first (failover_run refuses it, exit 2).
  if ! "$_chain_root/bin/agpt-failover" settings --eval-poll "$CHAIN_EVAL_POLL_S" >&2; then
    _chain_say "no evaluation watcher: CHAIN_EVAL_POLL_S is not a number of seconds (0.1 or more)"
    return 0
  fi
  (
    nap="" stop=0
    # In this background subshell only: a look under way finishes (what it held is submitted), then it ends.
    trap 'stop=1; [[ -z "$nap" ]] || kill "$nap" 2>/dev/null' TERM
    while ((stop == 0)); do
      _chain_eval_poll
      ((stop == 0)) || break
      sleep "$CHAIN_EVAL_POLL_S" &
      nap=$!
      wait "$nap" || true
      nap=""
    done
  ) &
  CHAIN_EVAL_PID=$!
  _chain_say "evaluating one checkpoint in $CHAIN_EVAL_EVERY with $CHAIN_EVAL_SCRIPT (watcher $CHAIN_EVAL_PID)"
}

# Usage: chain_eval_stop
# Globals read/written: CHAIN_EVAL_PID
# Returns: 0
chain_eval_stop() {
  [[ -n "$CHAIN_EVAL_PID" ]] || return 0
  kill "$CHAIN_EVAL_PID" 2>/dev/null || true
  wait "$CHAIN_EVAL_PID" 2>/dev/null || true
  CHAIN_EVAL_PID=""
  _chain_eval_poll
}
