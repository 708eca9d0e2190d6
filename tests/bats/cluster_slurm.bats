#!/usr/bin/env bats
# The real local Slurm cluster (tests/cluster/up): batch, srun across 6 nodes, squeue/scancel, dependencies,
# the PBS-style wrappers (qsub/qstat/qdel, spank_pbs, generate_pbs_nodefile), node failure, and a clean `down`.
# shellcheck disable=SC2016  # single-quoted job commands expand on the node, not here
load helpers
load cluster

local_setup() {
  cd "$BATS_TEST_TMPDIR" || return 1
}

# Usage: _state JOBID -> prints the job's state (PENDING, RUNNING, COMPLETED, ...).
_state() {
  scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
}

# Usage: _wait_state JOBID REGEX [SECS] -> waits until the job's state matches ^REGEX$ (default 30 s).
_wait_state() {
  local i
  for ((i = 0; i < ${3:-30} * 5; i++)); do
    [[ "$(_state "$1")" =~ ^($2)$ ]] && return 0
    sleep 0.2
  done
  echo "job $1: state $(_state "$1"), wanted $2" >&2
  return 1
}

# Usage: _wait_step JOBID.STEP [SECS] -> waits until squeue lists the step (default 30 s).
_wait_step() {
  local i
  for ((i = 0; i < ${2:-30} * 5; i++)); do
    squeue -h -s -o %i | grep -qxF "$1" && return 0
    sleep 0.2
  done
  echo "step $1 not running" >&2
  return 1
}

_job_time() {  # Usage: _job_time JOBID StartTime|EndTime -> epoch seconds
  date -d "$(scontrol show job "$1" | sed -n "s/.*[[:space:]]$2=\([^ ]*\).*/\1/p")" +%s
}

@test "up: six idle nodes and the environment a test needs" {
  assert_equal "$AGPT_CLUSTER_NODES" "n1 n2 n3 n4 n5 n6"
  assert [ -f "$SLURM_CONF" ]
  [[ "$SLURM_CONF" == "$AGPT_CLUSTER_DIR"/* ]]
  run sinfo -h -N -o '%N %t'
  assert_success
  assert_output "$(printf 'n%s idle\n' 1 2 3 4 5 6)"
  run grep -c . "$AGPT_CLUSTER_DIR/pids"
  assert_output 7
}

@test "srun -N 6 runs one task on each node (SLURMD_NODENAME)" {
  run srun -N 6 bash -c 'echo "$SLURMD_NODENAME"'
  assert_success
  assert_equal "$(sort <<<"$output" | tr '\n' ' ')" "n1 n2 n3 n4 n5 n6 "
  run srun -N 2 --ntasks-per-node=4 bash -c 'echo "$SLURMD_NODENAME"'
  assert_success
  assert_equal "${#lines[@]}" 8
}

@test "sbatch runs a script; squeue lists it; scancel cancels it" {
  printf '#!/bin/bash\n#SBATCH -N 2\nsrun bash -c %s\n' "'echo step on \$SLURMD_NODENAME'" >job.sh
  id="$(sbatch --parsable -o out.txt job.sh)"
  _wait_state "$id" COMPLETED
  assert_equal "$(sort out.txt | tr '\n' ' ')" "step on n1 step on n2 "

  id="$(sbatch --parsable -o /dev/null --wrap 'sleep 300')"
  _wait_state "$id" RUNNING
  run squeue -h -j "$id" -o '%i %T'
  assert_output "$id RUNNING"
  run scancel "$id"
  assert_success
  _wait_state "$id" CANCELLED
}

@test "sbatch --dependency=afterany:ID starts the second job after the first ends" {
  first="$(sbatch --parsable -o /dev/null --wrap 'sleep 2; echo first >>order.txt; exit 3')"
  second="$(sbatch --parsable -o /dev/null --dependency="afterany:$first" --wrap 'echo second >>order.txt')"
  run squeue -h -j "$second" -o '%r'
  assert_output Dependency
  _wait_state "$second" COMPLETED
  assert_equal "$(_state "$first")" FAILED
  assert_equal "$(tr '\n' ' ' <order.txt)" "first second "
  (( $(_job_time "$second" StartTime) >= $(_job_time "$first" EndTime) ))
}

@test "qsub: #PBS lines, PBS_JOBID from spank_pbs, PBS_NODEFILE from generate_pbs_nodefile; qstat" {
  cat >pbs.sh <<'SH'
#!/bin/bash
#PBS -N agpt_pbs
#PBS -l nodes=3
#PBS -l walltime=00:05:00
export PBS_NODEFILE="$(generate_pbs_nodefile)"
echo "jobid=$PBS_JOBID name=$PBS_JOBNAME workdir=$PBS_O_WORKDIR"
sort "$PBS_NODEFILE" | tr '\n' ' '
echo
sleep 2
SH
  id="$(qsub pbs.sh)"
  [[ "$id" =~ ^[0-9]+$ ]]
  _wait_state "$id" RUNNING
  run qstat "$id"
  assert_success
  assert_output --partial agpt_pbs
  _wait_state "$id" COMPLETED
  run cat "pbs.sh.o$id"
  assert_line "jobid=$id name=agpt_pbs workdir=$BATS_TEST_TMPDIR"
  assert_line "n1 n2 n3 "
}

@test "qsub -W depend=afterany:ID chains; qdel cancels" {
  printf '#!/bin/bash\n#PBS -l nodes=1\nsleep 2\necho "$PBS_JOBID" >>chain.txt\n' >link.sh
  a="$(qsub link.sh)"
  b="$(qsub -W depend=afterany:"$a" link.sh)"
  c="$(qsub -W depend=afterany:"$b" link.sh)"
  run squeue -h -j "$b" -o '%r'
  assert_output Dependency
  run qdel "$c"
  assert_success
  _wait_state "$c" CANCELLED
  _wait_state "$b" COMPLETED
  assert_equal "$(tr '\n' ' ' <chain.txt)" "$a $b "
}

@test "each node has its own node-local folder, keyed by its name (SITE_LOCAL_CKPT_DIR)" {
  run srun -N 6 bash -c 'echo "$SLURMD_NODENAME $SITE_LOCAL_CKPT_DIR"; touch "$SITE_LOCAL_CKPT_DIR/mine"'
  assert_success
  assert_equal "$(sort <<<"$output" | tr '\n' ' ')" \
    "$(for i in 1 2 3 4 5 6; do printf 'n%s %s/local/n%s ' "$i" "$AGPT_CLUSTER_DIR" "$i"; done)"
  for i in 1 2 3 4 5 6; do assert [ -f "$AGPT_CLUSTER_DIR/local/n$i/mine" ]; done
}

@test "node fail mid-job: srun reports 'Node failure on n3'; its memory is gone; restore brings n3 back" {
  srun -N 6 bash -c 'echo "up $SLURMD_NODENAME"; touch "$SITE_LOCAL_CKPT_DIR/held"; sleep 120' >srun.out 2>&1 &
  srun_pid=$!
  for _ in $(seq 1 100); do [[ "$(grep -c '^up ' srun.out)" == 6 ]] && break; sleep 0.1; done
  assert [ -f "$AGPT_CLUSTER_DIR/local/n3/held" ]
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" fail n3
  assert_success
  assert [ ! -e "$AGPT_CLUSTER_DIR/local/n3" ]
  assert [ -f "$AGPT_CLUSTER_DIR/local/n2/held" ]
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" state n3
  assert_output --regexp '^down'
  rc=0
  wait "$srun_pid" || rc=$?
  (( rc != 0 ))
  run cat srun.out
  assert_line "srun: error: Node failure on n3"
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" restore n3
  assert_success
  run ls -A "$AGPT_CLUSTER_DIR/local/n3"
  assert_output ""
  run srun -N 6 bash -c 'echo "$SLURMD_NODENAME"'
  assert_success
  assert_equal "${#lines[@]}" 6
}

@test "node fail --detect: slurmctld notices a dead slurmd by itself (SlurmdTimeout)" {
  srun -N 2 -w n5,n6 bash -c 'echo "up $SLURMD_NODENAME"; sleep 120' >srun.out 2>&1 &
  srun_pid=$!
  for _ in $(seq 1 100); do [[ "$(grep -c '^up ' srun.out)" == 2 ]] && break; sleep 0.1; done
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" fail --detect n6
  assert_success
  wait "$srun_pid" || true
  run cat srun.out
  assert_line "srun: error: Node failure on n6"
  run grep -c 'Nodes n6 not responding, setting DOWN' "$AGPT_CLUSTER_DIR/log/slurmctld.log"
  assert_output 1
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" restore n6
  assert_success
}

@test "node fail under sbatch: a plain job ends NODE_FAIL (no requeue); --no-kill keeps running on the rest" {
  printf '#!/bin/bash\nsrun bash -c "sleep 120"\necho "step rc=$?"\nsrun -N 2 -w n1,n2 bash -c %s\n' \
    "'echo after \$SLURMD_NODENAME'" >nk.sh
  plain="$(sbatch --parsable -N 2 -w n3,n4 -o plain.out --wrap 'srun sleep 120')"
  kept="$(sbatch --parsable --no-kill -N 3 -w n1,n2,n4 -o kept.out nk.sh)"
  _wait_step "$plain.0"
  _wait_step "$kept.0"
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" fail n4
  assert_success
  _wait_state "$plain" NODE_FAIL
  _wait_state "$kept" COMPLETED
  run cat kept.out
  assert_line "srun: error: Node failure on n4"
  assert_line --regexp '^step rc=[1-9]'
  assert_equal "$(grep '^after ' kept.out | sort | tr '\n' ' ')" "after n1 after n2 "
  run "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" restore n4
  assert_success
}

@test "down stops exactly what up started (by pid), also with a job running; idempotent" {
  dir="$BATS_TEST_TMPDIR/small"
  run --separate-stderr "$AGPT_ROOT/tests/cluster/up" --dir "$dir" --nodes 2
  assert_success
  assert_line "export AGPT_CLUSTER_NODES=n1\\ n2"
  SLURM_CONF="$dir/slurm.conf" sbatch -N 2 -o /dev/null --wrap 'srun sleep 300' >/dev/null
  source "$AGPT_ROOT/tests/cluster/lib.sh"
  for _ in $(seq 1 50); do [[ "$(cluster_stepds "$dir" | wc -l)" -ge 3 ]] && break; sleep 0.2; done
  mapfile -t pids < <(awk '{print $2}' "$dir/pids"; cluster_daemons "$dir")
  run grep -c slurmscriptd < <(for p in "${pids[@]}"; do cat "/proc/$p/comm"; done)
  assert_output 1
  mapfile -t stepds < <(cluster_stepds "$dir")
  mapfile -t -O "${#pids[@]}" pids < <(cluster_tree "${stepds[@]}")
  (( ${#pids[@]} >= 3 + 3 + 3 ))
  run "$AGPT_ROOT/tests/cluster/down" --dir "$dir"
  assert_success
  for p in "${pids[@]}"; do
    if _cluster_running "$p"; then echo "pid $p still running: $(tr '\0' ' ' <"/proc/$p/cmdline")"; false; fi
  done
  run "$AGPT_ROOT/tests/cluster/down" --dir "$dir"
  assert_success
  run "$AGPT_ROOT/tests/cluster/down" --dir "$BATS_TEST_TMPDIR/nothing-here"
  assert_success
}

@test "up/down/node: bad input exits 2 with one line naming the flag" {
  local stderr
  run --separate-stderr "$AGPT_ROOT/tests/cluster/up"
  assert_failure 2
  [[ "$stderr" == *--dir* ]]
  run --separate-stderr "$AGPT_ROOT/tests/cluster/up" --dir "$BATS_TEST_TMPDIR/x" --nodes zero
  assert_failure 2
  [[ "$stderr" == *--nodes* ]]
  run --separate-stderr "$AGPT_ROOT/tests/cluster/node" --dir "$AGPT_CLUSTER_DIR" fail n9
  assert_failure 2
  [[ "$stderr" == *n9* ]]
}

@test "up: a daemon that cannot start fails fast, names it with the logs' tails, and leaves nothing running" {
  mkdir -p bin
  printf '#!/bin/sh\necho "slurmd: cannot start here" >&2\nexit 1\n' >bin/slurmd
  chmod +x bin/slurmd
  dir="$BATS_TEST_TMPDIR/broken"
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" run --separate-stderr "$AGPT_ROOT/tests/cluster/up" --dir "$dir" --nodes 2
  assert_failure 1
  assert_output ""
  [[ "$stderr" == *"up: slurmd:n1 (pid "*") exited during start-up"* ]]
  [[ "$stderr" == *"slurmd: cannot start here"* ]]
  source "$AGPT_ROOT/tests/cluster/lib.sh"
  assert_equal "$(cluster_daemons "$dir")" ""
}
