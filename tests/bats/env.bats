#!/usr/bin/env bats
# shellcheck disable=SC2016
# lib/env.sh: site profile loading, hooks, module loads, SITE_ENV, the venv recipe and staging.
load helpers
load joblib

local_setup() {
  unset AGPT_SITE CONDA_PREFIX VIRTUAL_ENV AGPT_VENV ENV_VENV_NAME SITE_VENV_DIR
  # A private site collection: a copy of the shipped sites plus a test site whose hooks and modules record.
  export AGPT_SITE_DIR="$BATS_TEST_TMPDIR/site"
  mkdir -p "$AGPT_SITE_DIR"
  cp -r "$AGPT_ROOT"/site/* "$AGPT_SITE_DIR"/
  mkdir -p "$AGPT_SITE_DIR/lab/hooks"
  sed -e 's/^SITE_NAME=.*/SITE_NAME=lab/' -e "s/^SITE_HOSTNAME_RE=.*/SITE_HOSTNAME_RE='^lab-[0-9]+$'/" -e 's/^SITE_MODULES=.*/SITE_MODULES=(gcc\/12 frameworks\/2025.0)/' \
    -e 's/^SITE_ENV=.*/SITE_ENV=("CCL_KVS_MODE=mpi" "NCCL_NET=AWS Libfabric")/' \
    "$AGPT_ROOT/site/generic/profile.sh" >"$AGPT_SITE_DIR/lab/profile.sh"
  echo 'echo "pre-env $UNSET_IN_HOOK" >>"$BATS_TEST_TMPDIR/trace"' >"$AGPT_SITE_DIR/lab/hooks/pre-env.sh"
  echo 'echo "post-env" >>"$BATS_TEST_TMPDIR/trace"' >"$AGPT_SITE_DIR/lab/hooks/post-env.sh"
  # `module` as Lmod defines it: a shell function; this one records and, like many module scripts,
  # reads variables that may be unset.
  export MODULE_FN='module() { echo "module $* $MODULE_UNSET_VAR" >>"$BATS_TEST_TMPDIR/trace"; [[ "$2" != broken ]]; }'
}

@test "sourcing lib/env.sh changes no caller option" {
  assert_sourcing_keeps_options env.sh
}

@test "env_site_load: the profile's keys; AGPT_SITE exported" {
  run_strict 'env_site_load aurora; echo "$SITE_LAUNCHER ${SITE_MODULES[*]} ${#SITE_ENV[@]}"; bash -c "echo \$AGPT_SITE"'
  assert_success
  assert_line "pals frameworks copper 21"
  assert_line aurora
}

@test "env_site_load: an unknown site lists the known ones, exit 2" {
  run_strict 'env_site_load auroa'
  assert_failure 2
  assert_output "env: unknown site 'auroa' (known: aurora, frontier, generic, lab, perlmutter, polaris, sunspot)"
}

@test "env_site_detect: AGPT_SITE wins; this host is generic" {
  AGPT_SITE=polaris run_strict 'env_site_detect'
  assert_output polaris
  run_strict 'env_site_detect'
  assert_output generic
}

@test "env_setup in a strict caller: hooks around modules, SITE_ENV exported, options unchanged" {
  run_strict "$MODULE_FN"'
    before="$(set +o)"
    env_site_load lab
    env_setup
    [[ "$(set +o)" == "$before" ]] && echo options-kept
    bash -c "echo \$CCL_KVS_MODE/\$NCCL_NET"
    [[ "$PATH" == "$AGPT_ROOT/bin:"* ]] && echo bin-first'
  assert_success
  assert_line options-kept
  assert_line "mpi/AWS Libfabric"
  assert_line bin-first
  run cat "$BATS_TEST_TMPDIR/trace"
  assert_output $'pre-env \nmodule load gcc/12 \nmodule load frameworks/2025.0 \npost-env'
}

@test "env_modules: a failing module load stops with 1 and names it; no module command is 1" {
  sed -i 's/^SITE_MODULES=.*/SITE_MODULES=(gcc broken)/' "$AGPT_SITE_DIR/lab/profile.sh"
  run_strict "$MODULE_FN"'; env_site_load lab; env_modules'
  assert_failure 1
  assert_output --partial "module load broken failed"
  run_strict 'env_site_load lab; env_modules'
  assert_failure 1
  assert_output --partial "there is no 'module' command here"
}

@test "env_exports: an entry that is not KEY=VALUE is exit 2" {
  run_strict 'SITE_ENV=("OK=1" "oops"); env_exports'
  assert_failure 2
  assert_output --partial "'oops' is not KEY=VALUE"
}

@test "env_exports: the profile's SITE_PEAK_TFLOPS reaches the trainer's environment" {
  run_strict 'SITE_ENV=("OK=1"); SITE_PEAK_TFLOPS=419.5; env_exports; bash -c "echo peak=\$SITE_PEAK_TFLOPS ok=\$OK"'
  assert_success
  assert_output "peak=419.5 ok=1"
}

@test "env_venv_name: one venv per framework release" {
  run_strict '
    CONDA_PREFIX=/opt/aurora/24.347.0/frameworks/aurora_nre_models_frameworks-2025.0.0 env_venv_name
    CONDA_PREFIX=/soft/applications/conda/2024-04-29/mconda3 env_venv_name
    SITE_MODULES=(PrgEnv-gnu pytorch/2.6.0); env_venv_name
    SITE_MODULES=(); SITE_PYTHON=python3; env_venv_name
    ENV_VENV_NAME=mine env_venv_name'
  assert_success
  assert_line --index 0 agpt-aurora_nre_models_frameworks-2025.0.0
  assert_line --index 1 agpt-2024-04-29
  assert_line --index 2 agpt-pytorch-2.6.0
  assert_line --index 3 --regexp '^agpt-python3\.[0-9]+$'
  assert_line --index 4 mine
}

@test "env_venv: created with --system-site-packages, activated, then reused" {
  run_strict '
    env_site_load generic
    SITE_VENV_DIR="$BATS_TEST_TMPDIR/venvs"; ENV_VENV_NAME=agpt-test
    env_venv
    echo "active=$VIRTUAL_ENV py=$AGPT_PYTHON"
    python -c "import sys; print(sys.prefix)"
    env_venv'
  assert_success
  v="$BATS_TEST_TMPDIR/venvs/agpt-test"
  assert_line --partial "creating venv $v (--system-site-packages"
  assert_line "active=$v py=$v/bin/python"
  assert_line "$v"
  assert_line "env: reusing venv $v"
  run grep -c 'include-system-site-packages = true' "$v/pyvenv.cfg"
  assert_output 1
}

@test "env_venv: empty SITE_VENV_DIR keeps the current python" {
  run_strict 'env_site_load generic; env_venv; echo "[${VIRTUAL_ENV:-none}]"'
  assert_success
  assert_line --partial "SITE_VENV_DIR is empty: using the current python"
  assert_line "[none]"
}

@test "env_stage: agpt yeet copies the venv node-locally, one rank per node, and the copy is activated" {
  home="$BATS_TEST_TMPDIR/home-agpt"
  mkdir -p "$home/bin" "$BATS_TEST_TMPDIR/shared/agpt-x/bin" "$BATS_TEST_TMPDIR/local"
  echo 'VIRTUAL_ENV=$AGPT_TEST_STAGED' >"$BATS_TEST_TMPDIR/shared/agpt-x/bin/activate"
  cat >"$home/bin/agpt" <<'SH'
#!/usr/bin/env bash
echo "agpt $* rank=${PMI_RANK:-?}" >>"$BATS_TEST_TMPDIR/trace"
[[ "$1" == yeet ]] && cp -r "$2" "$4"
SH
  chmod +x "$home/bin/agpt"
  AGPT_HOME="$home" run_strict '
    env_site_load generic
    SITE_LOCAL_DIR="$BATS_TEST_TMPDIR/local"; ENV_STAGE=yeet
    AGPT_VENV="$BATS_TEST_TMPDIR/shared/agpt-x"
    export AGPT_TEST_STAGED=staged
    env_stage
    echo "venv=$AGPT_VENV active=$VIRTUAL_ENV"
    echo "took=$AGPT_STAGE_S"'
  assert_success
  assert_line "venv=$BATS_TEST_TMPDIR/local/agpt-x active=staged"
  assert_line --regexp "^took=[0-9]+\.[0-9]$"  # the cold start's staging stage (the trainer's clock records it)
  run cat "$BATS_TEST_TMPDIR/trace"
  assert_output "agpt yeet $BATS_TEST_TMPDIR/shared/agpt-x --dest $BATS_TEST_TMPDIR/local/agpt-x rank=0"
}

@test "env_stage: when yeet fails the job keeps the shared venv" {
  home="$BATS_TEST_TMPDIR/home-agpt"
  mkdir -p "$home/bin"
  printf '#!/bin/sh\nexit 1\n' >"$home/bin/agpt"
  chmod +x "$home/bin/agpt"
  AGPT_HOME="$home" run_strict '
    env_site_load generic; SITE_STAGE=yeet; AGPT_VENV=/shared/venv
    env_stage; echo "venv=$AGPT_VENV"'
  assert_success
  assert_line --partial "staging failed; using /shared/venv"
  assert_line "venv=/shared/venv"
}

@test "env_venv: uv is used when present (uv venv --system-site-packages --python PY)" {
  mkdir -p "$BATS_TEST_TMPDIR/bin"
  cat >"$BATS_TEST_TMPDIR/bin/uv" <<'SH'
#!/usr/bin/env bash
echo "uv $*" >>"$BATS_TEST_TMPDIR/trace"
exec python3 -m venv --system-site-packages --without-pip "${@: -1}"
SH
  chmod +x "$BATS_TEST_TMPDIR/bin/uv"
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" run_strict '
    env_site_load generic
    SITE_VENV_DIR="$BATS_TEST_TMPDIR/venvs"; ENV_VENV_NAME=agpt-uv
    env_venv; echo "active=$VIRTUAL_ENV"'
  assert_success
  assert_line "active=$BATS_TEST_TMPDIR/venvs/agpt-uv"
  run cat "$BATS_TEST_TMPDIR/trace"
  assert_output --regexp "^uv venv -q --system-site-packages --python /.*python3 $BATS_TEST_TMPDIR/venvs/agpt-uv$"
}

@test "env_stage: copper starts launch_copper.sh with its view and the venv is read through it" {
  mkdir -p "$BATS_TEST_TMPDIR/bin" "$BATS_TEST_TMPDIR/local/u/copper_mount/shared/agpt-x/bin"
  echo 'VIRTUAL_ENV=$AGPT_TEST_STAGED' >"$BATS_TEST_TMPDIR/local/u/copper_mount/shared/agpt-x/bin/activate"
  printf '#!/bin/sh\necho "launch_copper.sh $*" >>"$BATS_TEST_TMPDIR/trace"\n' >"$BATS_TEST_TMPDIR/bin/launch_copper.sh"
  chmod +x "$BATS_TEST_TMPDIR/bin/launch_copper.sh"
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" USER=u run_strict '
    env_site_load generic
    SITE_LOCAL_DIR="$BATS_TEST_TMPDIR/local"; SITE_STAGE=copper; SITE_STAGE_OPTS=(-l 0)
    AGPT_VENV=/shared/agpt-x; export AGPT_TEST_STAGED=through-copper
    env_stage
    echo "venv=$AGPT_VENV staged=$AGPT_STAGED active=$VIRTUAL_ENV"'
  assert_success
  assert_line "venv=$BATS_TEST_TMPDIR/local/u/copper_mount/shared/agpt-x staged=copper active=through-copper"
  run cat "$BATS_TEST_TMPDIR/trace"
  assert_output "launch_copper.sh -l 0 -v $BATS_TEST_TMPDIR/local/u/copper_mount"
}

@test "env_stage: sbcast broadcasts a tar of the venv, one tar -x per node, the copy is activated" {
  mkdir -p "$BATS_TEST_TMPDIR/bin" "$BATS_TEST_TMPDIR/shared/agpt-x/bin" "$BATS_TEST_TMPDIR/local"
  echo 'VIRTUAL_ENV=$AGPT_TEST_STAGED' >"$BATS_TEST_TMPDIR/shared/agpt-x/bin/activate"
  # sbcast -pf SRC DEST: a copy here (one node); the unpack goes through the site launcher (hydra, one rank per node)
  printf '#!/bin/sh\necho "sbcast $*" >>"$BATS_TEST_TMPDIR/trace"\ncp "$2" "$3"\n' \
    >"$BATS_TEST_TMPDIR/bin/sbcast"
  chmod +x "$BATS_TEST_TMPDIR/bin/sbcast"
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" run_strict '
    env_site_load generic
    SITE_LOCAL_DIR="$BATS_TEST_TMPDIR/local"; SITE_STAGE=sbcast
    AGPT_VENV="$BATS_TEST_TMPDIR/shared/agpt-x"; export AGPT_TEST_STAGED=from-nvme
    env_stage
    echo "venv=$AGPT_VENV active=$VIRTUAL_ENV"'
  assert_success
  assert_line "venv=$BATS_TEST_TMPDIR/local/agpt-x active=from-nvme"
  run cat "$BATS_TEST_TMPDIR/trace"
  assert_output --regexp "^sbcast -pf [^ ]+/agpt-stage\.[A-Za-z0-9]+ $BATS_TEST_TMPDIR/local/agpt-x\.tar$"
}

@test "env_stage: an unknown method is exit 2 naming the allowed ones" {
  run_strict 'env_site_load generic; AGPT_VENV=/v; ENV_STAGE=rsync env_stage'
  assert_failure 2
  assert_output --partial "ENV_STAGE/SITE_STAGE: 'rsync' is not one of yeet | copper | sbcast | none"
}

@test "env_ckpt_layout: a new checkpoint directory gets lfs setstripe / daos fs set-attr; an existing one is left" {
  mkdir -p "$BATS_TEST_TMPDIR/bin"
  for t in lfs daos; do
    printf '#!/bin/sh\necho "%s $*" >>"$BATS_TEST_TMPDIR/trace"\n' "$t" >"$BATS_TEST_TMPDIR/bin/$t"
    chmod +x "$BATS_TEST_TMPDIR/bin/$t"
  done
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" run_strict '
    env_site_load perlmutter
    env_ckpt_layout "$BATS_TEST_TMPDIR/a/ckpt"
    env_ckpt_layout "$BATS_TEST_TMPDIR/a/ckpt"
    SITE_CKPT_LAYOUT=(daos --oclass=EC_16P3GX); env_ckpt_layout "$BATS_TEST_TMPDIR/b/ckpt"
    SITE_CKPT_LAYOUT=(); env_ckpt_layout "$BATS_TEST_TMPDIR/c/ckpt"; [[ -d "$BATS_TEST_TMPDIR/c/ckpt" ]]'
  assert_success
  run cat "$BATS_TEST_TMPDIR/trace"
  assert_output "lfs setstripe -E 1G -c 1 -E 10G -c 8 -E 100G -c 24 -E -1 -c 72 $BATS_TEST_TMPDIR/a/ckpt
daos fs set-attr --path=$BATS_TEST_TMPDIR/b/ckpt --oclass=EC_16P3GX"
}
