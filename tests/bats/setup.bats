#!/usr/bin/env bats
# make setup / agpt setup: idempotent and quick when done; a package missing from the registry is named.
load helpers

@test "a second setup skips the work: every apt package present, the venv up to date" {
  run agpt setup
  assert_success
  assert_output --partial "apt: all"
  assert_output --partial "venv: up to date"
}

@test "an apt package missing from the registry is named, and setup stops before installing anything" {
  if [[ $EUID -ne 0 ]] && ! command -v sudo >/dev/null; then skip "needs root to reach apt"; fi
  AGPT_APT_PACKAGES="rsync agpt-no-such-package-xyz" run agpt setup --no-venv
  assert_failure 1
  assert_output --partial "apt package 'agpt-no-such-package-xyz' is not in the registry"
  refute_output --partial "venv:"
}

@test "setup: an unknown flag is exit 2 naming it" {
  run agpt setup --frobnicate
  assert_failure 2
  assert_output --partial "unknown flag '--frobnicate'"
}
