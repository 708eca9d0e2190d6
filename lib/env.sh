# lib/env.sh: the site profile and the Python environment recipe of a job.
# shellcheck shell=bash
#
# Source it:  source "$AGPT_HOME/lib/env.sh"     (defines functions only; no caller option changes)
#
# Functions
#   env_site_load [NAME]     source site/NAME/profile.sh (NAME: $AGPT_SITE, else detected); export AGPT_SITE
#   env_site_detect          print the site whose SITE_HOSTNAME_RE matches this host (AGPT_SITE wins)
#   env_hook PHASE           source site/$AGPT_SITE/hooks/PHASE.sh when it exists
#   env_modules              `module load` each of SITE_MODULES
#   env_exports              export each KEY=VALUE of SITE_ENV
#   env_venv_name            print the venv's name: one venv per framework release
#   env_venv                 create (uv, else python -m venv; --system-site-packages) or reuse, then activate
#   env_stage                bring the venv to every node as SITE_STAGE says (yeet, copper, sbcast, none) and
#                            activate what the nodes read
#   env_container_modules    `module load` each of SITE_CONTAINER_MODULES when the job runs in an image
#   env_ckpt_layout DIR      create DIR (a new checkpoint directory) laid out as SITE_CKPT_LAYOUT says
#   env_setup                all of the above but env_ckpt_layout, in that order (hooks pre-env and post-env
#                            around the modules)
#   env_quote [--line|--count MAX] NAME VALUE
#                            the one way a value enters a generated script or Bash arithmetic: print it quoted
#                            (a shell word), as is (--line: a comment or directive) or as plain digits (--count)
#
# Settings
#   AGPT_HOME        the toolkit (default: the folder above this file)
#   AGPT_SITE_DIR    the site profiles (default: $AGPT_HOME/site)
#   ENV_VENV_NAME    override the venv name
#   ENV_PIP_INSTALL  pip arguments run once when a venv is created (default: none), e.g. "-r reqs.txt";
#                    pip comes from the system site packages (the venv is made --without-pip: seconds faster)
#   ENV_STAGE        how to stage the venv: yeet | copper | sbcast | none (default: SITE_STAGE)
#   ENV_YEET_FLAGS   extra flags for `agpt yeet` (default: none; SITE_STAGE_OPTS come first)
#   ENV_COPPER_LAUNCH, ENV_SBCAST   the commands (default: launch_copper.sh, sbcast)
#   ENV_LOG          a file messages are appended to (default "": standard error; not reopened as /dev/stderr, which
#                    would reopen a redirected batch log and write over the job's own output)
#
# Shell options: module scripts and activate are not `set -u` clean, so each function here that runs them
# makes the caller's options local (`local -`); they are back as they were when it returns.

: "${ENV_PIP_INSTALL:=}"
: "${ENV_YEET_FLAGS:=}"
: "${ENV_COPPER_LAUNCH:=launch_copper.sh}"
: "${ENV_SBCAST:=sbcast}"
: "${ENV_LOG:=}"

_env_say() {
  if [[ -n "$ENV_LOG" ]]; then
    printf 'env: %s\n' "$*" >>"$ENV_LOG"
  else
    printf 'env: %s\n' "$*" >&2
  fi
}

_env_home() {
  if [[ -n "${AGPT_HOME:-}" ]]; then
    printf '%s\n' "$AGPT_HOME"
  else
    (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  fi
}

_env_site_dir() {
  local home
  home="$(_env_home)"
  printf '%s\n' "${AGPT_SITE_DIR:-$home/site}"
}

_env_known_sites() {
  local d p names=""
  d="$(_env_site_dir)"
  for p in "$d"/*/profile.sh; do
    [[ -f "$p" ]] || continue
    p="${p%/profile.sh}"
    p="${p##*/}"
    [[ "$p" == _* ]] && continue
    names+="${names:+, }$p"
  done
  printf '%s\n' "$names"
}

# Usage: env_quote [--line | --count MAX] NAME VALUE
# The one rule for a value written into a generated script, a hook's command or Bash arithmetic (spelled for
# Python in python/agpt/shellword.py; tests/python/test_shellword.py holds the two equal).  VALUE must be one line
# of printable text: a control character (newline, CR, tab, ESC, DEL, C1, U+2028/2029) is refused, because a
# newline even in a comment starts a live line.  Then:
#   (default)     print VALUE as one shell word: as it is when plainly safe ([A-Za-z0-9_@%+=:,./-]), else quoted
#   --line        print VALUE as it is (a comment, a scheduler directive)
#   --count MAX   print VALUE when it is plain decimal digits worth at most MAX, so `$(( ))` never evaluates
#                 text (in Bash arithmetic `PWD[$(id)]` runs id)
# Returns: 0 and prints; 2 with one line naming NAME on stderr (ENV_LOG)
env_quote() {
  local LC_ALL=C mode=word max=0
  case "${1:-}" in
    --line) mode=line; shift ;;
    --count) mode=count; max="$2"; shift 2 ;;
  esac
  local name="$1" value="$2"
  if [[ "$value" == *[$'\x01'-$'\x1f\x7f']* || "$value" == *$'\xc2'[$'\x80'-$'\x9f']* ||
    "$value" == *$'\xe2\x80'[$'\xa8\xa9']* ]]; then
    _env_say "$name: holds a control character; a value in a script must be one line of printable text"
    return 2
  fi
  case "$mode" in
    line) printf '%s\n' "$value" ;;
    count)
      if [[ ! "$value" =~ ^[0-9]{1,18}$ ]] || ((10#$value > max)); then
        _env_say "$name: must be a whole number from 0 to $max, got '$value'"
        return 2
      fi
      printf '%s\n' "$((10#$value))"
      ;;
    *)
      if [[ "$value" =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
        printf '%s\n' "$value"
      else
        printf '%q\n' "$value"
      fi
      ;;
  esac
}

# Usage: env_site_detect
# Globals read: AGPT_SITE
# Returns: 0 and prints a site name (generic, which matches any host, is tried last)
env_site_detect() {
  if [[ -n "${AGPT_SITE:-}" ]]; then
    printf '%s\n' "$AGPT_SITE"
    return 0
  fi
  local d p name re short full
  d="$(_env_site_dir)"
  short="$(hostname -s 2>/dev/null || hostname)"
  full="$(hostname -f 2>/dev/null || hostname)"
  for p in "$d"/*/profile.sh; do
    [[ -f "$p" ]] || continue
    name="${p%/profile.sh}"
    name="${name##*/}"
    [[ "$name" == _* || "$name" == generic ]] && continue
    re="$(sed -n "s/^SITE_HOSTNAME_RE=['\"]\{0,1\}\([^'\"]*\)['\"]\{0,1\}[[:space:]]*$/\1/p" "$p" | head -n1)"
    if [[ -n "$re" ]] && { [[ "$short" =~ $re ]] || [[ "$full" =~ $re ]]; }; then
      printf '%s\n' "$name"
      return 0
    fi
  done
  echo generic
}

# Usage: env_site_load [NAME]
# Globals written: every SITE_* key of the profile; AGPT_SITE (exported)
# Returns: 0; 2 when the site is unknown (the known ones are listed) or its profile does not pass
#   `agpt site check` (it is checked, as this environment resolves it, before it is sourced); 1 when no Python
#   could check it
env_site_load() {
  local name="${1:-}" d
  [[ -n "$name" ]] || name="$(env_site_detect)"
  d="$(_env_site_dir)"
  if [[ ! -f "$d/$name/profile.sh" ]]; then
    _env_say "unknown site '$name' (known: $(_env_known_sites))"
    return 2
  fi
  # A profile is data: it is sourced only after `agpt site check`'s own checks (python/agpt/site.py) passed: nothing
  # in it could run a command ($(...), backticks, a line that is not an assignment), every key is set, one line,
  # and of its type as it resolves here (SITE_RANKS_PER_NODE digits, ...).
  local rc=0 err
  err="$(PYTHONPATH="$(_env_home)/python${PYTHONPATH:+:$PYTHONPATH}" "${AGPT_PYTHON:-python3}" -m agpt.site \
    "$d/$name/profile.sh" 2>&1 >/dev/null)" || rc=$?
  [[ -z "$err" ]] || _env_say "$err"
  if ((rc == 2)); then
    _env_say "refusing to source $d/$name/profile.sh: not data only, or a key missing or ill-typed (agpt site check $d/$name/profile.sh)"
    return 2
  elif ((rc != 0)); then
    _env_say "cannot check $d/$name/profile.sh: ${AGPT_PYTHON:-python3} -m agpt.site exited $rc (set AGPT_PYTHON to a Python >= 3.10)"
    return 1
  fi
  # shellcheck source=/dev/null
  source "$d/$name/profile.sh"
  AGPT_SITE="$name"
  export AGPT_SITE
}

# Usage: env_hook PHASE
# Globals read: AGPT_SITE
# Returns: the hook's status; 0 when the site has no such hook
env_hook() {
  local -
  local f
  f="$(_env_site_dir)/${AGPT_SITE:-generic}/hooks/$1.sh"
  [[ -f "$f" ]] || return 0
  _env_say "hook $f"
  set +u
  # shellcheck source=/dev/null
  source "$f"
}

# Usage: env_modules
# Globals read: SITE_MODULES
# Returns: 0; 1 when a module fails to load or `module` is missing while modules are asked for
env_modules() {
  local -
  local m
  declare -p SITE_MODULES >/dev/null 2>&1 || return 0
  ((${#SITE_MODULES[@]})) || return 0
  if ! type module >/dev/null 2>&1; then
    _env_say "SITE_MODULES asks for ${SITE_MODULES[*]} but there is no 'module' command here"
    return 1
  fi
  set +u
  for m in "${SITE_MODULES[@]}"; do
    _env_say "module load $m"
    if ! module load "$m"; then
      _env_say "module load $m failed"
      return 1
    fi
  done
}

# Usage: env_exports
# Globals read: SITE_ENV, SITE_PEAK_TFLOPS, SITE_LOCAL_CKPT_DIR, SITE_FAILURE_DOMAIN_RE; written: each KEY of
# SITE_ENV and those three when set (exported: the trainer's MFU and its local checkpoint tier read them)
# Returns: 0; 2 on an entry that is not KEY=VALUE
env_exports() {
  local kv
  if [[ -n "${SITE_PEAK_TFLOPS:-}" ]]; then
    export SITE_PEAK_TFLOPS
  fi
  if [[ -n "${SITE_LOCAL_CKPT_DIR:-}" ]]; then
    export SITE_LOCAL_CKPT_DIR
  fi
  if [[ -n "${SITE_FAILURE_DOMAIN_RE:-}" ]]; then
    export SITE_FAILURE_DOMAIN_RE
  fi
  declare -p SITE_ENV >/dev/null 2>&1 || return 0
  for kv in "${SITE_ENV[@]}"; do
    if [[ ! "$kv" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
      _env_say "SITE_ENV entry '$kv' is not KEY=VALUE"
      return 2
    fi
    export "${kv%%=*}=${kv#*=}"
  done
}

# Usage: env_venv_name
# One venv per framework release: named after the conda environment the modules brought ($CONDA_PREFIX's
# last path part that carries a version, e.g. aurora_frameworks-2025.0.0 or 2024-04-29), else the last module
# (pytorch/2.6.0 -> pytorch-2.6.0), else the python version.
# Returns: 0 and prints the name
env_venv_name() {
  local p part name=""
  if [[ -n "${ENV_VENV_NAME:-}" ]]; then
    printf '%s\n' "$ENV_VENV_NAME"
    return 0
  fi
  if [[ -n "${CONDA_PREFIX:-}" ]]; then
    p="${CONDA_PREFIX%/}"
    name="${p##*/}"
    while [[ "$p" == */* ]]; do
      part="${p##*/}"
      if [[ "$part" =~ [0-9]+[.-][0-9]+ ]]; then
        name="$part"
        break
      fi
      p="${p%/*}"
    done
  elif declare -p SITE_MODULES >/dev/null 2>&1 && ((${#SITE_MODULES[@]})); then
    name="${SITE_MODULES[${#SITE_MODULES[@]} - 1]}"
  else
    name="$("${SITE_PYTHON:-python3}" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')" || return 1
  fi
  name="${name//\//-}"
  printf 'agpt-%s\n' "$name"
}

# Usage: env_venv
# Globals read: SITE_VENV_DIR, SITE_PYTHON, ENV_PIP_INSTALL; written: VIRTUAL_ENV, PATH (activate),
#   AGPT_PYTHON and AGPT_VENV (exported)
# Returns: 0; 1 when creation fails.  SITE_VENV_DIR empty: the current python is used as is.
env_venv() {
  local -
  local dir name py lock waited=0
  if [[ -z "${SITE_VENV_DIR:-}" ]]; then
    _env_say "SITE_VENV_DIR is empty: using the current python ($(command -v "${SITE_PYTHON:-python3}"))"
    return 0
  fi
  name="$(env_venv_name)" || return 1
  dir="$SITE_VENV_DIR/$name"
  py="${SITE_PYTHON:-python3}"
  if [[ ! -f "$dir/bin/activate" ]]; then
    mkdir -p "$SITE_VENV_DIR" || return 1
    lock="$dir.creating"
    # Two jobs starting together: one creates, the other waits for bin/activate.
    if mkdir "$lock" 2>/dev/null; then
      _env_say "creating venv $dir (--system-site-packages, from $py)"
      if command -v uv >/dev/null 2>&1; then
        uv venv -q --system-site-packages --python "$(command -v "$py")" "$dir" || { rmdir "$lock"; return 1; }
      else
        "$py" -m venv --system-site-packages --without-pip "$dir" || { rmdir "$lock"; return 1; }
      fi
      if [[ -n "$ENV_PIP_INSTALL" ]]; then
        # shellcheck disable=SC2086
        "$dir/bin/python" -m pip install -q $ENV_PIP_INSTALL || { rmdir "$lock"; return 1; }
      fi
      rmdir "$lock"
    else
      while [[ ! -f "$dir/bin/activate" ]] && ((waited < 600)); do
        sleep 2
        waited=$((waited + 2))
      done
      [[ -f "$dir/bin/activate" ]] || { _env_say "timed out waiting for $dir (remove $lock if stale)"; return 1; }
    fi
  else
    _env_say "reusing venv $dir"
  fi
  set +u
  # shellcheck source=/dev/null
  source "$dir/bin/activate"
  AGPT_VENV="$dir"
  AGPT_PYTHON="$dir/bin/python"
  export AGPT_VENV AGPT_PYTHON
}

# Usage: env_stage
# Brings the active venv to every node as ENV_STAGE/SITE_STAGE says and activates what the ranks will read:
#   yeet    `agpt yeet VENV --dest SITE_LOCAL_DIR/NAME` on every node (one rank per node, launch_run)
#   copper  `launch_copper.sh -v VIEW` (VIEW: SITE_LOCAL_DIR/$USER/copper_mount): a read-only FUSE cache of the
#           shared tree on every node; the venv is then read as VIEW/<its path>
#   sbcast  a tar of the venv broadcast by `sbcast -pf` to SITE_LOCAL_DIR on every node, unpacked there
#   none    nothing
# SITE_STAGE_OPTS are extra words for the command.  When staging fails, the job keeps the shared-filesystem venv.
# Globals read: AGPT_VENV, SITE_LOCAL_DIR, ENV_STAGE/SITE_STAGE, SITE_STAGE_OPTS, ENV_YEET_FLAGS; written (on
#   success): AGPT_VENV, AGPT_PYTHON, VIRTUAL_ENV, PATH (activate), AGPT_STAGED (the method that ran); and
#   AGPT_STAGE_S (the seconds it took, also when it failed)
# Returns: 0; 2 on an unknown method
env_stage() {
  local -
  local how="${ENV_STAGE:-${SITE_STAGE:-none}}" dest t0
  local -a opts=()
  case "$how" in
    none) return 0 ;;
    yeet | copper | sbcast) ;;
    *) _env_say "ENV_STAGE/SITE_STAGE: '$how' is not one of yeet | copper | sbcast | none"; return 2 ;;
  esac
  if [[ -z "${AGPT_VENV:-}" ]]; then
    _env_say "staging asked for ($how), but no venv is active; skipped"
    return 0
  fi
  if declare -p SITE_STAGE_OPTS >/dev/null 2>&1; then
    opts=("${SITE_STAGE_OPTS[@]}")
  fi
  t0="$(date +%s.%N)"
  dest="$("_env_stage_$how" "${opts[@]}")" || {
    _env_stage_took "$t0"
    _env_say "staging failed; using $AGPT_VENV from the shared filesystem (SITE_STAGE=$how)"
    return 0
  }
  _env_stage_took "$t0"
  set +u
  # shellcheck source=/dev/null
  source "$dest/bin/activate"
  AGPT_VENV="$dest"
  AGPT_PYTHON="$dest/bin/python"
  AGPT_STAGED="$how"
  export AGPT_VENV AGPT_PYTHON AGPT_STAGED
}

# Usage: _env_stage_took T0 : exports AGPT_STAGE_S, the seconds since T0 (the trainer's clock event records it:
# the cold start's staging stage, `agpt failover report`).
_env_stage_took() {
  AGPT_STAGE_S="$(awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
  export AGPT_STAGE_S
}

# Each prints the staged venv's path on success.
_env_stage_yeet() {
  local home dest
  home="$(_env_home)"
  dest="${SITE_LOCAL_DIR:-/tmp}/${AGPT_VENV##*/}"
  _env_say "staging $AGPT_VENV to $dest on every node (agpt yeet)"
  # shellcheck disable=SC2086
  LAUNCH_BARE=1 LAUNCH_PPN=1 launch_run "$home/bin/agpt" yeet "$AGPT_VENV" --dest "$dest" "$@" $ENV_YEET_FLAGS >&2 || return 1
  printf '%s\n' "$dest"
}

_env_copper_view() {
  printf '%s/%s/copper_mount\n' "${SITE_LOCAL_DIR:-/tmp}" "${USER:-$(id -un)}"
}

_env_stage_copper() {
  local view
  view="$(_env_copper_view)"
  _env_say "starting Copper on every node: $ENV_COPPER_LAUNCH -v $view $*; the venv is read through $view$AGPT_VENV"
  "$ENV_COPPER_LAUNCH" "$@" -v "$view" >&2 || return 1
  printf '%s%s\n' "$view" "$AGPT_VENV"
}

_env_stage_sbcast() {
  local name tar dest
  name="${AGPT_VENV##*/}"
  dest="${SITE_LOCAL_DIR:-/tmp}"
  tar="$(mktemp "${TMPDIR:-/tmp}/agpt-stage.XXXXXX")" || return 1
  _env_say "staging $AGPT_VENV to $dest/$name on every node ($ENV_SBCAST of a tar, then one tar -x per node)"
  if ! tar -C "${AGPT_VENV%/*}" -cf "$tar" "$name" ||
    ! "$ENV_SBCAST" -pf "$@" "$tar" "$dest/$name.tar" >&2 ||
    ! LAUNCH_BARE=1 LAUNCH_PPN=1 launch_run tar -xf "$dest/$name.tar" -C "$dest" >&2; then
    rm -f -- "$tar"
    return 1
  fi
  rm -f -- "$tar"
  printf '%s/%s\n' "$dest" "$name"
}

# Usage: env_container_modules
# Globals read: AGPT_CONTAINER_IMAGE, SITE_CONTAINER, SITE_CONTAINER_MODULES
# Returns: 0; 1 when a module fails to load (env_modules' rule)
env_container_modules() {
  [[ -n "${AGPT_CONTAINER_IMAGE:-}" && "${SITE_CONTAINER:-none}" != none ]] || return 0
  declare -p SITE_CONTAINER_MODULES >/dev/null 2>&1 || return 0
  ((${#SITE_CONTAINER_MODULES[@]})) || return 0
  SITE_MODULES=("${SITE_CONTAINER_MODULES[@]}") env_modules
}

# Usage: env_ckpt_layout DIR
# Creates DIR when it does not exist yet and lays it out as SITE_CKPT_LAYOUT says, before any file is written in it
# (Lustre and DAOS give a file its layout when it is created, from its directory's):
#   (lustre OPTS...)  lfs setstripe OPTS DIR          (daos OPTS...)  daos fs set-attr --path=DIR OPTS
# An existing DIR is left as it is (its files already have their layout).
# Globals read: SITE_CKPT_LAYOUT, ENV_LFS (lfs), ENV_DAOS (daos)
# Returns: 0; 1 when the directory or its layout cannot be made (one line naming the command); 2 on an unknown kind
env_ckpt_layout() {
  local dir="$1" kind
  local -a layout=()
  [[ -d "$dir" ]] && return 0
  mkdir -p "$dir" || return 1
  declare -p SITE_CKPT_LAYOUT >/dev/null 2>&1 && layout=("${SITE_CKPT_LAYOUT[@]}")
  ((${#layout[@]})) || return 0
  kind="${layout[0]}"
  case "$kind" in
    lustre) set -- "${ENV_LFS:-lfs}" setstripe "${layout[@]:1}" "$dir" ;;
    daos) set -- "${ENV_DAOS:-daos}" fs set-attr "--path=$dir" "${layout[@]:1}" ;;
    *) _env_say "SITE_CKPT_LAYOUT: '$kind' is not lustre or daos"; return 2 ;;
  esac
  _env_say "checkpoint layout: $*"
  if ! "$@"; then
    _env_say "checkpoint layout failed: $* (SITE_CKPT_LAYOUT)"
    return 1
  fi
}

# Usage: env_setup
# The whole recipe: hook pre-env, modules (and the container's, when the job runs in an image), hook post-env,
# SITE_ENV exports, venv, staging; the toolkit's
# bin/ goes first on PATH so `agpt` is the one this job was generated for.
# Globals read: SITE_* (load the profile first with env_site_load)
# Returns: 0; the first failing step's status
env_setup() {
  local home
  home="$(_env_home)"
  env_hook pre-env || return $?
  env_modules || return $?
  env_container_modules || return $?
  env_hook post-env || return $?
  env_exports || return $?
  env_venv || return $?
  env_stage || return $?
  case ":$PATH:" in
    *":$home/bin:"*) ;;
    *) PATH="$home/bin:$PATH" ;;
  esac
  export PATH
}
