# lib/launch.sh: build and run the parallel launcher command for the active hosts, from the site profile.
# shellcheck shell=bash
#
# Source it after lib/sched.sh and lib/env.sh (and the site profile: env_site_load):
#   source "$AGPT_HOME/lib/sched.sh"; source "$AGPT_HOME/lib/env.sh"; source "$AGPT_HOME/lib/launch.sh"
#
# Functions
#   launch_hostfile          print the path of the host file to launch on (a new mktemp file, yours to
#                            remove, when FAILOVER_HOSTFILE is not set)
#   launch_cmd ARGS...       set the array LAUNCH_CMD and print it as one shell-quoted line; a host file it
#                            had to make is LAUNCH_TMPFILE, removed by launch_run or launch_cleanup
#   launch_run ARGS...       run LAUNCH_CMD (AGPT_DRY_RUN=1: print it and return 0), then launch_cleanup
#   launch_cleanup           remove LAUNCH_TMPFILE, if any
#   launch_container_words   set the array LAUNCH_CONTAINER (runtime words before the program; pyxis: srun flags)
#
# The host list is always honoured: $FAILOVER_HOSTFILE (hosts/active, written by the failover loop) when
# set, else the allocation's hosts, so that a spare swapped in really receives the ranks.
#
# Settings (defaults from the site profile)
#   LAUNCH_LAUNCHER   pals | hydra | openmpi | srun      (SITE_LAUNCHER, else hydra)
#   LAUNCH_PPN        ranks per node                     (SITE_RANKS_PER_NODE, else 1)
#   LAUNCH_CPU_BIND   CPU binding                        (SITE_CPU_BIND)
#   LAUNCH_MPIEXEC    the mpiexec of PALS or hydra       (mpiexec)
#   LAUNCH_MPIRUN     Open MPI's mpirun                  (mpirun)
#   LAUNCH_SRUN       Slurm's srun                       (srun)
#   SITE_LAUNCHER_FLAGS (array) extra launcher flags, placed before ARGS
#   AGPT_DRY_RUN=1    print the command instead of running it
#
# Containers: when AGPT_CONTAINER_IMAGE (the run config's job.container_image) is set and LAUNCH_CONTAINER /
# SITE_CONTAINER is not none, every rank's command runs in the image (docs/contract.md "Containers"):
#   LAUNCH_CONTAINER_RUNTIME  none | apptainer | podman-hpc | shifter | pyxis  (SITE_CONTAINER, else none)
#   SITE_CONTAINER_OPTS (array) extra runtime words, before the image
#   AGPT_CONTAINER_PYTHON  the interpreter `agpt` uses inside the image (python3)
#   LAUNCH_BARE=1     this launch runs on the hosts, not in the image (staging, cleanup hooks, the health sweep)
# The run directory (AGPT_RUN_DIR) and the toolkit (AGPT_HOME) are bound at their own paths; the host's environment
# and host name pass in, so heartbeats, the failover loop and the probe name the same hosts.

: "${LAUNCH_MPIEXEC:=mpiexec}"
: "${LAUNCH_MPIRUN:=mpirun}"
: "${LAUNCH_SRUN:=srun}"
LAUNCH_CMD=()
LAUNCH_CONTAINER=()
LAUNCH_TMPFILE=""

# Prints its arguments as one line a user can paste: plain words as they are, others shell-quoted.
_launch_quote() {
  local w out="" q
  for w in "$@"; do
    if [[ "$w" =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
      q="$w"
    else
      printf -v q '%q' "$w"
    fi
    out+="${out:+ }$q"
  done
  printf '%s\n' "$out"
}

# Usage: launch_hostfile
# Globals read: FAILOVER_HOSTFILE, TMPDIR (sched_hosts when no failover host file)
# Returns: 0 and prints a readable host file path; 1 when FAILOVER_HOSTFILE is set but unreadable
launch_hostfile() {
  local f
  if [[ -n "${FAILOVER_HOSTFILE:-}" ]]; then
    if [[ ! -r "$FAILOVER_HOSTFILE" ]]; then
      echo "launch: FAILOVER_HOSTFILE=$FAILOVER_HOSTFILE is not readable" >&2
      return 1
    fi
    printf '%s\n' "$FAILOVER_HOSTFILE"
    return 0
  fi
  # mktemp: a new file of ours (O_EXCL, mode 0600), never a name someone could have planted a link at.
  f="$(mktemp "${TMPDIR:-/tmp}/agpt-hostfile.XXXXXX")" || return 1
  if ! sched_hosts >"$f"; then
    rm -f -- "$f"
    return 1
  fi
  printf '%s\n' "$f"
}

# Usage: launch_cleanup
# Globals read/written: LAUNCH_TMPFILE (emptied)
# Returns: 0
launch_cleanup() {
  if [[ -n "${LAUNCH_TMPFILE:-}" ]]; then
    rm -f -- "$LAUNCH_TMPFILE"
    LAUNCH_TMPFILE=""
  fi
  return 0
}

# Usage: launch_container_words LAUNCHER
# Globals read: AGPT_CONTAINER_IMAGE, LAUNCH_CONTAINER_RUNTIME/SITE_CONTAINER, SITE_CONTAINER_OPTS, AGPT_RUN_DIR, AGPT_HOME,
#   AGPT_CONTAINER_PYTHON, LAUNCH_BARE; written: LAUNCH_CONTAINER (array; empty: no image, or no runtime)
# Returns: 0; 2 on an unknown runtime, pyxis under a launcher that is not srun, or an image with a control character
launch_container_words() {
  local launcher="$1" how="${LAUNCH_CONTAINER_RUNTIME:-${SITE_CONTAINER:-none}}" image="${AGPT_CONTAINER_IMAGE:-}" d
  local py="${AGPT_CONTAINER_PYTHON:-python3}"
  local -a opts=() binds=()
  LAUNCH_CONTAINER=()
  [[ -n "$image" && "$how" != none && "${LAUNCH_BARE:-0}" != 1 ]] || return 0
  env_quote AGPT_CONTAINER_IMAGE/job.container_image "$image" >/dev/null || return 2
  declare -p SITE_CONTAINER_OPTS >/dev/null 2>&1 && opts=("${SITE_CONTAINER_OPTS[@]}")
  for d in "${AGPT_RUN_DIR:-}" "${AGPT_HOME:-$(_env_home)}"; do
    [[ -n "$d" ]] && binds+=("$d")
  done
  # Inside the image `agpt` runs the image's interpreter, not the host venv's the job exported.
  local -a tail=(env "AGPT_PYTHON=$py")
  case "$how" in
    apptainer)
      LAUNCH_CONTAINER=(apptainer exec)
      if ((${#binds[@]})); then
        printf -v d '%s,' "${binds[@]}"
        LAUNCH_CONTAINER+=(--bind "${d%,}")
      fi
      LAUNCH_CONTAINER+=("${opts[@]}" "$image" "${tail[@]}")
      ;;
    podman-hpc)
      LAUNCH_CONTAINER=(podman-hpc run --rm --net host --uts host --ipc host --env-host)
      for d in "${binds[@]}"; do LAUNCH_CONTAINER+=(-v "$d:$d"); done
      LAUNCH_CONTAINER+=(-w "$PWD" "${opts[@]}" "$image" "${tail[@]}")
      ;;
    shifter)
      LAUNCH_CONTAINER=(shifter "--image=$image")
      for d in "${binds[@]}"; do LAUNCH_CONTAINER+=("--volume=$d:$d"); done
      LAUNCH_CONTAINER+=("${opts[@]}" "${tail[@]}")
      ;;
    pyxis)
      if [[ "$launcher" != srun ]]; then
        echo "launch: SITE_CONTAINER=pyxis needs the srun launcher, not '$launcher'" >&2
        return 2
      fi
      local m=""
      for d in "${binds[@]}"; do m+="${m:+,}$d:$d"; done
      LAUNCH_CONTAINER=("--container-image=$image" ${m:+"--container-mounts=$m"} "--container-workdir=$PWD"
        "${opts[@]}" "${tail[@]}")
      ;;
    *)
      echo "launch: unknown container runtime '$how' (none, apptainer, podman-hpc, shifter, pyxis)" >&2
      return 2
      ;;
  esac
}

# Usage: launch_cmd PROGRAM [ARGS...]
# Globals read: LAUNCH_*, SITE_LAUNCHER, SITE_RANKS_PER_NODE, SITE_CPU_BIND, SITE_LAUNCHER_FLAGS, and the container's
#   (launch_container_words)
# Globals written: LAUNCH_CMD (array), LAUNCH_CONTAINER, LAUNCH_TMPFILE (the host file it made, or empty)
# Returns: 0 and prints the command; 2 on an unknown launcher, ranks per node that are not 1 to 1024, or no program
launch_cmd() {
  if (($# == 0)); then
    echo "launch: no program to launch" >&2
    return 2
  fi
  local launcher="${LAUNCH_LAUNCHER:-${SITE_LAUNCHER:-hydra}}"
  local bind="${LAUNCH_CPU_BIND-${SITE_CPU_BIND:-}}"
  local hostfile h nh np nodelist ppn
  local -a hosts=() flags=()
  # Through env_quote (lib/env.sh) before any arithmetic: plain digits only, at most agpt.numeric's
  # MAX_RANKS_PER_NODE, so $(( )) never evaluates text from a profile or the environment.
  ppn="$(env_quote --count 1024 LAUNCH_PPN/SITE_RANKS_PER_NODE "${LAUNCH_PPN:-${SITE_RANKS_PER_NODE:-1}}")" || return 2
  if ((ppn == 0)); then
    echo "launch: LAUNCH_PPN/SITE_RANKS_PER_NODE must be at least 1" >&2
    return 2
  fi
  launch_cleanup
  hostfile="$(launch_hostfile)" || return 1
  [[ "$hostfile" == "${FAILOVER_HOSTFILE:-}" ]] || LAUNCH_TMPFILE="$hostfile"
  while IFS= read -r h || [[ -n "$h" ]]; do
    h="${h%%[[:space:]]*}"
    [[ -n "$h" ]] && hosts+=("$h")
  done <"$hostfile"
  nh=${#hosts[@]}
  if ((nh == 0)); then
    echo "launch: host file $hostfile is empty" >&2
    launch_cleanup
    return 1
  fi
  np=$((nh * ppn))
  if declare -p SITE_LAUNCHER_FLAGS >/dev/null 2>&1; then
    flags=("${SITE_LAUNCHER_FLAGS[@]}")
  fi
  case "$launcher" in
    pals)
      LAUNCH_CMD=("$LAUNCH_MPIEXEC" -n "$np" --ppn "$ppn" --hostfile "$hostfile")
      [[ -n "$bind" ]] && LAUNCH_CMD+=(--cpu-bind "$bind")
      ;;
    hydra)
      LAUNCH_CMD=("$LAUNCH_MPIEXEC" -f "$hostfile" -n "$np" -ppn "$ppn")
      [[ -n "$bind" ]] && LAUNCH_CMD+=(-bind-to "$bind")
      ;;
    openmpi)
      LAUNCH_CMD=("$LAUNCH_MPIRUN" -np "$np" --hostfile "$hostfile" --map-by "ppr:$ppn:node")
      [[ -n "$bind" ]] && LAUNCH_CMD+=(--bind-to "$bind")
      ;;
    srun)
      printf -v nodelist '%s,' "${hosts[@]}"
      launch_cleanup # srun takes the list on its command line
      # --kill-on-bad-exit: one dead rank ends the step (its peers would wait in a collective forever);
      # --label: every line says its rank, so the failover classifier can tell which host spoke.
      LAUNCH_CMD=("$LAUNCH_SRUN" "--nodelist=${nodelist%,}" -N "$nh" "--ntasks-per-node=$ppn" -n "$np"
        --kill-on-bad-exit=1 --label)
      [[ -n "$bind" ]] && LAUNCH_CMD+=("--cpu-bind=$bind")
      ;;
    *)
      echo "launch: unknown launcher '$launcher' (pals, hydra, openmpi, srun)" >&2
      launch_cleanup
      return 2
      ;;
  esac
  ((${#flags[@]})) && LAUNCH_CMD+=("${flags[@]}")
  if ! launch_container_words "$launcher"; then
    launch_cleanup
    return 2
  fi
  ((${#LAUNCH_CONTAINER[@]})) && LAUNCH_CMD+=("${LAUNCH_CONTAINER[@]}")
  LAUNCH_CMD+=("$@")
  _launch_quote "${LAUNCH_CMD[@]}"
}

# Usage: launch_run PROGRAM [ARGS...]
# Globals read: as launch_cmd, AGPT_DRY_RUN; the host file launch_cmd made is removed when it returns
# Returns: the launcher's exit status (0 for a dry run); launch_cmd's status when it cannot build one
launch_run() {
  local line rc=0
  launch_cmd "$@" >/dev/null || return $?
  line="$(_launch_quote "${LAUNCH_CMD[@]}")"
  if [[ "${AGPT_DRY_RUN:-0}" == 1 ]]; then
    printf '%s\n' "$line"
    launch_cleanup
    return 0
  fi
  echo "launch: $line" >&2
  "${LAUNCH_CMD[@]}" || rc=$?
  launch_cleanup
  return "$rc"
}
