# shellcheck shell=bash
# Shared helpers for tests/cluster/{up,down,node}: the local Slurm cluster's files and daemons.
# Source it: `source "$(dirname "$0")/lib.sh"` (from an executable next to it).
# Functions: cluster_conf DIR, cluster_env DIR, cluster_start_slurmd DIR NODE, cluster_node_state DIR NODE,
#   cluster_node_scontrol_state DIR NODE, cluster_wait_nodes DIR STATE SECS NODE..., cluster_pid_of DIR NAME,
#   cluster_alive DIR PID NAME, cluster_stepds DIR [NODE], cluster_daemons DIR, cluster_tree PID..., _cluster_running PID,
#   cluster_kill_pids WAIT_SECS PID..., cluster_logs DIR, _cluster_forked PID.
# Settings: CLUSTER_WAIT (seconds `up` and `node restore` wait for nodes to be idle, default 60).
# Files under DIR: slurm.conf, plugstack.conf, pids (lines `NAME PID`), log/, state/, spool/NODE/, run/.
: "${CLUSTER_WAIT:=60}"

# Usage: cluster_conf DIR -> prints the absolute slurm.conf path of the cluster in DIR.
cluster_conf() {
  printf '%s/slurm.conf\n' "$1"
}

# Usage: cluster_env DIR -> runs nothing; exports SLURM_CONF for the cluster in DIR (Globals written: SLURM_CONF).
cluster_env() {
  SLURM_CONF="$1/slurm.conf"
  export SLURM_CONF
}

# Usage: cluster_start_slurmd DIR NODE
# Starts `slurmd -D -N NODE` in its own session, logs to DIR/log, records `slurmd:NODE PID` in DIR/pids.
# Returns: 0 once started, 1 if the daemon died at once.
cluster_start_slurmd() {
  local dir="$1" node="$2" pid
  mkdir -p "$dir/spool/$node"
  SLURM_CONF="$dir/slurm.conf" setsid slurmd -D -N "$node" </dev/null >>"$dir/log/slurmd-$node.out" 2>&1 3>&- 4>&- 5>&- &
  pid=$!
  printf 'slurmd:%s %s\n' "$node" "$pid" >>"$dir/pids"
}

# Usage: cluster_node_state DIR NODE -> prints NODE's state in lower case as sinfo spells it (idle, down*, ...).
cluster_node_state() {
  SLURM_CONF="$1/slurm.conf" sinfo -h -N -n "$2" -o '%t' 2>/dev/null | head -n1
}

# Usage: cluster_node_scontrol_state DIR NODE -> prints NODE's State= as scontrol spells it (DOWN+NOT_RESPONDING).
cluster_node_scontrol_state() {
  SLURM_CONF="$1/slurm.conf" scontrol show node "$2" 2>/dev/null | sed -n 's/^ *State=\([^ ]*\).*/\1/p'
}

# Usage: cluster_wait_nodes DIR STATE_REGEX SECS NODE...
# Waits until every NODE's state (sinfo %t) matches ^STATE_REGEX$.  Returns: 0 when they do, 1 after SECS.
cluster_wait_nodes() {
  local dir="$1" want="$2" secs="$3" node state ok deadline
  shift 3
  deadline=$((SECONDS + secs))
  while :; do
    ok=1
    for node in "$@"; do
      state="$(cluster_node_state "$dir" "$node")"
      [[ "$state" =~ ^($want)$ ]] || { ok=0; break; }
    done
    ((ok)) && return 0
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# Usage: cluster_pid_of DIR NAME -> prints the last pid recorded for NAME (slurmctld, slurmd:n1) in DIR/pids.
cluster_pid_of() {
  [[ -f "$1/pids" ]] || return 0
  awk -v n="$2" '$1 == n { p = $2 } END { if (p) print p }' "$1/pids"
}

# Usage: cluster_alive DIR PID NAME -> 0 when PID is a live NAME (slurmctld, slurmd) of the cluster in DIR: its
# command name is NAME and its environment holds SLURM_CONF=DIR/slurm.conf (so a reused pid, or a daemon of
# another cluster, never matches).  A zombie (dead, not yet reaped by init) counts as not running.
cluster_alive() {
  local comm=""
  read -r comm 2>/dev/null <"/proc/$2/comm" || true
  [[ "$comm" == "$3" ]] && _cluster_running "$2" || return 1
  tr '\0' '\n' 2>/dev/null <"/proc/$2/environ" | grep -qxF "SLURM_CONF=$1/slurm.conf"
}

# Usage: cluster_stepds DIR [NODE] -> prints pids of the slurmstepd processes of the cluster in DIR (on NODE).
# A slurmstepd clears its environment but keeps its node's SlurmdLogFile (DIR/log/slurmd-NODE.log) open, and
# that path names both the cluster and the node.
cluster_stepds() {
  local dir="$1" node="${2:-}" p fd target comm
  for p in /proc/[0-9]*; do
    comm=""
    read -r comm 2>/dev/null <"$p/comm" || true
    [[ "$comm" == slurmstepd ]] || continue
    for fd in "$p"/fd/*; do
      target="$(readlink "$fd" 2>/dev/null)" || continue
      if [[ "$target" == "$dir/log/slurmd-$node.log" ]] || [[ -z "$node" && "$target" == "$dir/log/slurmd-"*.log ]]
      then
        printf '%s\n' "${p#/proc/}"
        break
      fi
    done
  done
}

# Usage: cluster_daemons DIR -> prints pids of every slurmctld, slurmscriptd (slurmctld's helper) and slurmd whose
# environment holds SLURM_CONF=DIR/slurm.conf: the cluster's daemons, whether or not DIR/pids lists them.
cluster_daemons() {
  local p comm
  for p in /proc/[0-9]*; do
    comm=""
    read -r comm 2>/dev/null <"$p/comm" || true
    case "$comm" in
      slurmctld|slurmscriptd|slurmd) cluster_alive "$1" "${p#/proc/}" "$comm" && printf '%s\n' "${p#/proc/}" ;;
    esac
  done
  return 0
}

# Usage: cluster_tree PID... -> prints each PID and all its descendants (by /proc/*/stat parent links).  A client of
# the tests' fork server (tests/python/agpt_zygote.py) counts the rank it stands for as its child.
cluster_tree() {
  local -a todo=("$@")
  local p
  local -A kids=()
  local stat pid ppid rest rank
  for stat in /proc/[0-9]*/stat; do
    read -r pid rest 2>/dev/null <"$stat" || continue
    rest="${rest##*) }"
    read -r _ ppid _ <<<"$rest"
    kids[$ppid]+="$pid "
  done
  while ((${#todo[@]})); do
    p="${todo[0]}"
    todo=("${todo[@]:1}")
    printf '%s\n' "$p"
    # shellcheck disable=SC2206
    [[ -z "${kids[$p]:-}" ]] || todo+=(${kids[$p]})
    rank="$(_cluster_forked "$p")"
    [[ -z "$rank" ]] || todo+=("$rank")
  done
}

# Usage: _cluster_forked PID -> prints the pid of the rank that PID, a client of the tests' fork server, stands for
# (the server's FOLDER/pids/PID, FOLDER holding the socket named by the client's AGPT_TEST_ZYGOTE); nothing for
# any other process.
_cluster_forked() {
  local -a words=()
  local w rank=""
  mapfile -d '' words 2>/dev/null <"/proc/$1/cmdline" || return 0
  [[ " ${words[*]} " == *"/agpt_zygote.py "* ]] || return 0
  mapfile -d '' words 2>/dev/null <"/proc/$1/environ" || return 0
  for w in "${words[@]}"; do
    [[ "$w" == AGPT_TEST_ZYGOTE=/* ]] || continue
    w="${w#AGPT_TEST_ZYGOTE=}"
    read -r rank 2>/dev/null <"${w%/*}/pids/$1" || true
  done
  [[ -z "$rank" ]] || printf '%s\n' "$rank"
}

# Usage: _cluster_running PID -> 0 when PID exists and is not a zombie.
_cluster_running() {
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat="${stat##*) }"
  [[ "${stat:0:1}" != Z ]]
}

# Usage: cluster_kill_pids WAIT PID... -> sends TERM, waits up to WAIT seconds, then KILLs what is left.
cluster_kill_pids() {
  local wait="$1" p left deadline
  shift
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  deadline=$((SECONDS + wait))
  while :; do
    left=0
    for p in "$@"; do
      if _cluster_running "$p"; then left=1; fi
    done
    ((left)) || return 0
    ((SECONDS < deadline)) || break
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}

# Usage: cluster_logs DIR -> prints the tail of every log of the cluster in DIR (for error messages).
cluster_logs() {
  local f
  for f in "$1"/log/*; do
    [[ -f "$f" ]] || continue
    printf -- '--- %s\n' "$f"
    tail -n 15 "$f"
  done
}
