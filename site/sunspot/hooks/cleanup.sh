#!/usr/bin/env bash
# site/NAME/hooks/cleanup.sh: run once on each node between failover attempts, as the job's user, before
# the relaunch: kill leftover ranks of this run that still hold accelerators.  Exit 0 when the node is clean.
# Usage: cleanup.sh            (AGPT_CLEANUP_PATTERN: what to kill, default "agpt train")
set -euo pipefail
pkill -u "$(id -u)" -f -- "${AGPT_CLEANUP_PATTERN:-agpt train}" || true
sleep 1
pkill -9 -u "$(id -u)" -f -- "${AGPT_CLEANUP_PATTERN:-agpt train}" || true
