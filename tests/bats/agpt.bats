#!/usr/bin/env bats
# The agpt dispatcher: help, version, unknown commands, bin/agpt-NAME dispatch.
load helpers

@test "agpt --help lists every command with one line each" {
  run agpt --help
  assert_success
  assert_output --partial "watch"
  assert_output --partial "train"
  assert_output --partial "jobgen"
  # one line per command: every command line of the listing starts with two spaces and the name
  run bash -c "agpt --help | sed -n '/^Commands:/,\$p' | tail -n +2"
  for l in "${lines[@]}"; do [[ "$l" =~ ^\ \ [a-z-]+\ +[A-Z] ]]; done
}

@test "agpt --version prints the version" {
  run agpt --version
  assert_success
  assert_output --regexp '^agpt, version [0-9]+\.[0-9]+'
}

@test "agpt nosuchcmd: one line naming it and the command list, exit 2" {
  run agpt nosuchcmd
  assert_failure 2
  assert_output --partial "unknown command 'nosuchcmd'"
  assert_output --partial "watch"
  assert_equal "${#lines[@]}" 1
}

@test "agpt NAME dispatches to bin/agpt-NAME when it exists" {
  run agpt setup --help
  assert_success
  assert_output --partial "Usage: agpt setup"
}

@test "bin/agpt works through a symlink from another directory" {
  ln -s "$AGPT_ROOT/bin/agpt" "$HOME/agpt"
  cd "$HOME"
  run env -i PATH=/usr/bin:/bin HOME="$HOME" ./agpt --version
  assert_success
}
