#!/usr/bin/env bash
# What each cluster.wire_protection mode costs: bench/run_variants.sh with
# three clusters of the installed build, crc, mac and secure, measured in turns.
#
#   bench/run_protection.sh [--iterations 5000] [--rounds 3] [--markdown FILE]
# It ends with the records protection.*-vs-crc (scripts/scoreboard).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SCOREBOARD_PROTECTION=1 COMMAND_LINE="bench/run_protection.sh $*" exec "$here/run_variants.sh" \
    --variant 'crc||cluster.wire_protection = crc' \
    --variant 'mac||cluster.wire_protection = mac' \
    --variant 'secure||cluster.wire_protection = secure' "$@"
