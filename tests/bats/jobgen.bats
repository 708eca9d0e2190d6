#!/usr/bin/env bats
# shellcheck disable=SC2016
# agpt jobgen: the committed job scripts equal a fresh generation (`--no-check`: configs that only exercise the
# job section, not meant to train); every site value is marked; bad configs
# are exit 2 naming the field; a generated script runs end to end on this host (no scheduler).
# The suite runs this file under BASH_ENV with `set -u` (it loads joblib): every bash it starts has `set -u`.
load helpers
load joblib

# committed file -> site scheduler config (regenerate: agpt jobgen --site S --scheduler X --portable -o FILE CONFIG)
GOLDEN=(
  "jobs/agpt_2b.pbs aurora pbs jobs/configs/2b.yaml"
  "jobs/agpt_20b.pbs aurora pbs jobs/configs/20b.yaml"
  "jobs/agpt_80b.pbs aurora pbs jobs/configs/80b.yaml"
  "jobs/smoke.pbs aurora pbs jobs/configs/smoke.yaml"
  "jobs/agpt_2b.slurm perlmutter slurm jobs/configs/2b.yaml"
  "jobs/agpt_20b.slurm perlmutter slurm jobs/configs/20b.yaml"
  "jobs/agpt_80b.slurm perlmutter slurm jobs/configs/80b.yaml"
  "jobs/smoke.slurm perlmutter slurm jobs/configs/smoke.yaml"
  "jobs/agpt_eval_20b.pbs aurora pbs jobs/configs/eval_20b.yaml"
  "jobs/agpt_eval_20b.slurm perlmutter slurm jobs/configs/eval_20b.yaml"
)

conf() {  # conf NAME YAML-BODY: a config file holding only a job: section
  printf '%s\n' "$2" >"$BATS_TEST_TMPDIR/$1.yaml"
  echo "$BATS_TEST_TMPDIR/$1.yaml"
}

@test "sourcing lib/jobgen.sh changes no caller option" {
  assert_sourcing_keeps_options jobgen.sh
}

@test "golden: every committed job script equals a fresh generation" {
  cd "$AGPT_ROOT"
  # --no-check: the check does not change the script; that each committed script's config passes `agpt check` at
  # its launch size is tests/python/test_check.py::test_every_committed_job_script_can_train_at_its_launch_size.
  for row in "${GOLDEN[@]}"; do
    read -r file site sched config <<<"$row"
    run agpt jobgen --site "$site" --scheduler "$sched" --portable --no-check --job-script "$file" -o "$BATS_TEST_TMPDIR/fresh" "$config"
    assert_success
    run diff -u "$file" "$BATS_TEST_TMPDIR/fresh"
    if ((status)); then
      echo "$file is stale; regenerate: agpt jobgen --site $site --scheduler $sched --portable -o $file $config"
    fi
    assert_success
  done
}

@test "every scheduler directive says where its value comes from (SITE_*, job.*, or EDIT)" {
  cd "$AGPT_ROOT"
  for f in jobs/*.pbs jobs/*.slurm; do
    prev=""
    while IFS= read -r line; do
      case "$line" in
        "#PBS -N "* | "#SBATCH --job-name="* | "#SBATCH --output="*) ;;
        "#PBS "* | "#SBATCH "*)
          [[ "$prev" =~ (SITE_[A-Z_]+|job\.[a-z_]+|EDIT) ]] || { echo "$f: unmarked: $line"; return 1; } ;;
      esac
      [[ "$line" == "# "* ]] && prev="$line"
    done <"$f"
  done
  run grep -c '^# EDIT' jobs/agpt_20b.pbs
  assert_output 1
}

@test "the PBS script: select = nodes + spares, walltime, queue, filesystems, directives, afterany chain" {
  cd "$AGPT_ROOT"
  run cat jobs/agpt_20b.pbs
  assert_line "#PBS -l select=36"
  assert_line "#PBS -l walltime=06:00:00"
  assert_line "#PBS -q prod"
  assert_line "#PBS -l filesystems=flare:home"
  assert_line "#PBS -l place=scatter"
  assert_line "export FAILOVER_SPARES=4"
  assert_line 'chain_start "$AGPT_JOB_SCRIPT"'
  assert_line '  failover_run agpt launch agpt train --config "$AGPT_CONFIG" --run-dir "$AGPT_RUN_DIR" || rc=$?'
  assert_line 'chain_end "$rc"'
  assert_line "export FAILOVER_CLEANUP_HOOK='LAUNCH_BARE=1 LAUNCH_PPN=1 agpt launch \"\$AGPT_HOME/site/aurora/hooks/cleanup.sh\"'"
  run cat jobs/agpt_80b.slurm
  refute_line --partial "FAILOVER_CLEANUP_HOOK"
  assert_line "#SBATCH --nodes=262"
  assert_line "#SBATCH --time=12:00:00"
  assert_line "#SBATCH --constraint=gpu"
  assert_line "#SBATCH --licenses=scratch"
}

@test "without --portable the toolkit and config paths are embedded (a spool copy cannot find them)" {
  cd "$BATS_TEST_TMPDIR"
  printf 'model: {dim: 64}\njob: {walltime: "00:01:00", account: ""}\n' >tiny.yaml
  run agpt jobgen --site polaris --scheduler pbs --no-check -o my.pbs tiny.yaml
  assert_success
  run cat my.pbs
  assert_line "[[ -n \"\${AGPT_HOME:-}\" ]] || AGPT_HOME=$AGPT_ROOT"
  assert_line "export AGPT_HOME"
  assert_line "export AGPT_CONFIG=$BATS_TEST_TMPDIR/tiny.yaml"
  assert_line "export AGPT_JOB_SCRIPT=$BATS_TEST_TMPDIR/my.pbs"
  assert_line "#PBS -l walltime=00:01:00"
  refute_line --partial "#PBS -A"
  [[ -x my.pbs ]]
  run agpt jobgen --site polaris --scheduler pbs --no-check tiny.yaml
  assert_line --partial "# EDIT: this script's path"
}

@test "walltimes: D-HH:MM:SS for Slurm, hours past 24 for PBS; unquoted HH:MM:SS (not base 60); minutes" {
  c="$(conf long 'job: {nodes: 100, walltime: "1-12:00:00"}')"
  run agpt jobgen --site frontier --scheduler slurm --no-check "$c"
  assert_line "#SBATCH --time=1-12:00:00"
  assert_line "#SBATCH --nodes=102"
  assert_line "#SBATCH --partition=batch"
  run agpt jobgen --site aurora --scheduler pbs --no-check "$c"
  assert_line "#PBS -l walltime=36:00:00"
  c="$(conf unquoted 'job: {walltime: 06:00:00}')"
  run agpt jobgen --site aurora --scheduler pbs --no-check "$c"
  assert_line "#PBS -l walltime=06:00:00"
  c="$(conf mins 'job: {walltime: 90, queue: debug, account: proj1, spares: 0, filesystems: home}')"
  run agpt jobgen --site sunspot --no-check "$c"
  assert_line "#PBS -l walltime=01:30:00"
  assert_line "#PBS -q debug"
  assert_line "#PBS -A proj1"
  assert_line "#PBS -l filesystems=home"
  assert_line "#PBS -l select=1"
}

@test "command, env, launcher and failover/chain switches are rendered" {
  c="$(conf cmd 'job:
  command: ["python3", "train.py", "--cfg={config}", "--out", "{run_dir}/x y", "--hosts", "{hostfile}"]
  failover: false
  chain: false
  launcher: srun
  ranks_per_node: 2
  env: {FAKE_TRAINER_FAULTS: "die@5:n2", FAILOVER_MIN_ATTEMPT_S: 5}')"
  run agpt jobgen --site generic --scheduler slurm "$c"
  assert_success
  assert_line 'launch_run python3 train.py "--cfg=$AGPT_CONFIG" --out "$AGPT_RUN_DIR/x y" --hosts {hostfile} || rc=$?'
  assert_line "export LAUNCH_LAUNCHER=srun  # job.launcher"
  assert_line "export LAUNCH_PPN=2  # job.ranks_per_node"
  assert_line "export FAKE_TRAINER_FAULTS=die@5:n2"
  refute_line --partial "chain_start"
  refute_line --partial "failover_run"
  refute_line "#SBATCH --no-kill"
}

@test "a Slurm job under failover keeps its allocation when a node dies (--no-kill)" {
  c="$(conf nk 'job:
  nodes: 4
  spares: 2')"
  run agpt jobgen --site generic --scheduler slurm --no-check "$c"
  assert_success
  assert_line "#SBATCH --no-kill"
  run agpt jobgen --site generic --scheduler pbs --no-check "$c"
  refute_line --partial "no-kill"
}

# refused NAME YAML-BODY: jobgen for Aurora refuses the config with exit 2; its one line is in $output.
refused() {
  c="$(conf "$1" "$2")"
  run agpt jobgen --site aurora "$c"
  assert_failure 2
}

@test "bad config: unknown key, nodes <= 0, spares < 0, walltime that does not parse: exit 2 naming the field" {
  refused a 'job: {nodse: 2}'
  assert_output "agpt jobgen: $c: job.nodse: unknown key (did you mean nodes?)"
  refused b 'job: {nodes: 0}'
  assert_output "agpt jobgen: $c: job.nodes: must be a whole number from 1 to 100000, got 0"
  refused c 'job: {nodes: 2, spares: -1}'
  assert_output "agpt jobgen: $c: job.spares: must be a whole number from 0 to 100000, got -1"
  refused d 'job: {walltime: 6h}'
  assert_output --partial "$c: job.walltime: '6h' does not parse"
  refused e 'job: {walltime: "01:75:00"}'
  refused f 'job: [1, 2'
  assert_output --partial "not valid YAML"
}

@test "bad flags: unknown site lists the known ones; bad scheduler; no config" {
  run agpt jobgen --site auroa "$AGPT_ROOT/jobs/configs/tiny.yaml"
  assert_failure 2
  assert_output "agpt jobgen: --site: unknown site 'auroa' (known: aurora, frontier, generic, perlmutter, polaris, sunspot)"
  run agpt jobgen --site aurora --scheduler lsf "$AGPT_ROOT/jobs/configs/tiny.yaml"
  assert_failure 2
  assert_output "agpt jobgen: --scheduler: 'lsf' is not pbs or slurm"
  run agpt jobgen --site generic "$AGPT_ROOT/jobs/configs/tiny.yaml"
  assert_failure 2
  assert_output --partial "site generic has no scheduler"
  run agpt jobgen --site aurora
  assert_failure 2
  run agpt jobgen --site aurora /nope.yaml
  assert_output "agpt jobgen: /nope.yaml: no such config"
  run agpt jobgen --keys
  assert_success
  assert_line --partial "walltime"
}

@test "a generated script runs end to end here: failover loop, hydra launch, the trainer finishes" {
  c="$(conf local "job:
  nodes: 1
  spares: 0
  account: ''
  run_dir: $BATS_TEST_TMPDIR/run
  command: [python3, $AGPT_ROOT/tests/fixtures/fake_trainer.py, --steps, '6', --step-time, '0.05', --ckpt-interval, '3']
  env: {FAILOVER_BACKOFF: '0'}")"
  run agpt jobgen --site generic --scheduler slurm -o "$BATS_TEST_TMPDIR/job.sh" "$c"
  assert_success
  cd "$BATS_TEST_TMPDIR"
  run env -u SLURM_JOB_ID -u PBS_JOBID bash job.sh
  assert_success
  assert_output --partial "fake_trainer: done at step 6"
  assert_output --partial "chain: not chaining (not in a batch job)"
  [[ -f run/ckpt/step-6/.complete && -s run/events.jsonl && -s run/hosts/active ]]
}

@test "staging, container and checkpoint layout: the profile's choices named, the image exported, the layout applied" {
  cfg="$(conf img 'job:
  nodes: 2
  container_image: /lus/img/pt 1.sif')"
  run agpt jobgen --site perlmutter --scheduler slurm --no-check "$cfg"
  assert_success
  assert_line "# Staging (SITE_STAGE=yeet, in env_setup): agpt yeet copies the venv to SITE_LOCAL_DIR on every node."
  assert_line 'export AGPT_CONTAINER_IMAGE=/lus/img/pt\ 1.sif  # job.container_image'
  assert_line "[[ -v FAILOVER_SWEEP_LAUNCH ]] || export FAILOVER_SWEEP_LAUNCH='env LAUNCH_BARE=1 agpt launch'"
  assert_line "# Checkpoint layout (SITE_CKPT_LAYOUT=(lustre -E 1G -c 1 -E 10G -c 8 -E 100G -c 24 -E -1 -c 72)): set on \$AGPT_RUN_DIR/ckpt when it is created."
  assert_line 'env_ckpt_layout "$AGPT_RUN_DIR/ckpt"'
  run agpt jobgen --site aurora --scheduler pbs --no-check "$cfg"
  assert_line "# Staging (SITE_STAGE=copper, in env_setup): launch_copper.sh: a read-only FUSE cache (Copper) of the venv on every node."
  assert_line --partial "# Container (SITE_CONTAINER=apptainer): every rank runs in this image"
  run agpt jobgen --site frontier --scheduler slurm --no-check jobs/configs/20b.yaml
  assert_line "# Staging (SITE_STAGE=sbcast, in env_setup): sbcast of a tar of the venv to SITE_LOCAL_DIR on every node."
  assert_line "# Container (SITE_CONTAINER=apptainer): no image (job.container_image): ranks run on the host."
  assert_line "#SBATCH --network=disable_rdzv_get"
  refute_line --partial AGPT_CONTAINER_IMAGE
}

@test "job.container_image: a control character is exit 2 naming the key" {
  cfg="$(conf bad "$(printf 'job:\n  container_image: "/img\\nrm -rf x"')")"
  run agpt jobgen --site perlmutter --scheduler slurm --no-check "$cfg"
  assert_failure 2
  assert_output --partial "job.container_image: holds the control character"
}
