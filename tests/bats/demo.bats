#!/usr/bin/env bats
# agpt demo's command line (the demo itself runs a cluster for minutes: `make demo`; its parts are tested by
# tests/python/test_chaos.py and test_chaoslib.py).
load helpers

@test "agpt demo --help prints the stages and the settings" {
  run agpt demo --help
  assert_success
  assert_line --partial "Usage: agpt demo [--out DIR] [--keep]"
  assert_output --partial "AGPT_DEMO_STEPS"
}

@test "agpt demo: an unknown flag or a bad AGPT_DEMO_STEPS is exit 2 with one line naming it" {
  run agpt demo --bogus
  assert_failure 2
  assert_output "agpt demo: unknown argument '--bogus' (see agpt demo --help)"
  AGPT_DEMO_STEPS=ten run agpt demo --out "$BATS_TEST_TMPDIR/out"
  assert_failure 2
  assert_output "agpt demo: AGPT_DEMO_STEPS: not a whole number from 1 to 9999999"
  run agpt demo --out
  assert_failure 2
}
