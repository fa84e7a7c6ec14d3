#!/usr/bin/env bash
# Hostile-input campaign (issue 14): >= 1,000 damaged traces and >= 1,000 mutated configs against
# build/mobisim; prints the counts and fails on any crash, hang or silent exit 0 on damaged data.
#   scripts/hostile_campaign.sh [--traces N] [--configs N] [--seed S] [--mobisim PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/hostile_campaign.py "$@"
