#!/usr/bin/env bats
# shellcheck disable=SC2016,SC2030,SC2031  # each test exports its own settings
# lib/launch.sh: the launcher command for the active hosts, from the site profile (PALS through a recording
# fake; MPICH hydra for real on this host).
load helpers
load joblib

local_setup() {
  unset PBS_JOBID PBS_NODEFILE SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST FAILOVER_HOSTFILE AGPT_SITE
  export FAKE_PBS_DIR="$BATS_TEST_TMPDIR/pbs"
  printf '%s\n' x4102c5s2b0n0 x4102c5s3b0n0 >"$BATS_TEST_TMPDIR/active"
}

@test "sourcing lib/launch.sh changes no caller option" {
  assert_sourcing_keeps_options launch.sh
}

@test "pals (Aurora): mpiexec -n --ppn --hostfile --cpu-bind list, site flags, then the program" {
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" AGPT_DRY_RUN=1 run_strict 'env_site_load aurora; launch_run agpt train --config "a b.yaml"'
  assert_success
  assert_output "mpiexec -n 24 --ppn 12 --hostfile $BATS_TEST_TMPDIR/active --cpu-bind list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100 --genvall agpt train --config a\\ b.yaml"
}

@test "pals: launch_run runs PALS mpiexec with exactly that argv and returns its status" {
  PATH="$FAKE_BIN:$PATH" FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" FAKE_MPIEXEC_RC=3 \
    run_strict 'env_site_load polaris; launch_run python3 train.py --x 1'
  assert_failure 3
  assert_output --partial "launch: mpiexec -n 8 --ppn 4 --hostfile"
  run cat "$FAKE_PBS_DIR/calls.log"
  assert_output "mpiexec -n 8 --ppn 4 --hostfile $BATS_TEST_TMPDIR/active --cpu-bind depth --depth=8 --env OMP_NUM_THREADS=8 python3 train.py --x 1"
}

@test "the host list is honoured: a swapped FAILOVER_HOSTFILE moves the ranks" {
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" run_strict 'env_site_load perlmutter
    launch_cmd prog
    printf "%s\n" n3 n6 >"$FAILOVER_HOSTFILE"
    launch_cmd prog'
  assert_success
  assert_line --index 0 --partial "srun --nodelist=x4102c5s2b0n0,x4102c5s3b0n0 -N 2"
  assert_line --index 1 "srun --nodelist=n3,n6 -N 2 --ntasks-per-node=4 -n 8 --kill-on-bad-exit=1 --label --cpu-bind=cores --cpus-per-task=32 --gpus-per-node=4 prog"
}

@test "without a failover host file: the allocation's hosts (PBS_NODEFILE, de-duplicated)" {
  printf '%s\n' h1 h1 h2 h2 >"$BATS_TEST_TMPDIR/nodefile"
  PBS_JOBID=1.x PBS_NODEFILE="$BATS_TEST_TMPDIR/nodefile" run_strict 'env_site_load frontier; launch_cmd prog; cat "$(launch_hostfile)"'
  assert_success
  assert_line --index 0 "srun --nodelist=h1,h2 -N 2 --ntasks-per-node=8 -n 16 --kill-on-bad-exit=1 --label --cpu-bind=threads --cpus-per-task=7 --gpus-per-task=1 --gpu-bind=closest prog"
  assert_line --index 1 h1
  assert_line --index 2 h2
}

@test "openmpi and overrides: LAUNCH_LAUNCHER, LAUNCH_PPN, LAUNCH_CPU_BIND" {
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" LAUNCH_LAUNCHER=openmpi LAUNCH_PPN=2 LAUNCH_CPU_BIND=core \
    run_strict 'env_site_load generic; launch_cmd prog'
  assert_output "mpirun -np 4 --hostfile $BATS_TEST_TMPDIR/active --map-by ppr:2:node --bind-to core prog"
}

@test "hydra (generic site): two real MPICH ranks on this host" {
  LAUNCH_PPN=2 run_strict 'env_site_load generic
    launch_run python3 -c "import os; e = os.environ; os.write(1, (\"rank %s of %s\\n\" % (e[\"PMI_RANK\"], e[\"PMI_SIZE\"])).encode())" | sort'
  assert_success
  assert_line "rank 0 of 2"
  assert_line "rank 1 of 2"
}

@test "bad input: unknown launcher is exit 2, an empty or unreadable host file is exit 1" {
  : >"$BATS_TEST_TMPDIR/empty"
  LAUNCH_LAUNCHER=mpirun2 run_strict 'env_site_load generic; launch_cmd prog'
  assert_failure 2
  assert_output --partial "unknown launcher 'mpirun2'"
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/empty" run_strict 'env_site_load generic; launch_cmd prog'
  assert_failure 1
  assert_output --partial "is empty"
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/nope" run_strict 'env_site_load generic; launch_run prog'
  assert_failure 1
  assert_output --partial "not readable"
  run_strict 'launch_cmd'
  assert_failure 2
}

@test "a lax caller (no options) gets the same command" {
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" run_lax 'env_site_load sunspot; launch_cmd prog'
  assert_success
  assert_output --partial "mpiexec -n 24 --ppn 12 --hostfile"
}

@test "agpt launch: the executable face for the failover loop (exec), --dry-run, and the cleanup-hook form" {
  PATH="$FAKE_BIN:$PATH" FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" AGPT_SITE=aurora \
    run bash -c 'LAUNCH_PPN=1 agpt launch "$AGPT_ROOT/site/aurora/hooks/cleanup.sh"'
  assert_success
  run cat "$FAKE_PBS_DIR/calls.log"
  assert_output "mpiexec -n 2 --ppn 1 --hostfile $BATS_TEST_TMPDIR/active --cpu-bind list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100 --genvall $AGPT_ROOT/site/aurora/hooks/cleanup.sh"
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" run agpt launch --site perlmutter --dry-run -- agpt train
  assert_output "srun --nodelist=x4102c5s2b0n0,x4102c5s3b0n0 -N 2 --ntasks-per-node=4 -n 8 --kill-on-bad-exit=1 --label --cpu-bind=cores --cpus-per-task=32 --gpus-per-node=4 agpt train"
  run agpt launch --site generic
  assert_failure 2
  run agpt launch --site nowhere prog
  assert_failure 2
  assert_output --partial "unknown site 'nowhere'"
}

@test "the allocation's host file is a new mktemp file: a planted symlink at the old name is not followed" {
  printf '%s\n' h1 h2 >"$BATS_TEST_TMPDIR/nodefile"
  echo precious >"$BATS_TEST_TMPDIR/victim"
  mkdir -p "$TMPDIR"
  # A link planted at the name the launcher used to write with `>`: TMPDIR/agpt-hostfile.PID.
  PBS_JOBID=1.x PBS_NODEFILE="$BATS_TEST_TMPDIR/nodefile" AGPT_DRY_RUN=1 run_strict '
    ln -s "$BATS_TEST_TMPDIR/victim" "$TMPDIR/agpt-hostfile.$$"
    env_site_load aurora; launch_run prog'
  assert_success
  [[ "$(cat "$BATS_TEST_TMPDIR/victim")" == precious ]]
}

@test "launch_run removes the host file it made, after the launcher ran and on a dry run" {
  printf '%s\n' h1 h2 >"$BATS_TEST_TMPDIR/nodefile"
  mkdir -p "$TMPDIR"
  PBS_JOBID=1.x PBS_NODEFILE="$BATS_TEST_TMPDIR/nodefile" AGPT_DRY_RUN=1 run_strict 'env_site_load aurora; launch_run prog; echo "left=[$LAUNCH_TMPFILE]"'
  assert_success
  assert_line "left=[]"
  [[ "$output" == *"--hostfile $TMPDIR/agpt-hostfile."* ]]
  run ls "$TMPDIR"
  refute_output --partial agpt-hostfile.
  PBS_JOBID=1.x PBS_NODEFILE="$BATS_TEST_TMPDIR/nodefile" LAUNCH_MPIEXEC=true run_strict 'env_site_load aurora; launch_run prog 2>/dev/null; echo rc=$?'
  assert_line rc=0
  run ls "$TMPDIR"
  refute_output --partial agpt-hostfile
  PBS_JOBID=1.x PBS_NODEFILE="$BATS_TEST_TMPDIR/nodefile" LAUNCH_MPIEXEC=false run_strict 'env_site_load aurora; launch_run prog 2>/dev/null || echo rc=$?'
  assert_line rc=1
  run ls "$TMPDIR"
  refute_output --partial agpt-hostfile
}

@test "agpt launch removes the host file it made; the failover host file is never removed" {
  printf '%s\n' h1 h2 >"$BATS_TEST_TMPDIR/nodefile"
  mkdir -p "$TMPDIR"
  PBS_JOBID=1.x PBS_NODEFILE="$BATS_TEST_TMPDIR/nodefile" LAUNCH_MPIEXEC=true run "$AGPT_ROOT/bin/agpt" launch --site aurora prog
  assert_success
  run ls "$TMPDIR"
  refute_output --partial agpt-hostfile
  FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" LAUNCH_MPIEXEC=true run "$AGPT_ROOT/bin/agpt" launch --site aurora prog
  assert_success
  [[ -f "$BATS_TEST_TMPDIR/active" ]]
}

@test "containers: each runtime's words wrap the rank command, run dir and toolkit bound, the image's python" {
  # What each site's runtime is asked (fixtures: none of these runtimes can run here; the apptainer stand-in runs
  # for real in cluster_failover.bats).  The profiles' own values: Aurora apptainer, Perlmutter shifter --module=gpu.
  export FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" AGPT_DRY_RUN=1 AGPT_RUN_DIR=/lus/run AGPT_HOME=/opt/agpt
  export AGPT_SITE_DIR="$AGPT_ROOT/site"
  export AGPT_CONTAINER_IMAGE=/lus/img/pt.sif
  run_strict 'env_site_load aurora; launch_run agpt train'
  assert_output "mpiexec -n 24 --ppn 12 --hostfile $BATS_TEST_TMPDIR/active --cpu-bind list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100 --genvall apptainer exec --bind /lus/run,/opt/agpt /lus/img/pt.sif env AGPT_PYTHON=python3 agpt train"
  run_strict 'env_site_load perlmutter; launch_run agpt train'
  assert_output "srun --nodelist=x4102c5s2b0n0,x4102c5s3b0n0 -N 2 --ntasks-per-node=4 -n 8 --kill-on-bad-exit=1 --label --cpu-bind=cores --cpus-per-task=32 --gpus-per-node=4 shifter --image=/lus/img/pt.sif --volume=/lus/run:/lus/run --volume=/opt/agpt:/opt/agpt --module=gpu env AGPT_PYTHON=python3 agpt train"
  run_strict 'env_site_load perlmutter; SITE_CONTAINER=podman-hpc SITE_CONTAINER_OPTS=(--gpu); cd /; launch_run agpt train'
  assert_output --partial " --gpus-per-node=4 podman-hpc run --rm --net host --uts host --ipc host --env-host -v /lus/run:/lus/run -v /opt/agpt:/opt/agpt -w / --gpu /lus/img/pt.sif env AGPT_PYTHON=python3 agpt train"
  run_strict 'env_site_load perlmutter; SITE_CONTAINER=pyxis SITE_CONTAINER_OPTS=(); cd /; AGPT_CONTAINER_PYTHON=/usr/bin/python3 launch_run agpt train'
  assert_output --partial " --gpus-per-node=4 --container-image=/lus/img/pt.sif --container-mounts=/lus/run:/lus/run,/opt/agpt:/opt/agpt --container-workdir=/ env AGPT_PYTHON=/usr/bin/python3 agpt train"
  # No image, SITE_CONTAINER=none, or a bare launch (staging, cleanup, the sweep): the command as it was.
  run_strict 'env_site_load aurora; LAUNCH_BARE=1 launch_run agpt yeet; AGPT_CONTAINER_IMAGE= launch_run agpt train
    SITE_CONTAINER=none launch_run agpt train'
  refute_output --partial apptainer
  assert_equal "${#lines[@]}" 3
}

@test "containers: pyxis under a launcher that is not srun, an unknown runtime: exit 2, nothing launched" {
  export FAILOVER_HOSTFILE="$BATS_TEST_TMPDIR/active" AGPT_CONTAINER_IMAGE=/img.sqsh
  run_strict 'env_site_load aurora; SITE_CONTAINER=pyxis launch_run agpt train'
  assert_failure 2
  assert_output "launch: SITE_CONTAINER=pyxis needs the srun launcher, not 'pals'"
  run_strict 'env_site_load aurora; SITE_CONTAINER=docker launch_run agpt train'
  assert_failure 2
  assert_output "launch: unknown container runtime 'docker' (none, apptainer, podman-hpc, shifter, pyxis)"
}
