# BASH_ENV for the second bats pass: every library must work in a caller with `set -u`.
set -u
