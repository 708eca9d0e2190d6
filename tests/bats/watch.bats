#!/usr/bin/env bats
# agpt watch from a job script's point of view: status pass-through, the idle kill, bad flags.
load helpers
bats_require_minimum_version 1.5.0

@test "agpt watch passes the command's output and exit status through" {
  run agpt watch --timeout 5 -- sh -c 'echo out; exit 3'
  assert_failure 3
  assert_output "out"
}

@test "agpt watch kills an idle command and exits 124 with one line saying why" {
  run agpt watch --timeout 0.5 --grace 0.5 -- sleep 30
  assert_failure 124
  assert_equal "${#lines[@]}" 1
  assert_output --regexp '^agpt watch: idle: no output on stdout/stderr for [0-9.]+ s \(--timeout 0\.5\)'
}

@test "agpt watch: a bad flag or a missing command exits 2, a missing program 127" {
  run agpt watch --backoff 5,x -- true
  assert_failure 2
  assert_output --partial "--backoff"
  assert_equal "${#lines[@]}" 1
  run agpt watch true
  assert_failure 2
  assert_output --partial "'--'"
  run -127 agpt watch -- no-such-program-xyz
  assert_failure 127
  assert_output "agpt watch: no-such-program-xyz: command not found"
}
