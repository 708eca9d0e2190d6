# lib/jobgen.sh: write a PBS or Slurm job script for a site from a run config (`agpt jobgen`).
# shellcheck shell=bash
#
# Source it after lib/env.sh:
#   source "$AGPT_HOME/lib/env.sh"; source "$AGPT_HOME/lib/jobgen.sh"
#   jobgen_render aurora pbs jobs/configs/20b.yaml jobs/agpt_20b.pbs 1 > jobs/agpt_20b.pbs
#
# Functions
#   jobgen_spares NODES                   print the site's default spares for NODES
#   jobgen_walltime SECONDS pbs|slurm     print a walltime as the scheduler writes it
#   jobgen_render SITE SCHED CONFIG JOBSCRIPT PORTABLE
#       print the job script.  JOBSCRIPT: the path the chain resubmits ("" : an EDIT placeholder).
#       PORTABLE=1: embed no absolute path; the toolkit and the config are found from the submit directory
#       (for the scripts committed in jobs/); 0: embed this toolkit's path and absolute config path.
#
# Settings
#   AGPT_HOME     the toolkit (default: the folder above this file)
#   AGPT_PYTHON   the python that reads the YAML (needs PyYAML: the toolkit's venv)
#
# Every value in the script is either marked EDIT or says where it came from (SITE_* key of the profile,
# or job.* key of the config), so a sysadmin can audit a job script without reading this file.

# Usage: jobgen_spares NODES
# ceil(NODES * SITE_SPARES_PERCENT / 100), raised to SITE_SPARES_MIN when that still leaves at least 3/4 of
# the allocation training: agpt.rundir.spares_for, the formula the failover loop inverts when it splits the
# allocation (one formula, so the job asks for exactly the spares the loop keeps); unset SITE_SPARES_*: the
# loop's fallback too (agpt.rundir.SPARES_*).
# Globals read: SITE_SPARES_PERCENT, SITE_SPARES_MIN, AGPT_PYTHON
jobgen_spares() {
  PYTHONPATH="$(_env_home)/python${PYTHONPATH:+:$PYTHONPATH}" "${AGPT_PYTHON:-python3}" -m agpt.rundir \
    spares "$1" "${SITE_SPARES_PERCENT:-}" "${SITE_SPARES_MIN:-}"
}

# Usage: jobgen_walltime SECONDS pbs|slurm
# PBS: HH:MM:SS (hours may pass 24).  Slurm: D-HH:MM:SS from one day on, else HH:MM:SS.
jobgen_walltime() {
  local t="$1" d h m s
  d=$((t / 86400)) h=$((t % 86400 / 3600)) m=$((t % 3600 / 60)) s=$((t % 60))
  if [[ "$2" == slurm ]] && ((d > 0)); then
    printf '%d-%02d:%02d:%02d\n' "$d" "$h" "$m" "$s"
  else
    printf '%02d:%02d:%02d\n' "$((d * 24 + h))" "$m" "$s"
  fi
}

# Prints "# WHY" then the directive line.
_jobgen_directive() {
  local prefix="$1" why="$2" arg="$3"
  [[ -n "$why" ]] && printf '# %s\n' "$why"
  printf '%s %s\n' "$prefix" "$arg"
}

# Usage: jobgen_render SITE SCHED CONFIG JOBSCRIPT PORTABLE
# Globals read: AGPT_HOME, AGPT_PYTHON; written: SITE_* (the profile), JOB_* (the config)
# Returns: 0 and prints the script; 2 on a bad config, site, scheduler or value (one line on stderr)
jobgen_render() {
  local site="$1" sched="$2" config="$3" jobscript="$4" portable="${5:-0}"
  local home py vars prof spares total wall pfx cfg_path
  home="$(_env_home)"
  py="${AGPT_PYTHON:-python3}"
  case "$sched" in
    pbs) pfx="#PBS" ;;
    slurm) pfx="#SBATCH" ;;
    *) echo "agpt jobgen: --scheduler: '$sched' is not pbs or slurm" >&2; return 2 ;;
  esac
  vars="$(PYTHONPATH="$home/python${PYTHONPATH:+:$PYTHONPATH}" "$py" -m agpt.jobconf "$config")" || return 2
  local JOB_NAME JOB_NODES JOB_SPARES JOB_WALLTIME_S JOB_QUEUE_SET JOB_QUEUE JOB_ACCOUNT_SET JOB_ACCOUNT
  local JOB_FILESYSTEMS_SET JOB_FILESYSTEMS JOB_RUN_DIR JOB_COMMAND JOB_LAUNCH JOB_LAUNCHER
  local JOB_RANKS_PER_NODE JOB_FAILOVER JOB_CHAIN JOB_MAX_JOBS JOB_MAX_NO_PROGRESS JOB_SETUP_ENV JOB_CONTAINER_IMAGE
  local -a JOB_DIRECTIVES JOB_ENV
  eval "$vars"
  if [[ ! -f "$(_env_site_dir)/$site/profile.sh" ]]; then
    echo "agpt jobgen: --site: unknown site '$site' (known: $(_env_known_sites))" >&2
    return 2
  fi
  env_site_load "$site" || return 2 # a profile that fails `agpt site check`: its problems, one line each
  prof="site/$site/profile.sh"
  spares="$JOB_SPARES"
  [[ -n "$spares" ]] || spares="$(jobgen_spares "$JOB_NODES")" || return 2
  env_quote CONFIG "$config" >/dev/null || return 2 # before it is a path to cd to
  if [[ "$portable" == 1 ]]; then
    cfg_path="$config"
  else
    cfg_path="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
  fi
  local -A q=()
  local -a q_dirs=()
  _jobgen_values || return 2
  total=$((q[nodes] + q[spares]))
  wall="$(jobgen_walltime "${q[walltime_s]}" "$sched")"

  _jobgen_directives
  _jobgen_preamble
  _jobgen_exports
  _jobgen_body
}

# Every value the script will hold, through env_quote (lib/env.sh: the one rule) into jobgen_render's `q` (and
# q_dirs: SOURCE DIRECTIVE pairs) before a line is printed: a control character in any of them, or a count that is
# not plain digits within its bound (agpt.numeric's; tests/python/test_shellword.py), is exit 2 naming it.
_jobgen_values() {
  local -A words=([site]="$site" [config]="$config" [cfg_path]="$cfg_path" [jobscript]="$jobscript"
    [home]="$home" [run_dir]="$JOB_RUN_DIR" [name]="$JOB_NAME" [launcher]="$JOB_LAUNCHER"
    [image]="$JOB_CONTAINER_IMAGE")
  local -A counts=([nodes]="$JOB_NODES 100000" [spares]="$spares 100000" [walltime_s]="$JOB_WALLTIME_S 31536000"
    [max_jobs]="$JOB_MAX_JOBS 1000000" [max_no_progress]="$JOB_MAX_NO_PROGRESS 1000000"
    [ranks_per_node]="${JOB_RANKS_PER_NODE:-${SITE_RANKS_PER_NODE:-1}} 1024")
  local -A names=([site]=--site [config]=CONFIG [cfg_path]=CONFIG [jobscript]="-o/--job-script" [home]=AGPT_HOME
    [run_dir]=job.run_dir [name]=job.name [launcher]=job.launcher [image]=job.container_image
    [nodes]=job.nodes [spares]=job.spares
    [walltime_s]=job.walltime [max_jobs]=job.max_jobs [max_no_progress]=job.max_no_progress
    [ranks_per_node]=job.ranks_per_node/SITE_RANKS_PER_NODE)
  local k v e queue account fs
  for k in "${!words[@]}"; do
    q[$k]="$(env_quote "${names[$k]}" "${words[$k]}")" || return 2
  done
  [[ "${q[site]}" == "$site" ]] || { echo "agpt jobgen: --site: '$site' is not a site name" >&2; return 2; }
  for k in "${!counts[@]}"; do
    q[$k]="$(env_quote --count "${counts[$k]##* }" "${names[$k]}" "${counts[$k]% *}")" || return 2
  done
  if [[ "$JOB_QUEUE_SET" == 1 ]]; then queue="$JOB_QUEUE"; else queue="${SITE_QUEUE:-}"; fi
  if [[ "$JOB_ACCOUNT_SET" == 1 ]]; then account="$JOB_ACCOUNT"; else account="${SITE_ACCOUNT:-}"; fi
  if [[ "$JOB_FILESYSTEMS_SET" == 1 ]]; then fs="$JOB_FILESYSTEMS"; else fs="${SITE_FILESYSTEMS:-}"; fi
  q[queue]="$(env_quote --line SITE_QUEUE/job.queue "$queue")" || return 2
  q[account]="$(env_quote --line SITE_ACCOUNT/job.account "$account")" || return 2
  q[filesystems]="$(env_quote --line SITE_FILESYSTEMS/job.filesystems "$fs")" || return 2
  if declare -p SITE_DIRECTIVES >/dev/null 2>&1 && [[ "$sched" == "${SITE_SCHEDULER:-}" ]]; then
    for e in "${SITE_DIRECTIVES[@]}"; do
      v="$(env_quote --line SITE_DIRECTIVES "$e")" || return 2
      q_dirs+=("SITE_DIRECTIVES" "$v")
    done
  fi
  for e in "${JOB_DIRECTIVES[@]}"; do
    v="$(env_quote --line job.directives "$e")" || return 2
    q_dirs+=("job.directives" "$v")
  done
  for e in "${JOB_ENV[@]}"; do
    q["env ${e%%=*}"]="$(env_quote "job.env.${e%%=*}" "${e#*=}")" || return 2
  done
  for k in SITE_STAGE SITE_CONTAINER; do
    q[$k]="$(env_quote "$k" "${!k:-none}")" || return 2
  done
  q[layout]=""
  if declare -p SITE_CKPT_LAYOUT >/dev/null 2>&1 && ((${#SITE_CKPT_LAYOUT[@]})); then
    for e in "${SITE_CKPT_LAYOUT[@]}"; do
      v="$(env_quote SITE_CKPT_LAYOUT "$e")" || return 2
      q[layout]+="${q[layout]:+ }$v"
    done
  fi
  return 0
}

# The four parts of the script.  Each reads jobgen_render's locals (site sched config jobscript portable home
# prof spares total wall pfx cfg_path, JOB_*, and the checked values q and q_dirs) and SITE_*, and prints its lines.

# The header comment and the scheduler's directives.
_jobgen_directives() {
  local d i how
  echo "#!/bin/bash"
  echo "# ${q[name]}: ${q[nodes]} node$( ((q[nodes] == 1)) || echo s) + ${q[spares]} spare$( ((q[spares] == 1)) || echo s) on $site ($sched), $wall per job, chained until training is done."
  how="agpt jobgen --site $site --scheduler $sched"
  [[ "$portable" == 1 ]] && how+=" --portable"
  [[ -n "$jobscript" ]] && how+=" -o ${q[jobscript]}"
  echo "# Generated by: $how ${q[config]}"
  echo "# Regenerate rather than edit.  Lines marked EDIT are yours; every other value names its source: a"
  echo "# SITE_* key of $prof or a job.* key of the config."
  local plan line # the checkpoint plan (agpt.ckptplan) as the job's first start makes it; nothing for a job that does not train
  plan="$(PYTHONPATH="$home/python${PYTHONPATH:+:$PYTHONPATH}" "$py" -m agpt.check "$site" "$config")" || return 2
  if [[ -n "$plan" ]]; then
    echo "# Checkpoints: the job's \`agpt check --run-dir\` plans them at every start (SITE_HOST_MEM_GIB, SITE_NODE_MTBF_H,"
    echo "# the previous job's measured stall; docs/checkpoints.md); the first job's plan, the config's own keys kept:"
    while IFS= read -r line; do printf '#   %s\n' "$line"; done <<<"$plan"
  fi
  if [[ "$sched" == pbs ]]; then
    _jobgen_directive "$pfx" "" "-N ${q[name]}"
    _jobgen_directive "$pfx" "job.nodes ${q[nodes]} + spares ${q[spares]} (job.spares, else SITE_SPARES_PERCENT/SITE_SPARES_MIN)" "-l select=$total"
    _jobgen_directive "$pfx" "job.walltime" "-l walltime=$wall"
  else
    _jobgen_directive "$pfx" "" "--job-name=${q[name]}"
    _jobgen_directive "$pfx" "" "--output=%x.o%j"
    _jobgen_directive "$pfx" "job.nodes ${q[nodes]} + spares ${q[spares]} (job.spares, else SITE_SPARES_PERCENT/SITE_SPARES_MIN)" "--nodes=$total"
    _jobgen_directive "$pfx" "job.walltime" "--time=$wall"
    if [[ "$JOB_FAILOVER" == 1 ]]; then
      _jobgen_directive "$pfx" "job.failover: a dead node must not end the allocation; a spare replaces it" "--no-kill"
    fi
    d="SITE_RANKS_PER_NODE"
    [[ -n "$JOB_RANKS_PER_NODE" ]] && d="job.ranks_per_node"
    _jobgen_directive "$pfx" "$d" "--ntasks-per-node=${q[ranks_per_node]}"
  fi
  d="SITE_QUEUE"
  [[ "$JOB_QUEUE_SET" == 1 ]] && d="job.queue"
  if [[ -n "${q[queue]}" ]]; then
    if [[ "$sched" == pbs ]]; then _jobgen_directive "$pfx" "$d" "-q ${q[queue]}"; else _jobgen_directive "$pfx" "$d" "--partition=${q[queue]}"; fi
  fi
  d="SITE_ACCOUNT"
  [[ "$JOB_ACCOUNT_SET" == 1 ]] && d="job.account"
  if [[ -z "${q[account]}" && "$JOB_ACCOUNT_SET" != 1 ]]; then
    q[account]="MYPROJECT"
    d="EDIT: your allocation (SITE_ACCOUNT and job.account are empty)"
  fi
  if [[ -n "${q[account]}" ]]; then
    if [[ "$sched" == pbs ]]; then _jobgen_directive "$pfx" "$d" "-A ${q[account]}"; else _jobgen_directive "$pfx" "$d" "--account=${q[account]}"; fi
  fi
  d="SITE_FILESYSTEMS"
  [[ "$JOB_FILESYSTEMS_SET" == 1 ]] && d="job.filesystems"
  if [[ -n "${q[filesystems]}" ]]; then
    if [[ "$sched" == pbs ]]; then _jobgen_directive "$pfx" "$d" "-l filesystems=${q[filesystems]}"; else _jobgen_directive "$pfx" "$d" "--licenses=${q[filesystems]}"; fi
  fi
  d=""
  for ((i = 0; i < ${#q_dirs[@]}; i += 2)); do
    # The source once, above the first directive that comes from it.
    if [[ "${q_dirs[i]}" == "$d" ]]; then
      _jobgen_directive "$pfx" "" "${q_dirs[i + 1]}"
    else
      _jobgen_directive "$pfx" "${q_dirs[i]}" "${q_dirs[i + 1]}"
    fi
    d="${q_dirs[i]}"
  done
}

# `set -euo pipefail`, AGPT_DEBUG, AGPT_HOME and PATH.
_jobgen_preamble() {
  cat <<'EOF'
set -euo pipefail
[[ "${AGPT_DEBUG:-0}" == 1 ]] && { export PS4='+ ${BASH_SOURCE##*/}:${LINENO}:${FUNCNAME[0]:-main}: '; set -x; }

EOF
  if [[ "$portable" == 1 ]]; then
    cat <<'EOF'
# The toolkit: the directory this job was submitted from (run `qsub`/`sbatch` in the agpt checkout), or
# $AGPT_HOME.  The scheduler runs a spool copy of this script, so the script's own path says nothing.
cd "${PBS_O_WORKDIR:-${SLURM_SUBMIT_DIR:-$PWD}}"
export AGPT_HOME="${AGPT_HOME:-$PWD}"
EOF
  else
    cat <<EOF
# The toolkit, embedded when this script was generated (the scheduler runs a spool copy of this script,
# so the script's own path says nothing).
[[ -n "\${AGPT_HOME:-}" ]] || AGPT_HOME=${q[home]}
export AGPT_HOME
cd "\${PBS_O_WORKDIR:-\${SLURM_SUBMIT_DIR:-\$PWD}}"
EOF
  fi
  cat <<'EOF'
if [[ ! -f "$AGPT_HOME/lib/sched.sh" ]]; then
  echo "agpt job: no agpt toolkit at AGPT_HOME=$AGPT_HOME (submit from the checkout or export AGPT_HOME)" >&2
  exit 2
fi
export PATH="$AGPT_HOME/bin:$PATH"

EOF
}

# The run's settings: AGPT_*, FAILOVER_*, CHAIN_*, LAUNCH_*, job.env.
_jobgen_exports() {
  local e
  echo "# The run (job.* keys of ${q[config]})."
  echo "export AGPT_SITE=$site"
  echo "export AGPT_CONFIG=${q[cfg_path]}"
  echo "# job.run_dir: survives the chain (checkpoints, hosts/, attempts/, chain.jsonl)"
  if [[ "$JOB_RUN_DIR" != /* && "${q[run_dir]}" == "$JOB_RUN_DIR" ]]; then
    echo "export AGPT_RUN_DIR=\"\$PWD/${q[run_dir]}\"" # a plain word: as it reads inside the quotes
  elif [[ "$JOB_RUN_DIR" != /* ]]; then
    echo "export AGPT_RUN_DIR=\"\$PWD\"/${q[run_dir]}"
  else
    echo "export AGPT_RUN_DIR=${q[run_dir]}"
  fi
  if [[ -n "$jobscript" ]]; then
    echo "# This script, resubmitted as the chain's next job."
    echo "export AGPT_JOB_SCRIPT=${q[jobscript]}"
  else
    echo "# EDIT: this script's path, resubmitted as the chain's next job (generated to standard output)."
    echo "export AGPT_JOB_SCRIPT=\"\${AGPT_JOB_SCRIPT:-${q[name]}.$sched}\""
  fi
  echo "export SCHED_KIND=$sched"
  echo "export FAILOVER_SPARES=${q[spares]}"
  echo "export FAILOVER_PROGRESS_FILE=\"\$AGPT_RUN_DIR/progress\""
  echo "export CHAIN_MAX_JOBS=${q[max_jobs]}"
  echo "export CHAIN_MAX_NO_PROGRESS=${q[max_no_progress]}"
  if [[ -f "$(_env_site_dir)/$site/hooks/cleanup.sh" ]]; then
    echo "# Between failover attempts, once on each of the next attempt's hosts: site/$site/hooks/cleanup.sh"
    echo "# (single quotes: \$AGPT_HOME is expanded when the hook runs)"
    echo "# shellcheck disable=SC2016"
    echo "export FAILOVER_CLEANUP_HOOK='LAUNCH_BARE=1 LAUNCH_PPN=1 agpt launch \"\$AGPT_HOME/site/$site/hooks/cleanup.sh\"'"
  fi
  if [[ "$JOB_FAILOVER" == 1 && "$JOB_LAUNCH" == 1 && "$JOB_COMMAND" == "agpt train "* ]]; then
    echo "# Before the first attempt every host, spares too, starts its ranks, initialises device and collective"
    echo "# backend and runs a small allreduce; a host that fails is evicted into hosts/bad with the failing line."
    echo "# Submit with FAILOVER_PREFLIGHT set empty to skip it."
    echo "[[ -v FAILOVER_PREFLIGHT ]] || export FAILOVER_PREFLIGHT='agpt preflight {host}'"
  fi
  _jobgen_site_lines
  [[ -n "$JOB_LAUNCHER" ]] && echo "export LAUNCH_LAUNCHER=${q[launcher]}  # job.launcher"
  [[ -n "$JOB_RANKS_PER_NODE" ]] && echo "export LAUNCH_PPN=${q[ranks_per_node]}  # job.ranks_per_node"
  if ((${#JOB_ENV[@]})); then
    echo "# job.env"
    for e in "${JOB_ENV[@]}"; do
      echo "export ${e%%=*}=${q["env ${e%%=*}"]}"
    done
  fi
}

# Staging, container and checkpoint layout: what the profile says (env_setup, lib/launch.sh and env_ckpt_layout
# apply it when the job runs), and the image from job.container_image.
_jobgen_site_lines() {
  local stage container
  case "${q[SITE_STAGE]}" in
    yeet) stage="agpt yeet copies the venv to SITE_LOCAL_DIR on every node" ;;
    copper) stage="launch_copper.sh: a read-only FUSE cache (Copper) of the venv on every node" ;;
    sbcast) stage="sbcast of a tar of the venv to SITE_LOCAL_DIR on every node" ;;
    *) stage="none: every rank reads the venv from the shared filesystem" ;;
  esac
  echo "# Staging (SITE_STAGE=${q[SITE_STAGE]}, in env_setup): $stage."
  container="${q[SITE_CONTAINER]}"
  if [[ "$container" == none ]]; then
    echo "# Container (SITE_CONTAINER=none): ranks run on the host."
  elif [[ -z "$JOB_CONTAINER_IMAGE" ]]; then
    echo "# Container (SITE_CONTAINER=$container): no image (job.container_image): ranks run on the host."
  else
    echo "# Container (SITE_CONTAINER=$container): every rank runs in this image (lib/launch.sh); staging, cleanup"
    echo "# and the health sweep's probe run on the hosts (LAUNCH_BARE=1)."
    echo "export AGPT_CONTAINER_IMAGE=${q[image]}  # job.container_image"
    echo "[[ -v FAILOVER_SWEEP_LAUNCH ]] || export FAILOVER_SWEEP_LAUNCH='env LAUNCH_BARE=1 agpt launch'"
  fi
  if [[ -n "${q[layout]}" ]]; then
    echo "# Checkpoint layout (SITE_CKPT_LAYOUT=(${q[layout]})): set on \$AGPT_RUN_DIR/ckpt when it is created."
  else
    echo "# Checkpoint layout (SITE_CKPT_LAYOUT empty): the filesystem's default."
  fi
}

# The libraries, the environment, the chain and the failover loop (or the bare command), the verdict.
_jobgen_body() {
  local cmd
  cat <<'EOF'

for lib in sched env launch chain failover; do
  # shellcheck source=/dev/null
  source "$AGPT_HOME/lib/$lib.sh"
done
env_site_load "$AGPT_SITE"
EOF
  if [[ "$JOB_SETUP_ENV" == 1 ]]; then
    echo "# Modules, SITE_ENV, the venv (and its node-local copy) from the site profile."
    echo "env_setup"
  fi
  echo "sched_export_deadline"
  echo "echo \"agpt job \$(sched_job_id) on \$(hostname): deadline \${AGPT_DEADLINE_EPOCH:-unknown}\""
  echo "mkdir -p \"\$AGPT_RUN_DIR\""
  echo "# A new checkpoint directory gets SITE_CKPT_LAYOUT (lfs setstripe / daos fs set-attr) before its first file."
  echo "env_ckpt_layout \"\$AGPT_RUN_DIR/ckpt\""
  if [[ "$JOB_CHAIN" == 1 ]]; then
    echo "# Submit the next job now (afterany: it starts even if this one is killed at walltime)."
    echo "chain_start \"\$AGPT_JOB_SCRIPT\""
  fi
  echo ""
  cmd="$JOB_COMMAND"
  echo "rc=0"
  if [[ "$JOB_FAILOVER" == 1 ]]; then
    echo "# Active and spare hosts (hosts/), then attempts until a verdict: 0 done, 3 stuck, 4 repeat, 75 resubmit."
    echo "failover_init || rc=\$?"
    if [[ "$JOB_COMMAND" == "agpt train "* ]]; then
      echo "# The inputs, in seconds, before any launch: python env, the config at this size, data, run directory."
      echo "((rc != 0)) || agpt check --site \"\$AGPT_SITE\" --nodes \"\$(grep -c . \"\$AGPT_RUN_DIR/hosts/active\")\" \\"
      echo "  --run-dir \"\$AGPT_RUN_DIR\" \"\$AGPT_CONFIG\" || rc=\$?"
    fi
    echo "if ((rc == 0)); then"
    if [[ "$JOB_LAUNCH" == 1 ]]; then
      echo "  failover_run agpt launch $cmd || rc=\$?"
    else
      echo "  failover_run $cmd || rc=\$?"
    fi
    echo "fi"
  else
    echo "# No failover loop (job.failover: false): the command's exit code is the verdict."
    if [[ "$JOB_LAUNCH" == 1 ]]; then
      echo "launch_run $cmd || rc=\$?"
    else
      echo "$cmd || rc=\$?"
    fi
  fi
  if [[ "$JOB_CHAIN" == 1 ]]; then
    echo "# Done, stuck or repeat cancel the next job; resubmit keeps it."
    echo "chain_end \"\$rc\""
  fi
  echo "echo \"agpt job \$(sched_job_id): exit \$rc\""
  echo "exit \"\$rc\""
}
