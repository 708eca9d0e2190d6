#!/usr/bin/env bats
# `agpt site` from the shell, as a sysadmin runs it: the glob over every profile, a typo, detection.
load helpers

@test "agpt site check site/*/profile.sh passes" {
  cd "$AGPT_ROOT"
  run agpt site check site/*/profile.sh
  assert_success
  # every key of the template, each set in the profile
  assert_line "site/aurora/profile.sh: ok ($(grep -c '^SITE_[A-Z_]*=' "$AGPT_ROOT/site/_template/profile.sh") keys)"
  refute_output --partial "agpt site check:"
}

@test "a profile with a typo'd key fails naming the key and its line" {
  mkdir -p "$BATS_TEST_TMPDIR/site/frontier"
  sed 's/^SITE_LAUNCHER=srun/SITE_LAUNCHR=srun/' "$AGPT_ROOT/site/frontier/profile.sh" >"$BATS_TEST_TMPDIR/site/frontier/profile.sh"
  n="$(grep -n '^SITE_LAUNCHR=' "$BATS_TEST_TMPDIR/site/frontier/profile.sh" | cut -d: -f1)"
  run agpt site check "$BATS_TEST_TMPDIR/site/frontier/profile.sh"
  assert_failure 2
  assert_line "agpt site check: $BATS_TEST_TMPDIR/site/frontier/profile.sh:$n: unknown key SITE_LAUNCHR (did you mean SITE_LAUNCHER?)"
}

@test "every profile sources cleanly under set -euo pipefail and defines every key" {
  for p in "$AGPT_ROOT"/site/*/profile.sh; do
    run bash -c "set -euo pipefail; source '$p'; declare -p SITE_NAME SITE_LAUNCHER_FLAGS SITE_MODULES SITE_ENV >/dev/null"
    assert_success
  done
}

@test "agpt site detect honours AGPT_SITE; generic elsewhere" {
  AGPT_SITE=frontier run agpt site detect
  assert_output frontier
  run agpt site detect --hostname some-laptop
  assert_output generic
}
