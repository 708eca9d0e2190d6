# Shared bats helper: load with `load helpers` at the top of a .bats file.
# Gives each test its own HOME and TMPDIR, puts the checkout's bin/ and .venv/bin on PATH, and loads
# bats-support and bats-assert from Debian's packages.
AGPT_ROOT="$(cd "$(dirname "${BATS_TEST_FILENAME}")/../.." && pwd)"
export AGPT_ROOT
export PATH="$AGPT_ROOT/bin:$AGPT_ROOT/.venv/bin:$PATH"
export PYTHONPATH="$AGPT_ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
load /usr/lib/bats/bats-support/load
load /usr/lib/bats/bats-assert/load

_agpt_isolate() {
  export HOME="$BATS_TEST_TMPDIR/home"
  export TMPDIR="$BATS_TEST_TMPDIR/tmp"
  mkdir -p "$HOME" "$TMPDIR"
}

setup() {
  _agpt_isolate
  if declare -F local_setup >/dev/null; then local_setup; fi
}

