# lib/sched.sh: the batch scheduler (PBS Professional, Slurm, or none) behind one small API.
# shellcheck shell=bash
#
# Source it:  source "$AGPT_HOME/lib/sched.sh"   (sets nothing, runs nothing; no caller option changes)
#
# Functions
#   sched_detect                       print pbs|slurm|none
#   sched_job_id                       print this job's id ("" outside a job)
#   sched_hosts                        print the allocation's hosts, one a line, de-duplicated, in order
#   sched_expand_nodelist LIST         print a Slurm nodelist (nid[001232-001235,001240]) one host a line
#                                      (the same hosts as agpt.hostlist: tests/python/test_hostlist.py)
#   sched_walltime_seconds SPEC        print seconds of [D+|D-]HH:MM:SS, MM:SS or SS
#   sched_deadline                     print the epoch at which the scheduler ends this job
#   sched_export_deadline              export AGPT_DEADLINE_EPOCH (kept when already set)
#   sched_submit [--after ID] [--exclude H1,H2] SCRIPT [ARGS...]   submit; print the new job id
#   sched_cancel ID                    cancel a job
#   sched_exclude ID H1,H2             keep a pending job off hosts (Slurm; PBS logs that it cannot)
#   sched_job_alive ID                 return 0 while a job is queued, held or running
#
# Settings
#   SCHED_KIND      pbs|slurm|none; default: from the environment (PBS_JOBID, SLURM_JOB_ID), then from the
#                   commands on PATH (sbatch, qsub). A generated job script sets it.
#   SCHED_LOG       a file messages are appended to (default "": standard error; not reopened as /dev/stderr, which
#                   would reopen a redirected batch log and write over the job's own output)
#
# Why Bash: a job script runs these before any Python environment exists, and a sysadmin reads them.

: "${SCHED_KIND:=}"
: "${SCHED_LOG:=}"

_sched_say() {
  if [[ -n "$SCHED_LOG" ]]; then
    printf 'sched: %s\n' "$*" >>"$SCHED_LOG"
  else
    printf 'sched: %s\n' "$*" >&2
  fi
}

# Usage: sched_detect
# Globals read: SCHED_KIND, PBS_JOBID, SLURM_JOB_ID
# Returns: 0; prints pbs, slurm or none
sched_detect() {
  if [[ -n "$SCHED_KIND" ]]; then
    printf '%s\n' "$SCHED_KIND"
  elif [[ -n "${PBS_JOBID:-}" ]]; then
    echo pbs
  elif [[ -n "${SLURM_JOB_ID:-}" ]]; then
    echo slurm
  elif command -v sbatch >/dev/null 2>&1; then
    echo slurm
  elif command -v qsub >/dev/null 2>&1; then
    echo pbs
  else
    echo none
  fi
}

# Usage: sched_job_id
# Globals read: PBS_JOBID, SLURM_JOB_ID
# Returns: 0; prints the job id, or nothing outside a job
sched_job_id() {
  printf '%s\n' "${PBS_JOBID:-${SLURM_JOB_ID:-}}"
}

# Usage: sched_expand_nodelist LIST
# Expands Slurm's compressed host lists in pure Bash (no scontrol on the compute node needed):
# `nid[001232-001235,001240]`, `n[1-3],m5`, `x1000c0s[0-1]b0n0`, several bracket groups, zero padding.
# Returns: 0; 2 on an unbalanced bracket
sched_expand_nodelist() {
  local list="$1"
  local -a items=()
  local cur="" depth=0 ch i
  for ((i = 0; i < ${#list}; i++)); do
    ch="${list:i:1}"
    case "$ch" in
      '[') depth=$((depth + 1)); cur+="$ch" ;;
      ']') depth=$((depth - 1)); cur+="$ch" ;;
      ',' | ' ' | $'\n' | $'\t')
        if ((depth > 0)); then cur+="$ch"; else [[ -n "$cur" ]] && items+=("$cur"); cur=""; fi ;;
      *) cur+="$ch" ;;
    esac
  done
  [[ -n "$cur" ]] && items+=("$cur")
  if ((depth != 0)); then
    _sched_say "unbalanced brackets in nodelist '$list'"
    return 2
  fi
  local item head rest inner tail r a b w n num
  local -a queue parts
  local q
  for item in "${items[@]}"; do
    # Breadth-first over one item's bracket groups keeps Slurm's order.
    queue=("$item")
    q=0
    while ((q < ${#queue[@]})); do
      item="${queue[q]}"
      q=$((q + 1))
      if [[ "$item" != *'['* ]]; then
        printf '%s\n' "$item"
        continue
      fi
      head="${item%%\[*}"
      rest="${item#*\[}"
      inner="${rest%%\]*}"
      tail="${rest#*\]}"
      IFS=, read -r -a parts <<<"$inner"
      for r in "${parts[@]}"; do
        if [[ "$r" =~ ^([0-9]+)-([0-9]+)$ ]]; then
          a="${BASH_REMATCH[1]}"
          b="${BASH_REMATCH[2]}"
          w=${#a}
          for ((n = 10#$a; n <= 10#$b; n++)); do
            printf -v num '%0*d' "$w" "$n"
            queue+=("$head$num$tail")
          done
        else
          queue+=("$head$r$tail")
        fi
      done
    done
  done
}

# Usage: sched_hosts
# Globals read: PBS_NODEFILE, SLURM_JOB_NODELIST (or SLURM_NODELIST)
# Returns: 0; prints the hosts one a line, first occurrence order, duplicates (one line per rank) removed;
#          outside a job prints this host's name
sched_hosts() {
  local -A seen=()
  local h
  {
    if [[ -n "${PBS_NODEFILE:-}" && -r "${PBS_NODEFILE:-}" ]]; then
      cat "$PBS_NODEFILE"
    elif [[ -n "${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}" ]]; then
      sched_expand_nodelist "${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}"
    else
      hostname
    fi
  } | {
    while IFS= read -r h || [[ -n "$h" ]]; do
      h="${h%%[[:space:]]*}"
      [[ -z "$h" || -n "${seen[$h]:-}" ]] && continue
      seen[$h]=1
      printf '%s\n' "$h"
    done
  }
}

# Usage: sched_walltime_seconds SPEC
# SPEC: HH:MM:SS (hours may pass 24), D+HH:MM:SS or D-HH:MM:SS, MM:SS, or SS.  Each field has at most 6 digits
# (a million hours is 114 years), so the arithmetic below never overflows into a negative number.
# Returns: 0 and prints seconds; 2 when SPEC does not parse
sched_walltime_seconds() {
  local spec="$1" days=0 rest h=0 m=0 s=0
  rest="$spec"
  if [[ "$spec" =~ [0-9]{7} ]]; then
    _sched_say "walltime '$spec' is out of range (a field of more than 6 digits)"
    return 2
  fi
  if [[ "$rest" =~ ^([0-9]+)[-+](.*)$ ]]; then
    days="${BASH_REMATCH[1]}"
    rest="${BASH_REMATCH[2]}"
  fi
  if [[ "$rest" =~ ^([0-9]+):([0-9]{1,2}):([0-9]{1,2})$ ]]; then
    h="${BASH_REMATCH[1]}" m="${BASH_REMATCH[2]}" s="${BASH_REMATCH[3]}"
  elif [[ "$rest" =~ ^([0-9]+):([0-9]{1,2})$ ]]; then
    m="${BASH_REMATCH[1]}" s="${BASH_REMATCH[2]}"
  elif [[ "$rest" =~ ^[0-9]+$ && "$days" == 0 ]]; then
    s="$rest"
  else
    _sched_say "walltime '$spec' does not parse (want HH:MM:SS or D+HH:MM:SS)"
    return 2
  fi
  echo $(((10#$days) * 86400 + (10#$h) * 3600 + (10#$m) * 60 + 10#$s))
}

# Usage: sched_deadline
# PBS: `qstat -f JOBID`'s stime + Resource_List.walltime.  Slurm: SLURM_JOB_END_TIME, else `squeue -o %e`.
# Globals read: SCHED_KIND, PBS_JOBID, SLURM_JOB_ID, SLURM_JOB_END_TIME
# Returns: 0 and prints the epoch; 1 when the scheduler does not say (no job, unlimited)
sched_deadline() {
  local kind id out stime="" wall="" line secs start end
  kind="$(sched_detect)"
  id="$(sched_job_id)"
  if [[ "$kind" == pbs && -n "${PBS_JOBID:-}" ]] && out="$(qstat -f "$PBS_JOBID" 2>/dev/null)"; then
    while IFS= read -r line; do
      line="${line#"${line%%[![:space:]]*}"}"
      case "$line" in
        "stime = "*) stime="${line#stime = }" ;;
        "Resource_List.walltime = "*) wall="${line#Resource_List.walltime = }" ;;
      esac
    done <<<"$out"
    if [[ -n "$stime" && -n "$wall" ]] && start="$(date -d "$stime" +%s 2>/dev/null)" &&
      secs="$(sched_walltime_seconds "$wall" 2>/dev/null)"; then
      echo $((start + secs))
      return 0
    fi
  fi
  if [[ -n "${SLURM_JOB_END_TIME:-}" ]]; then
    printf '%s\n' "$SLURM_JOB_END_TIME"
    return 0
  fi
  if [[ -n "${SLURM_JOB_ID:-}" ]] && command -v squeue >/dev/null 2>&1; then
    end="$(squeue -h -o %e -j "$SLURM_JOB_ID" 2>/dev/null | head -n1)" || end=""
    if [[ "$end" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T ]] && end="$(date -d "$end" +%s 2>/dev/null)"; then
      printf '%s\n' "$end"
      return 0
    fi
  fi
  [[ -n "$id" ]] && _sched_say "no deadline known for job $id"
  return 1
}

# Usage: sched_export_deadline
# Globals written: AGPT_DEADLINE_EPOCH (exported; an existing value wins, so a user can pin it)
# Returns: 0 (also when no deadline is known: AGPT_DEADLINE_EPOCH then stays unset)
sched_export_deadline() {
  local d
  if [[ -z "${AGPT_DEADLINE_EPOCH:-}" ]] && d="$(sched_deadline)"; then
    AGPT_DEADLINE_EPOCH="$d"
    export AGPT_DEADLINE_EPOCH
  fi
  return 0
}

# Runs a submit command without this job's scheduler variables, so that a successor submitted from inside
# a job does not inherit its SLURM_NTASKS & co (SLURM_CONF is kept: it says which cluster), nor this job's
# AGPT_DEADLINE_EPOCH (sbatch exports the environment: the successor would take the dead job's deadline).
_sched_clean_env() {
  local -a drop=()
  local v
  for v in $(compgen -e); do
    case "$v" in
      SLURM_CONF) ;;
      SLURM_* | SBATCH_* | SRUN_* | PBS_* | AGPT_DEADLINE_EPOCH) drop+=(-u "$v") ;;
    esac
  done
  env "${drop[@]}" "$@"
}

# Usage: sched_submit [--after JOBID] [--exclude H1,H2] SCRIPT [ARGS...]
# --after: start only after JOBID ends, however it ends (afterany), so a job killed at walltime still
#          hands over.  --exclude: hosts the new job must avoid (Slurm; PBS cannot and says so).
# Globals read: SCHED_KIND
# Returns: 0 and prints the new job id; 1 when submission fails; 2 on bad arguments
sched_submit() {
  local after="" exclude="" kind out id
  while (($#)); do
    case "$1" in
      --after) after="${2:?sched_submit: --after needs a job id}"; shift 2 ;;
      --exclude) exclude="${2-}"; shift 2 ;;
      --) shift; break ;;
      -*) _sched_say "sched_submit: unknown option $1"; return 2 ;;
      *) break ;;
    esac
  done
  if (($# == 0)); then
    _sched_say "sched_submit: no script given"
    return 2
  fi
  kind="$(sched_detect)"
  local -a cmd=()
  case "$kind" in
    slurm)
      cmd=(sbatch --parsable)
      [[ -n "$after" ]] && cmd+=("--dependency=afterany:$after")
      [[ -n "$exclude" ]] && cmd+=("--exclude=$exclude")
      ;;
    pbs)
      cmd=(qsub)
      [[ -n "$after" ]] && cmd+=(-W "depend=afterany:$after")
      [[ -n "$exclude" ]] && _sched_say "PBS cannot exclude hosts at submit; not excluding: $exclude"
      ;;
    *)
      _sched_say "no batch scheduler here; cannot submit $1"
      return 1
      ;;
  esac
  if ! out="$(_sched_clean_env "${cmd[@]}" "$@")"; then
    _sched_say "submit failed: ${cmd[*]} $*"
    return 1
  fi
  id="$(printf '%s\n' "$out" | tail -n1)"
  id="${id%%;*}"
  id="${id##* }"
  if [[ -z "$id" ]]; then
    _sched_say "submit printed no job id: ${cmd[*]} $*"
    return 1
  fi
  _sched_say "submitted $id: ${cmd[*]} $*"
  printf '%s\n' "$id"
}

# Usage: sched_cancel JOBID
# Returns: the scheduler command's status
sched_cancel() {
  local id="${1:?sched_cancel: job id}"
  case "$(sched_detect)" in
    slurm) scancel "$id" ;;
    pbs) qdel "$id" ;;
    *) _sched_say "no batch scheduler; nothing to cancel for $id"; return 1 ;;
  esac
}

# Usage: sched_exclude JOBID H1,H2
# Keeps a pending job off the given hosts.  Slurm: scontrol update ExcNodeList (the job's earlier list is
# merged, not replaced).  PBS has no such attribute: logs that it cannot and returns 0.
# Returns: 0; 1 when scontrol refuses
sched_exclude() {
  local id="${1:?sched_exclude: job id}" hosts="${2-}" old
  [[ -z "$hosts" ]] && return 0
  case "$(sched_detect)" in
    slurm)
      old="$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*ExcNodeList=\([^ ]*\).*/\1/p' | head -n1)" || old=""
      [[ "$old" == "(null)" ]] && old=""
      scontrol update "JobId=$id" "ExcNodeList=${old:+$old,}$hosts"
      ;;
    pbs)
      _sched_say "PBS cannot exclude hosts from a queued job; job $id may land on: $hosts"
      ;;
    *) return 0 ;;
  esac
}

# Usage: sched_job_alive JOBID
# Returns: 0 while the job is queued, held or running; 1 once it ended or is unknown
sched_job_alive() {
  local id="${1:?sched_job_alive: job id}" state
  case "$(sched_detect)" in
    slurm)
      state="$(squeue -h -o %T -j "$id" 2>/dev/null | head -n1)" || return 1
      case "$state" in
        PENDING | RUNNING | CONFIGURING | REQUEUED | RESIZING | SUSPENDED | REQUEUE_HOLD | COMPLETING) return 0 ;;
        *) return 1 ;;
      esac
      ;;
    pbs)
      state="$(qstat -f "$id" 2>/dev/null | sed -n 's/^[[:space:]]*job_state = \(.*\)$/\1/p' | head -n1)" ||
        return 1
      case "$state" in
        Q | H | R | W | T | S | B | E) return 0 ;;
        *) return 1 ;;
      esac
      ;;
    *) return 1 ;;
  esac
}
