#!/usr/bin/env bats
# shellcheck disable=SC2016
# lib/sched.sh: scheduler detection, host lists, deadlines, submit/cancel/exclude (PBS through recording fakes).
load helpers
load joblib

local_setup() {
  unset PBS_JOBID PBS_NODEFILE SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST SLURM_JOB_END_TIME SCHED_KIND
  export FAKE_PBS_DIR="$BATS_TEST_TMPDIR/pbs"
}

@test "sourcing lib/sched.sh changes no caller option, in a strict caller and a lax one" {
  assert_sourcing_keeps_options sched.sh
}

expand() {
  run_strict "sched_expand_nodelist '$1' | paste -sd' '"
  assert_success
  assert_output "$2"
}

@test "nodelist: Perlmutter nid ranges with zero padding and a single" {
  expand 'nid[001232-001235,001240]' 'nid001232 nid001233 nid001234 nid001235 nid001240'
}

@test "nodelist: a plain host name and a plain list" {
  expand 'nid001232' 'nid001232'
  expand 'n1,n2,n3' 'n1 n2 n3'
}

@test "nodelist: a range followed by another prefix (n[1-3],m5)" {
  expand 'n[1-3],m5' 'n1 n2 n3 m5'
}

@test "nodelist: HPE Cray xname with a bracket in the middle (Aurora/Polaris style)" {
  expand 'x1000c0s[0-1]b0n0' 'x1000c0s0b0n0 x1000c0s1b0n0'
}

@test "nodelist: several bracket groups expand in Slurm's order" {
  expand 'x1000c[0-1]s[3,5]b0n0' 'x1000c0s3b0n0 x1000c0s5b0n0 x1000c1s3b0n0 x1000c1s5b0n0'
}

@test "nodelist: Frontier five-digit padding" {
  expand 'frontier[00098-00101]' 'frontier00098 frontier00099 frontier00100 frontier00101'
}

@test "nodelist: unpadded range across a digit boundary (node[8-11])" {
  expand 'node[8-11]' 'node8 node9 node10 node11'
}

@test "nodelist: padded range across a digit boundary (n[08-10])" {
  expand 'n[08-10]' 'n08 n09 n10'
}

@test "nodelist: hyphens in the prefix and a suffix after the bracket" {
  expand 'gpu-a100-[01-02]-hsn0' 'gpu-a100-01-hsn0 gpu-a100-02-hsn0'
}

@test "nodelist: a mixed list of ranges, singles and prefixes" {
  expand 'nid[001232-001233],nid001240,login[01-02]' 'nid001232 nid001233 nid001240 login01 login02'
}

@test "nodelist: Polaris-style xnames with a list inside the bracket" {
  expand 'x3004c0s[7,13]b0n0,x3005c0s1b1n0' 'x3004c0s7b0n0 x3004c0s13b0n0 x3005c0s1b1n0'
}

@test "nodelist: the local test cluster's n[1-6]" {
  expand 'n[1-6]' 'n1 n2 n3 n4 n5 n6'
}

@test "nodelist: an unbalanced bracket is refused with exit 2" {
  run_strict "sched_expand_nodelist 'nid[001-003'"
  assert_failure 2
  assert_output --partial "unbalanced"
}

@test "nodelist: 10,000 hosts expand quickly and completely" {
  run_strict "sched_expand_nodelist 'nid[000001-010000]' | wc -l"
  assert_success
  assert_output 10000
}

@test "hosts: PBS_NODEFILE with one line per rank is de-duplicated in order" {
  printf '%s\n' x4102c5s3b0n0 x4102c5s3b0n0 x4102c5s2b0n0 x4102c5s3b0n0 x4102c5s2b0n0 '' x4102c5s4b0n0 >"$BATS_TEST_TMPDIR/nodefile"
  PBS_NODEFILE="$BATS_TEST_TMPDIR/nodefile" PBS_JOBID=1.x run_strict 'sched_hosts | paste -sd" "'
  assert_success
  assert_output "x4102c5s3b0n0 x4102c5s2b0n0 x4102c5s4b0n0"
}

@test "hosts: SLURM_JOB_NODELIST is expanded and de-duplicated" {
  SLURM_JOB_ID=7 SLURM_JOB_NODELIST='n[1-3],n2,m5' run_strict 'sched_hosts | paste -sd" "'
  assert_success
  assert_output "n1 n2 n3 m5"
}

@test "hosts: outside a job the host itself" {
  run_strict 'sched_hosts'
  assert_success
  assert_output "$(hostname)"
}

@test "detect: env first, SCHED_KIND overrides" {
  PBS_JOBID=12.pbs run_strict 'sched_detect'
  assert_output pbs
  SLURM_JOB_ID=12 run_strict 'sched_detect'
  assert_output slurm
  SLURM_JOB_ID=12 SCHED_KIND=pbs run_strict 'sched_detect; sched_job_id'
  assert_output $'pbs\n12'
  run_lax 'PATH=/nonexistent; sched_detect'
  assert_output none
}

@test "walltime: HH:MM:SS, D+HH:MM:SS, D-HH:MM:SS, MM:SS, seconds, leading zeros" {
  run_strict 'for w in 06:00:00 1+12:00:00 2-00:30:00 72:00:00 08:09 59 00:08:09; do sched_walltime_seconds $w; done | paste -sd" "'
  assert_success
  assert_output "21600 129600 174600 259200 489 59 489"
}

@test "walltime: garbage is refused with exit 2 naming it" {
  run_strict 'sched_walltime_seconds 6h'
  assert_failure 2
  assert_output --partial "walltime '6h' does not parse"
}

@test "deadline: PBS qstat -f stime + Resource_List.walltime" {
  cp "$QSTAT_FIXTURES/aurora_running.txt" "$FAKE_PBS_DIR/jobs/1234567.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov" 2>/dev/null ||
    { mkdir -p "$FAKE_PBS_DIR/jobs"; cp "$QSTAT_FIXTURES/aurora_running.txt" "$FAKE_PBS_DIR/jobs/1234567.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov"; }
  expected=$(( $(date -d 'Sun Nov 29 10:00:05 2026' +%s) + 6 * 3600 ))
  PATH="$FAKE_BIN:$PATH" PBS_JOBID=1234567.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov \
    run_strict 'sched_deadline'
  assert_success
  assert_output "$expected"
  run grep -c '^qstat -f 1234567.aurora-pbs-0001' "$FAKE_PBS_DIR/calls.log"
  assert_output 1
}

@test "deadline: PBS walltime in D+HH:MM:SS, exported as AGPT_DEADLINE_EPOCH" {
  mkdir -p "$FAKE_PBS_DIR/jobs"
  cp "$QSTAT_FIXTURES/aurora_running_days.txt" "$FAKE_PBS_DIR/jobs/1234600.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov"
  expected=$(( $(date -d 'Sun Nov 29 10:00:05 2026' +%s) + 36 * 3600 ))
  PATH="$FAKE_BIN:$PATH" PBS_JOBID=1234600.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov \
    run_strict 'sched_export_deadline; bash -c "echo \$AGPT_DEADLINE_EPOCH"'
  assert_success
  assert_output "$expected"
}

@test "deadline: a queued PBS job has no stime: no deadline, AGPT_DEADLINE_EPOCH stays unset" {
  mkdir -p "$FAKE_PBS_DIR/jobs"
  cp "$QSTAT_FIXTURES/polaris_queued.txt" "$FAKE_PBS_DIR/jobs/2045511.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"
  PATH="$FAKE_BIN:$PATH" PBS_JOBID=2045511.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov \
    run_strict 'sched_deadline || echo "rc=$?"; sched_export_deadline; echo "[${AGPT_DEADLINE_EPOCH:-unset}]"'
  assert_success
  assert_line "rc=1"
  assert_line "[unset]"
  assert_output --partial "no deadline known"
}

@test "deadline: Slurm SLURM_JOB_END_TIME; a user-pinned AGPT_DEADLINE_EPOCH wins" {
  SLURM_JOB_ID=5 SLURM_JOB_END_TIME=1900000000 run_strict 'sched_deadline'
  assert_output 1900000000
  SLURM_JOB_ID=5 SLURM_JOB_END_TIME=1900000000 AGPT_DEADLINE_EPOCH=42 run_strict 'sched_export_deadline; echo $AGPT_DEADLINE_EPOCH'
  assert_output 42
}

@test "submit: PBS qsub with afterany; exclude is logged as impossible; id printed" {
  PATH="$FAKE_BIN:$PATH" SCHED_KIND=pbs run_strict 'sched_submit --after 77.fakepbs --exclude x1,x2 jobs/smoke.pbs'
  assert_success
  assert_line "1001.fakepbs"
  assert_line --partial "PBS cannot exclude hosts at submit; not excluding: x1,x2"
  assert_line "sched: submitted 1001.fakepbs: qsub -W depend=afterany:77.fakepbs jobs/smoke.pbs"
  run cat "$FAKE_PBS_DIR/calls.log"
  assert_output "qsub -W depend=afterany:77.fakepbs jobs/smoke.pbs"
}

@test "submit: the successor does not inherit this job's PBS_/SLURM_ variables nor its deadline" {
  cat >"$BATS_TEST_TMPDIR/qsub" <<'SH'
#!/usr/bin/env bash
env | grep -E '^(PBS_|SLURM_|AGPT_DEADLINE)' | sort >"$FAKE_PBS_DIR/env"; echo 9.x
SH
  chmod +x "$BATS_TEST_TMPDIR/qsub"
  mkdir -p "$FAKE_PBS_DIR"
  PATH="$BATS_TEST_TMPDIR:$PATH" SCHED_KIND=pbs PBS_JOBID=8.x SLURM_NTASKS=4 SLURM_CONF=/etc/x.conf \
    AGPT_DEADLINE_EPOCH=1700000000 \
    run_strict 'sched_submit job.pbs 2>/dev/null'
  assert_success
  assert_output "9.x"
  run cat "$FAKE_PBS_DIR/env"
  assert_output "SLURM_CONF=/etc/x.conf"
}

@test "submit: a failing qsub returns 1 and says so; no script is exit 2" {
  PATH="$FAKE_BIN:$PATH" SCHED_KIND=pbs FAKE_QSUB_FAIL=1 run_strict 'sched_submit job.pbs'
  assert_failure 1
  assert_output --partial "submit failed"
  SCHED_KIND=pbs run_strict 'sched_submit'
  assert_failure 2
}

@test "cancel, alive and exclude on PBS via qdel/qstat fakes" {
  PATH="$FAKE_BIN:$PATH" SCHED_KIND=pbs run_strict '
    id=$(sched_submit job.pbs)
    sched_job_alive "$id" && echo alive
    sched_exclude "$id" x9
    sched_cancel "$id"
    sched_job_alive "$id" || echo gone
    sched_job_alive 999.nosuch || echo unknown'
  assert_success
  assert_line alive
  assert_line gone
  assert_line unknown
  assert_line --partial "PBS cannot exclude hosts from a queued job"
  run grep -c '^qdel 1001.fakepbs$' "$FAKE_PBS_DIR/calls.log"
  assert_output 1
}

@test "no scheduler: submit and cancel refuse with exit 1" {
  SCHED_KIND=none run_strict 'sched_submit job.sh'
  assert_failure 1
  assert_output --partial "no batch scheduler"
}
