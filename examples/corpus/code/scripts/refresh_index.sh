#!/usr/bin/env bash
# Weekly Living Memory index refresh.
#
# Pulls the latest source repositories, rebuilds the retrieval index and keeps a log.
# Scheduled by the engineering steward (see decisions/2026-09-council-minutes.md, action items).
# A published build is immutable; a failed build leaves the previous one in place.
#
# Usage: scripts/refresh_index.sh [REPO_ROOT]

set -euo pipefail

REPO_ROOT="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
LOG_DIR="${LOG_DIR:-$REPO_ROOT/logs}"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
LOG_FILE="$LOG_DIR/refresh-$STAMP.log"

mkdir -p "$LOG_DIR"
cd "$REPO_ROOT"

echo "[$STAMP] refreshing index in $REPO_ROOT" | tee -a "$LOG_FILE"

# Fast-forward only: history of source repositories is never rewritten.
git pull --ff-only 2>&1 | tee -a "$LOG_FILE"

# Show the breath phase and tone this build will be stamped with.
grep -iE '^(phase|tone):' examples/corpus/governance/BREATH.md | tee -a "$LOG_FILE" || true

# Build and publish. `make run` fails if a collection mixes public and internal access levels.
if make run 2>&1 | tee -a "$LOG_FILE"; then
    echo "[$STAMP] build published" | tee -a "$LOG_FILE"
else
    echo "[$STAMP] build FAILED; previous index still served" | tee -a "$LOG_FILE" >&2
    exit 1
fi
