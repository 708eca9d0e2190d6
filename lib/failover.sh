# shellcheck shell=bash
# lib/failover.sh: the NODE layer.  Keep a training run going on an allocation with spare hosts: run an attempt
# under the idle watchdog, classify its log, swap the host it names (or rotate a blind swap), relaunch.
#
# Source it into any job script (sets only FAILOVER_* defaults; runs nothing; changes no shell option):
#   source "$AGPT_HOME/lib/failover.sh"
#   export AGPT_RUN_DIR=/lus/proj/runs/20b            # the run directory (docs/contract.md), survives the chain
#   rc=0
#   failover_run srun --nodelist {hosts} -N {nhosts} --ntasks-per-node=1 python3 train.py || rc=$?
#   exit "$rc"                                       # 0 done, 1 failed, 3 stuck, 4 repeat, 75 resubmit
#
# Functions
#   failover_init             split the allocation into hosts/{all,active,spare}, resolve hosts/ip
#   failover_preflight        run FAILOVER_PREFLIGHT on every host (spares too), evict the failing ones
#   failover_run CMD...       attempts until a stop; returns the verdict's exit code
#
# Each attempt's environment: FAILOVER_HOSTFILE (RUN_DIR/hosts/active), FAILOVER_HOSTS (comma list),
# FAILOVER_NUM_HOSTS, FAILOVER_ATTEMPT (1, 2, ...), FAILOVER_JOBID, AGPT_RUN_DIR, AGPT_ATTEMPT_ID (JOBID.N: the
# heartbeats' attempt), FAILOVER_IDLE_TIMEOUT, AGPT_DEADLINE_EPOCH (when known), AGPT_CHECKPOINT_SAVE_AND_STOP=true
# (only a save before a stop for a person); and the
# words {hostfile} {hosts} {nhosts} in CMD are replaced.  The decisions live in `agpt failover plan` (Python,
# unit-tested), called once per attempt: it classifies the attempt's log in-process, swaps hosts, appends
# events.jsonl and answers `ACTION EXIT BACKOFF_S ATTEMPT [save]`; this file is the glue.  Files written:
# RUN_DIR/hosts/*, attempts/JOBID.N.log, .class.json and .times.json (when it ended), events.jsonl,
# metrics.prom (Prometheus text, rewritten after every attempt, so its counters move while no trainer runs);
# at every stop the run's timeline (`agpt failover report`) goes to the log.  Host names are only
# [A-Za-z0-9._-] (a hostile allocation line is refused, exit 2) and are shell-quoted where a hook's command
# text is built.  Works under any caller's IFS.
#
# Settings (environment, read when a function runs; defaults set when sourced)
#   FAILOVER_SPARES           spare hosts; default "": ~SITE_SPARES_PERCENT% of active, at least SITE_SPARES_MIN
#                             when that leaves 3/4 of the allocation active, never negative (unset SITE_SPARES_*:
#                             `agpt failover hosts init --help` prints the fallback, agpt.rundir.SPARES_*)
#   FAILOVER_ACTIVE           active hosts wanted; default "": all but the spares
#   FAILOVER_DEGRADE          1: run on fewer hosts than FAILOVER_ACTIVE instead of refusing (exit 2); default 0
#   FAILOVER_SHRINK           1: when named bad hosts outnumber the spares, relaunch on the healthy hosts left
#                             if the global batch is kept (agpt.failover.shrink, RUN_DIR/layout.json from `agpt
#                             check --run-dir`), attempts on fewer hosts get AGPT_TRAIN_UNEVEN_BATCH=true;
#                             0: hand over (75) as without it; default "": SITE_FAILOVER_SHRINK, else 1
#   FAILOVER_MIN_NODES        the least a shrunk job runs on, in nodes' worth of throughput: a count (3) or a
#                             fraction of the job's nodes (0.9, the default: a shrink that keeps less holds the
#                             allocation for too little work; docs/goodput.md)
#   FAILOVER_MAX_ATTEMPTS     attempts in a row with no step past the job's furthest (default 20)
#   FAILOVER_MAX_REPEAT       without a health sweep only: the same class at the same step this many times -> repeat, 4
#                             (default 3); with one, a person is called after the sweep and one reproduction
#   FAILOVER_MAX_BLIND        blind swaps a hang/crash rotation may try before it can be a repeat (default 8)
#   FAILOVER_MIN_ATTEMPT_S    never start an attempt with less time left than this (default 600) ...
#   FAILOVER_MIN_SAVE_S       ... but a save attempt, with at least this left (default 150), when node memory holds
#                             progress past the newest global checkpoint (the trainer saves it at its first step)
#   FAILOVER_BACKOFF          seconds before relaunch 1, 2, ... the last repeated (default "5 10 20 40 60")
#                             (these defaults are agpt.failover.policy.Settings'; a test keeps them equal)
#   FAILOVER_IDLE_TIMEOUT     `agpt watch --timeout`: seconds of silence that mean a hang (default 900)
#   FAILOVER_STARTUP_TIMEOUT  silence allowed before the first progress line (default 1800)
#   FAILOVER_GRACE            SIGTERM to SIGKILL when the watchdog fires (default 30)
#   FAILOVER_KILL_ON_EVIDENCE 1: end the attempt at once (`agpt watch --kill-on`, --evidence-grace 2 s, not
#                             the grace) on a launcher's node-failure or task-death line (the `ends` patterns)
#                             or a host the heartbeats show stopped; the grace stays for walltime and
#                             pre-emption saves; 0: wait for silence as before (default 1)
#   FAILOVER_WARM             warm ranks (agpt.warm, docs/recovery.md): the launcher words that run one task on
#                             every host, {hosts} {nhosts} {hostfile} being all the job's hosts (spares too), e.g.
#                             `srun --overlap --no-kill -N {nhosts} --nodelist {hosts} --ntasks-per-node=1`;
#                             `{warm}` in CMD, before the rank's command, becomes `agpt warm claim --`; empty: off,
#                             {warm} is dropped and every attempt starts interpreters as before (default "")
#   FAILOVER_PROGRESS_RE      a progress line (default '\bstep[=:] ?[0-9]+')
#   FAILOVER_PROGRESS_FILE    passed to `agpt watch --progress-file` when set (e.g. $AGPT_RUN_DIR/progress)
#   FAILOVER_PATTERN_SETS     classifier pattern sets, comma list (default: SITE_FAILOVER_PATTERNS, else all)
#   FAILOVER_CLEANUP_HOOK     run before each relaunch on the hosts about to be used (default none).  With
#                             {host}: once per host, in parallel (`ssh {host} site/x/hooks/cleanup.sh`,
#                             `srun -w {host} -N1 -n1 site/x/hooks/cleanup.sh`); else once, with {hosts},
#                             {nhosts}, {hostfile} replaced.  A failing hook is logged, not fatal.
#   FAILOVER_CLEANUP_TIMEOUT  seconds for the hook (default 60)
#   FAILOVER_PREFLIGHT        a short smoke command with {host}, run on every host (spares too) before the first
#                             attempt; a host where it fails is evicted and recorded in hosts/bad (default none)
#   FAILOVER_PREFLIGHT_TIMEOUT seconds per host (default 120)
#   FAILOVER_SWEEP            after an attempt whose log proves no host guilty: `full` probes every active host at
#                             once (agpt.probe) then bisects a cross-host collective, evicting the hosts that fail
#                             on that evidence; `probe` only the first half; `off` leaves the blind rotation
#                             (default: SITE_SWEEP, else full)
#   FAILOVER_SWEEP_TIMEOUT    seconds for the probe launch and for each collective round (default 120)
#   FAILOVER_SWEEP_CHECK      a site health command each probe runs on its host (default: SITE_SWEEP_CHECK)
#   FAILOVER_SWEEP_MAX_EVICT  more hosts failing at once is a site-wide fault: none evicted (default 8)
#   FAILOVER_SWEEP_MIN_FREE_MIB  memory, /dev/shm and SITE_LOCAL_DIR must have this much free (default 1024)
#   FAILOVER_SWEEP_LAUNCH     the launcher the sweep runs its programs with, shell words (default: agpt launch)
#                             (these four defaults are agpt.failover.sweep's; a test keeps them equal)
#   FAILOVER_HOSTS_FROM       a file with the allocation, one host per line (default: sched_hosts from
#                             lib/sched.sh when sourced, else PBS_NODEFILE / SLURM_JOB_NODELIST, else hostname)
#   FAILOVER_RESOLVE_TIMEOUT  seconds to resolve every host's addresses into hosts/ip (default 10)
#   FAILOVER_JOBID            names attempts/JOBID.N.log (default: the scheduler's job id, else local-EPOCH)
#   FAILOVER_LOG              a file for the loop's own messages (default "": standard error)
#
# Needs bash 4.4 (RHEL 8, SLES 15).  CMD is run by `agpt watch`, so it must be a program, not a shell function:
# `failover_run agpt launch agpt train ...` runs lib/launch.sh's launcher on hosts/active.
#
# Returns (failover_run): 0 done, 1 failed (or the loop itself broke), 2 bad input, 3 stuck, 4 repeat,
# 75 resubmit.  The function never runs `exit`: under `set -e` call it as `failover_run ... || rc=$?`.

: "${FAILOVER_SPARES:=}"
: "${FAILOVER_ACTIVE:=}"
: "${FAILOVER_DEGRADE:=0}"
: "${FAILOVER_SHRINK:=}"
: "${FAILOVER_MIN_NODES:=0.9}"
: "${FAILOVER_MAX_ATTEMPTS:=20}"
: "${FAILOVER_MAX_REPEAT:=3}"
: "${FAILOVER_MAX_BLIND:=8}"
: "${FAILOVER_MIN_ATTEMPT_S:=600}"
: "${FAILOVER_MIN_SAVE_S:=150}"
: "${FAILOVER_BACKOFF:=5 10 20 40 60}"
: "${FAILOVER_IDLE_TIMEOUT:=900}"
: "${FAILOVER_STARTUP_TIMEOUT:=1800}"
: "${FAILOVER_GRACE:=30}"
: "${FAILOVER_KILL_ON_EVIDENCE:=1}"
: "${FAILOVER_WARM:=}"
: "${FAILOVER_PROGRESS_RE:=\bstep[=:] ?[0-9]+}"
: "${FAILOVER_PROGRESS_FILE:=}"
: "${FAILOVER_PATTERN_SETS:=}"
: "${FAILOVER_CLEANUP_HOOK:=}"
: "${FAILOVER_CLEANUP_TIMEOUT:=60}"
: "${FAILOVER_PREFLIGHT:=}"
: "${FAILOVER_PREFLIGHT_TIMEOUT:=120}"
: "${FAILOVER_SWEEP:=}"
: "${FAILOVER_SWEEP_TIMEOUT:=120}"
: "${FAILOVER_SWEEP_CHECK:=}"
: "${FAILOVER_SWEEP_MAX_EVICT:=8}"
: "${FAILOVER_SWEEP_MIN_FREE_MIB:=1024}"
: "${FAILOVER_SWEEP_LAUNCH:=}"
: "${FAILOVER_HOSTS_FROM:=}"
: "${FAILOVER_RESOLVE_TIMEOUT:=10}"
: "${FAILOVER_JOBID:=}"
: "${FAILOVER_LOG:=}"

_failover_root="$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_failover_inited=""
_failover_attempt=""
_failover_save=""
_failover_rc=""
_failover_full=""
_failover_warm_pid=""

# Usage: _failover_logged CMD... : runs CMD with its standard error (and its output, with --all) in FAILOVER_LOG.
# Appending to /dev/stderr would reopen a redirected batch log and write over the job's own output.
_failover_logged() {
  local all=0
  [[ "$1" == --all ]] && { all=1; shift; }
  if [[ -z "$FAILOVER_LOG" ]]; then
    if ((all)); then "$@" >&2; else "$@"; fi
  elif ((all)); then
    "$@" >>"$FAILOVER_LOG" 2>&1
  else
    "$@" 2>>"$FAILOVER_LOG"
  fi
}

_failover_say() {
  _failover_logged --all printf 'failover: %s\n' "$*"
}

_failover_py() {
  _failover_logged "$_failover_root/bin/agpt-failover" "$@"
}

# Rewrites RUN_DIR/metrics.prom from the run directory (standard-library Python); a failure is only logged.
_failover_metrics() {
  _failover_logged "$_failover_root/bin/agpt" --run-module agpt.observe.prom "$AGPT_RUN_DIR" || true
}

# Sets FAILOVER_JOBID (names attempts/JOBID.N.log) once, when unset: the scheduler's job id, else local-EPOCH.
_failover_jobid() {
  if [[ -z "$FAILOVER_JOBID" ]]; then
    if declare -F sched_job_id >/dev/null; then
      FAILOVER_JOBID="$(sched_job_id)"
    else
      FAILOVER_JOBID="${SLURM_JOB_ID:-${PBS_JOBID:-}}"
    fi
    [[ -n "$FAILOVER_JOBID" ]] || FAILOVER_JOBID="local-$(date +%s)"
  fi
  FAILOVER_JOBID="${FAILOVER_JOBID//\//_}"
}

# Prints the epoch at which the job ends, or nothing when no one knows.
_failover_deadline() {
  if [[ -n "${AGPT_DEADLINE_EPOCH:-}" ]]; then
    printf '%s\n' "$AGPT_DEADLINE_EPOCH"
  elif declare -F sched_deadline >/dev/null; then
    sched_deadline 2>/dev/null || true
  fi
}

# Prints the allocation, one host per line.
_failover_allocation() {
  if [[ -n "$FAILOVER_HOSTS_FROM" ]]; then
    cat -- "$FAILOVER_HOSTS_FROM"
  elif declare -F sched_hosts >/dev/null; then
    sched_hosts
  elif [[ -n "${PBS_NODEFILE:-}" && -r "${PBS_NODEFILE:-}" ]]; then
    cat -- "$PBS_NODEFILE"
  elif [[ -n "${SLURM_JOB_NODELIST:-}" ]] && command -v scontrol >/dev/null; then
    scontrol show hostnames "$SLURM_JOB_NODELIST"
  else
    hostname
  fi
}

# Usage: _failover_subst OUTVAR WORD... : OUTVAR=(WORD... with {hostfile} {hosts} {nhosts} replaced, and {warm}
# by `agpt warm claim --` when FAILOVER_WARM is set, else dropped)
# (argument words, never command text: a hook's command text is built by `agpt failover hosts each`)
_failover_subst() {
  local hf="${_failover_hf:-$AGPT_RUN_DIR/hosts/active}" hosts n a
  local -n _failover_out="$1"
  shift
  hosts="$(paste -sd, "$hf")"
  n="$(grep -c . "$hf")" || n=0
  _failover_out=()
  for a in "$@"; do
    if [[ "$a" == "{warm}" ]]; then
      [[ -n "$_failover_warm_pid" ]] && _failover_out+=("$_failover_root/bin/agpt-warm" claim --)
      continue
    fi
    a="${a//"{hostfile}"/"$hf"}"
    a="${a//"{hosts}"/"$hosts"}"
    a="${a//"{nhosts}"/"$n"}"
    _failover_out+=("$a")
  done
}

# Usage: failover_init
# Splits the allocation into RUN_DIR/hosts/{all,active,spare}, resolves hosts/ip; hosts proven bad in hosts/bad
# (earlier jobs) are left out, blind suspects go last.  A line that is not a host name is refused (exit 2).
# Globals read: AGPT_RUN_DIR, FAILOVER_HOSTS_FROM, FAILOVER_SPARES, FAILOVER_ACTIVE, FAILOVER_DEGRADE,
#   SITE_SPARES_PERCENT, SITE_SPARES_MIN, FAILOVER_RESOLVE_TIMEOUT
# Returns: 0; 2 with the numbers when the allocation is too small (or AGPT_RUN_DIR is unset); 1 otherwise
failover_init() {
  local IFS=$' \t\n' rc=0 alloc src=- degrade=()
  if [[ -z "${AGPT_RUN_DIR:-}" ]]; then
    _failover_say "error: AGPT_RUN_DIR is not set (the run directory of docs/contract.md)"
    return 2
  fi
  mkdir -p "$AGPT_RUN_DIR/hosts" "$AGPT_RUN_DIR/attempts" || return 1
  _failover_jobid
  alloc="$(_failover_allocation)" || {
    _failover_say "error: cannot read the allocation (FAILOVER_HOSTS_FROM=${FAILOVER_HOSTS_FROM:-unset})"
    return 2
  }
  [[ "$FAILOVER_DEGRADE" == 1 ]] && degrade=(--degrade)
  # A named file goes by name, so a line it refuses is named as FILE:LINE.
  [[ -n "$FAILOVER_HOSTS_FROM" ]] && src="$FAILOVER_HOSTS_FROM"
  printf '%s\n' "$alloc" | _failover_py hosts init --run-dir "$AGPT_RUN_DIR" --hostfile "$src" \
    --spares "$FAILOVER_SPARES" --active "$FAILOVER_ACTIVE" "${degrade[@]}" \
    --spares-percent "${SITE_SPARES_PERCENT:-}" --spares-min "${SITE_SPARES_MIN:-}" \
    --resolve-timeout "$FAILOVER_RESOLVE_TIMEOUT" >/dev/null || rc=$?
  ((rc == 0)) && _failover_inited="$FAILOVER_JOBID"
  return "$rc"
}

# Usage: failover_preflight
# Runs FAILOVER_PREFLIGHT (with {host}) on every active and spare host at once; a failing active host is
# swapped for a healthy spare, a failing spare dropped, each recorded in hosts/bad.  No-op when unset.
# Globals read: AGPT_RUN_DIR, FAILOVER_PREFLIGHT, FAILOVER_PREFLIGHT_TIMEOUT
# Returns: 0; 2 when too few healthy hosts remain; 1 when it could not run
failover_preflight() {
  [[ -n "$FAILOVER_PREFLIGHT" ]] || return 0
  local jobid
  _failover_jobid
  jobid="$FAILOVER_JOBID"
  _failover_say "preflight on $(cat "$AGPT_RUN_DIR/hosts/active" "$AGPT_RUN_DIR/hosts/spare" | grep -c .) host(s)"
  _failover_py hosts preflight --run-dir "$AGPT_RUN_DIR" --cmd "$FAILOVER_PREFLIGHT" \
    --timeout "$FAILOVER_PREFLIGHT_TIMEOUT" --jobid "$jobid" \
    --log "$AGPT_RUN_DIR/attempts/$jobid.preflight.log" >/dev/null
}

# Runs FAILOVER_CLEANUP_HOOK on the hosts of the next attempt (`agpt failover hosts each`: the hosts and paths it
# puts in the command are shell-quoted, and a timeout ends the hook's whole process group); never fails the loop.
_failover_cleanup() {
  [[ -n "$FAILOVER_CLEANUP_HOOK" ]] || return 0
  local rc=0
  _failover_logged --all env FAILOVER_HOSTFILE="$AGPT_RUN_DIR/hosts/active" "$_failover_root/bin/agpt-failover" \
    hosts each --run-dir "$AGPT_RUN_DIR" --cmd "$FAILOVER_CLEANUP_HOOK" --timeout "$FAILOVER_CLEANUP_TIMEOUT" || rc=$?
  ((rc == 0)) || _failover_say "cleanup hook failed (rc $rc); relaunching anyway"
  return 0
}

# Usage: _failover_act "ACTION EXIT BACKOFF_S ATTEMPT [save]" PLAN_RC WHEN
# Acts on `agpt failover plan --shell`'s words: relaunch -> sleeps the backoff, runs the cleanup hook (not before
# the first attempt), sets _failover_attempt and _failover_save (save: a save before a stop, the trainer only
# saves node memory's state), returns 0; stop -> sets _failover_rc, returns 1.  No decision (plan failed): says
# so, prints the report, _failover_rc 2 (bad input) or 1.
_failover_act() {
  local action code backoff attempt mode
  IFS=' ' read -r action code backoff attempt mode <<<"$1" || true
  case "${action:-}" in
    relaunch)
      _failover_attempt="$attempt"
      _failover_save="${mode:-}"
      if [[ "$3" != before* ]]; then
        sleep "$backoff"
        _failover_cleanup
      fi
      return 0
      ;;
    stop) _failover_rc="$code" ;;
    *)
      _failover_say "error: 'agpt failover plan' gave no decision $3 (rc $2)"
      _failover_logged --all "$_failover_root/bin/agpt-failover" report "$AGPT_RUN_DIR" || true
      _failover_rc=1
      [[ "$2" == 2 ]] && _failover_rc=2
      ;;
  esac
  return 1
}

# Usage: _failover_setup OUTVAR_PLAN OUTVAR_WATCH OUTVAR_CLASSIFY DEADLINE
# The fixed arguments of every `plan` call, of `agpt watch`, and the classifier's options (after `--`).
_failover_setup() {
  local -n _failover_p="$1" _failover_w="$2" _failover_c="$3"
  _failover_p=(plan --run-dir "$AGPT_RUN_DIR" --jobid "$FAILOVER_JOBID" --deadline "$4" --apply --shell --report
    --max-attempts "$FAILOVER_MAX_ATTEMPTS" --max-repeat "$FAILOVER_MAX_REPEAT" --max-blind "$FAILOVER_MAX_BLIND"
    --min-attempt-s "$FAILOVER_MIN_ATTEMPT_S" --min-save-s "$FAILOVER_MIN_SAVE_S" --backoff "$FAILOVER_BACKOFF"
    --progress-re "$FAILOVER_PROGRESS_RE"
    --shrink "${FAILOVER_SHRINK:-${SITE_FAILOVER_SHRINK:-}}" --min-nodes "$FAILOVER_MIN_NODES")
  _failover_sweep_args _failover_p
  _failover_w=("$_failover_root/bin/agpt-watch" --timeout "$FAILOVER_IDLE_TIMEOUT"
    --startup-timeout "$FAILOVER_STARTUP_TIMEOUT" --grace "$FAILOVER_GRACE" --progress-re "$FAILOVER_PROGRESS_RE")
  [[ -n "$FAILOVER_PROGRESS_FILE" ]] && _failover_w+=(--progress-file "$FAILOVER_PROGRESS_FILE")
  _failover_c=(--heartbeat-dir "$AGPT_RUN_DIR/heartbeat")  # names a hung host from the ranks' heartbeats
  if [[ -n "$FAILOVER_PATTERN_SETS" ]]; then
    _failover_c+=(--patterns "$FAILOVER_PATTERN_SETS")
  elif declare -p SITE_FAILOVER_PATTERNS >/dev/null 2>&1; then
    _failover_c+=(--patterns "$(IFS=,; printf '%s' "${SITE_FAILOVER_PATTERNS[*]}")")
  fi
}

# Usage: _failover_warm_start DEADLINE CMD... : unless ranks run in an image (then it says so and starts nothing),
# with FAILOVER_WARM (launcher words for one task on each host, with
# {hosts} {nhosts} {hostfile} of hosts/all: spares too), starts `agpt warm serve -- RANKCMD` on every host in the
# background for the whole job (RANKCMD: the words after {warm} in CMD), its output in attempts/JOBID.warm.log.
# Without {warm} in CMD it says so and starts nothing.  Globals written: _failover_warm_pid
_failover_warm_start() {
  _failover_warm_pid=""
  [[ -n "$FAILOVER_WARM" ]] || return 0
  local deadline="$1" a seen=0 _failover_hf="$AGPT_RUN_DIR/hosts/all"
  shift
  local -a rank=() words=() launch=() envs=()
  for a in "$@"; do
    ((seen)) && rank+=("$a")
    [[ "$a" == "{warm}" ]] && seen=1
  done
  if ((!seen || ${#rank[@]} == 0)); then
    _failover_say "FAILOVER_WARM is set but the command has no {warm} before the rank's command: no warm ranks"
    return 0
  fi
  local runtime="${LAUNCH_CONTAINER_RUNTIME:-${SITE_CONTAINER:-none}}"
  if [[ -n "${AGPT_CONTAINER_IMAGE:-}" && "$runtime" != none ]]; then
    _failover_say "warm ranks off: ranks run in an image (SITE_CONTAINER=$runtime) and parked processes would run on the host"
    return 0
  fi
  IFS=' ' read -r -a words <<<"$FAILOVER_WARM"
  _failover_subst launch "${words[@]}"
  _failover_env envs 0 "$deadline"
  _failover_say "warm ranks: $(grep -c . "$_failover_hf") host(s): ${launch[*]} agpt warm serve -- ${rank[*]}"
  local wlog="$AGPT_RUN_DIR/attempts/$FAILOVER_JOBID.warm.log"
  # Removed, then made anew exclusively (noclobber, in the subshell only): never written through a planted link.
  rm -f -- "$wlog"
  (
    set -o noclobber
    exec env "${envs[@]}" "${launch[@]}" "$_failover_root/bin/agpt-warm" serve -- "${rank[@]}" >"$wlog" 2>&1
  ) &
  _failover_warm_pid=$!
}

# Ends the warm ranks' launcher (its parked processes with it) when the loop stops.
_failover_warm_stop() {
  [[ -n "${_failover_warm_pid:-}" ]] || return 0
  kill -TERM "$_failover_warm_pid" 2>/dev/null || true
  wait "$_failover_warm_pid" 2>/dev/null || true
  _failover_warm_pid=""
}

# Usage: _failover_ends OUTVAR_WATCH : kill on evidence (FAILOVER_KILL_ON_EVIDENCE=1): writes the pattern sets'
# `ends` patterns to attempts/JOBID.ends.json once, before the first attempt, and appends `--kill-on FILE
# --heartbeat-dir DIR` to the watch's arguments; a failure is said and the attempt waits for silence as before.
_failover_ends() {
  [[ "$FAILOVER_KILL_ON_EVIDENCE" == 1 ]] || return 0
  local -n _failover_x="$1"
  local ends="$AGPT_RUN_DIR/attempts/$FAILOVER_JOBID.ends.json" sets=() tmp=""
  [[ -n "$FAILOVER_PATTERN_SETS" ]] && sets=(--sets "$FAILOVER_PATTERN_SETS")
  if declare -p SITE_FAILOVER_PATTERNS >/dev/null 2>&1 && [[ -z "$FAILOVER_PATTERN_SETS" ]]; then
    sets=(--sets "$(IFS=,; printf '%s' "${SITE_FAILOVER_PATTERNS[*]}")")
  fi
  # A temporary name made exclusively (mktemp), then mv: a link planted at the file's name is replaced, never
  # written through.
  if tmp="$(mktemp "$ends.XXXXXX")" && chmod 0644 "$tmp" && _failover_py patterns --ends "${sets[@]}" >"$tmp" &&
    mv -f -- "$tmp" "$ends"; then
    _failover_x+=(--kill-on "$ends" --heartbeat-dir "$AGPT_RUN_DIR/heartbeat" --detach-teardown)
  else
    [[ -z "$tmp" ]] || rm -f -- "$tmp"
    _failover_say "cannot list the patterns that end an attempt; waiting for silence instead"
  fi
}

# Usage: _failover_sweep_args OUTVAR : appends the health sweep's settings (FAILOVER_SWEEP*, else the site keys
# SITE_SWEEP, SITE_SWEEP_CHECK, SITE_SWEEP_MOUNTS, SITE_LOCAL_DIR, SITE_GPUS_PER_NODE) to the array OUTVAR.
_failover_sweep_args() {
  local -n _failover_s="$1"
  local mounts=""
  if declare -p SITE_SWEEP_MOUNTS >/dev/null 2>&1; then
    mounts="$(IFS=:; printf '%s' "${SITE_SWEEP_MOUNTS[*]}")"
  fi
  _failover_s+=(--sweep "${FAILOVER_SWEEP:-${SITE_SWEEP:-}}" --sweep-timeout "$FAILOVER_SWEEP_TIMEOUT"
    --sweep-check "${FAILOVER_SWEEP_CHECK:-${SITE_SWEEP_CHECK:-}}" --sweep-max-evict "$FAILOVER_SWEEP_MAX_EVICT"
    --sweep-min-free-mib "$FAILOVER_SWEEP_MIN_FREE_MIB" --sweep-mounts "$mounts"
    --sweep-local-dir "${SITE_LOCAL_DIR:-}" --sweep-gpus "${SITE_GPUS_PER_NODE:-}" --sweep-launch "$FAILOVER_SWEEP_LAUNCH")
}

# Usage: _failover_env OUTVAR ATTEMPT DEADLINE : OUTVAR=(NAME=VALUE... of the attempt's environment)
_failover_env() {
  local -n _failover_e="$1"
  local hf="$AGPT_RUN_DIR/hosts/active" n
  n="$(grep -c . "$hf")" || n=0
  _failover_e=(FAILOVER_HOSTFILE="$hf" FAILOVER_HOSTS="$(paste -sd, "$hf")" FAILOVER_NUM_HOSTS="$n"
    FAILOVER_ATTEMPT="$2" AGPT_RUN_DIR="$AGPT_RUN_DIR" FAILOVER_JOBID="$FAILOVER_JOBID"
    AGPT_ATTEMPT_ID="$FAILOVER_JOBID.$2" FAILOVER_IDLE_TIMEOUT="$FAILOVER_IDLE_TIMEOUT")
  [[ -n "$3" ]] && _failover_e+=(AGPT_DEADLINE_EPOCH="$3")
  # A save before a stop for a person: the trainer restores node memory, saves it globally, exits 75.
  [[ "${_failover_save:-}" == save ]] && _failover_e+=(AGPT_CHECKPOINT_SAVE_AND_STOP=true)
  # Fewer hosts than the job started with (a shrink): the trainer splits a batch they do not divide unevenly.
  ((n >= ${_failover_full:-0})) || _failover_e+=(AGPT_TRAIN_UNEVEN_BATCH=true)
  return 0
}

# Every number the loop hands on, checked once before anything starts (agpt.numeric, the one validator): a bad
# one is exit 2 naming it, never an attempt that fails on it.  Returns: 0; 2 on a bad value.
_failover_check_settings() {
  _failover_logged "$_failover_root/bin/agpt" --run-module agpt.numeric \
    "seconds:FAILOVER_IDLE_TIMEOUT=$FAILOVER_IDLE_TIMEOUT" "seconds:FAILOVER_STARTUP_TIMEOUT=$FAILOVER_STARTUP_TIMEOUT" \
    "seconds:FAILOVER_GRACE=$FAILOVER_GRACE" "seconds:FAILOVER_MIN_ATTEMPT_S=$FAILOVER_MIN_ATTEMPT_S" \
    "seconds:FAILOVER_MIN_SAVE_S=$FAILOVER_MIN_SAVE_S" \
    "seconds:FAILOVER_CLEANUP_TIMEOUT=$FAILOVER_CLEANUP_TIMEOUT" \
    "seconds:FAILOVER_PREFLIGHT_TIMEOUT=$FAILOVER_PREFLIGHT_TIMEOUT" \
    "seconds:FAILOVER_RESOLVE_TIMEOUT=$FAILOVER_RESOLVE_TIMEOUT" "count:FAILOVER_MAX_ATTEMPTS=$FAILOVER_MAX_ATTEMPTS" \
    "count:FAILOVER_MAX_REPEAT=$FAILOVER_MAX_REPEAT" "count:FAILOVER_MAX_BLIND=$FAILOVER_MAX_BLIND" \
    "count:FAILOVER_SPARES=$FAILOVER_SPARES" "count:FAILOVER_ACTIVE=$FAILOVER_ACTIVE" \
    "epoch:AGPT_DEADLINE_EPOCH=${AGPT_DEADLINE_EPOCH:-}" || return 2
  # ... and every other setting read late (after the first failure, or by the trainer and the eval watcher), by
  # the parsers that read it then (`agpt failover settings`): a bad one is exit 2 before the first attempt.
  local -a s=(settings --walltime-margin "${FAILOVER_WALLTIME_MARGIN:-}" --straggler "${FAILOVER_STRAGGLER:-}"
    --min-nodes "$FAILOVER_MIN_NODES" --eval-poll "${CHAIN_EVAL_POLL_S:-}" --sweep-program "${AGPT_SWEEP_PROGRAM:-}")
  _failover_sweep_args s
  _failover_py "${s[@]}" || return 2
}

# Usage: failover_run CMD [ARGS...]
# Runs CMD under `agpt watch` until a stop (see the header for the environment and the {words} it gets).
# Globals read: AGPT_RUN_DIR, AGPT_DEADLINE_EPOCH, FAILOVER_* (see the header)
# Globals written: FAILOVER_JOBID (when unset: chosen once)
# Returns: the verdict's exit code: 0 done, 1 failed, 2 bad input, 3 stuck, 4 repeat, 75 resubmit
failover_run() {
  if (($# == 0)); then
    _failover_say "usage: failover_run CMD [ARGS...]"
    return 2
  elif [[ -z "${AGPT_RUN_DIR:-}" ]]; then
    _failover_say "error: AGPT_RUN_DIR is not set (the run directory of docs/contract.md)"
    return 2
  fi
  local IFS=$' \t\n' deadline rc prc n log started ended decision # the caller's IFS may lack the space
  local -a argv plan watch cls envs
  _failover_check_settings || return 2
  _failover_jobid
  if [[ "$_failover_inited" != "$FAILOVER_JOBID" || ! -s "$AGPT_RUN_DIR/hosts/active" ]]; then
    rc=0
    failover_init || rc=$?
    ((rc == 0)) || return "$rc"
  fi
  rc=0
  failover_preflight || rc=$?
  ((rc == 0)) || return "$rc"
  deadline="$(_failover_deadline)"
  _failover_full="$(grep -c . "$AGPT_RUN_DIR/hosts/active")" || _failover_full=0
  _failover_setup plan watch cls "$deadline"
  # Once, before the first attempt: its number (a requeued job id continues its count) and whether it may start.
  prc=0
  decision="$(_failover_py "${plan[@]}" --before)" || prc=$?
  _failover_metrics
  _failover_act "$decision" "$prc" "before the first attempt" || return "$_failover_rc"
  _failover_ends watch
  _failover_warm_start "$deadline" "$@"
  rc=0
  _failover_attempts "$@" || rc=$?
  _failover_warm_stop
  return "$rc"
}

# Usage: _failover_attempts CMD... : failover_run's loop (its locals: plan watch cls deadline), until a stop.
# Returns: the verdict's exit code
_failover_attempts() {
  local n="$_failover_attempt" log started ended rc prc decision
  local -a argv envs
  while :; do
    _failover_subst argv "$@"
    _failover_env envs "$n" "$deadline"
    log="$AGPT_RUN_DIR/attempts/$FAILOVER_JOBID.$n.log"
    _failover_say "attempt $n on ${envs[2]#*=} host(s) (${envs[1]#*=}): ${argv[*]}"
    # A link planted at the log's name is removed, never truncated through, and the log is made exclusively
    # (noclobber, in a subshell: the caller's options are untouched), so one planted after the rm fails (docs/trust.md).
    rm -f -- "$log"
    (set -o noclobber && : >"$log")
    started="$(date +%s.%N)"
    rc=0
    env "${envs[@]}" "${watch[@]}" --log "$log" --times "${log%.log}.times.json" -- "${argv[@]}" || rc=$?
    ended="$(date +%s.%N)"
    prc=0
    decision="$(_failover_py "${plan[@]}" --attempt "$n" --rc "$rc" --log "$log" --started "$started" \
      --ended "$ended" -- "${cls[@]}")" || prc=$?
    _failover_metrics
    _failover_act "$decision" "$prc" "after attempt $n" || return "$_failover_rc"
    n=$((n + 1))
  done
}
