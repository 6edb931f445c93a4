#!/usr/bin/env bash
# A change meant to leave behaviour as it was (a faster data structure, state kept per
# datagram instead of per token) must leave the deterministic simulator's runs as they were:
# the same datagrams, retransmissions, spurious losses and completion times, seed for seed.
#
# Builds the simulator at REV (default: main's parent commit, HEAD~1) in a worktree of its
# own, runs both on the same seeds over the scenario classes below, and prints `same` or
# `DIFF` for each; exits 1 if any differs. A DIFF is not a failure of the change by itself
# (a change may mean to alter behaviour): it says the change is not the refactor it claims
# to be, and which scenario to look at.
#
#     scripts/sim-equivalence.sh [REV]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-HEAD~1}
work=$(mktemp -d "${TMPDIR:-/tmp}/exon-equiv.XXXXXX")
cleanup() {
    git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add --quiet --detach "$work/tree" "$rev"
(cd "$work/tree" && CARGO_TARGET_DIR="$root/target/equivalence" cargo build --quiet --release -p exon-sim)
(cd "$root" && cargo build --quiet --release -p exon-sim)
old="$root/target/equivalence/release/exon-sim"
new="$root/target/release/exon-sim"
figures() {
    "$@" 2>&1 | grep '^seed=' | grep -o 'datagrams=[0-9]* .*done_s=[0-9.]*' || true
}
differ=0
while read -r cfg; do
    [ -z "$cfg" ] && continue
    # shellcheck disable=SC2086
    a=$(figures "$old" $cfg)
    # shellcheck disable=SC2086
    b=$(figures "$new" $cfg)
    if [ -z "$a" ] || [ -z "$b" ]; then
        echo "NO RUN: $cfg"
        differ=1
    elif [ "$a" == "$b" ]; then
        echo "same: $cfg"
    else
        echo "DIFF: $cfg"
        differ=1
    fi
done <<'CONFIGS'
--seeds 6 --loss 0.02
--seeds 6 --loss 0.1 --reorder 0.2
--seeds 6 --dup 0.05 --reorder 0.1 --loss 0.05
--seeds 4 --max-payload 60000 --messages 3000 --loss 0.01
--seeds 6 --loss 0.1 --dup 0.05 --reorder 0.1 --restarts 4 --max-payload 4000
--seeds 6 --durable --loss 0.1 --restarts 6 --crash-mid-commit 0.2
--seeds 6 --deadline-ms 300 --loss 0.2 --messages 20000
--seeds 4 --nodes 4 --loss 0.05 --reorder 0.05
--seeds 4 --burst 0.01 --loss 0.01
--seeds 4 --nodes 4 --traffic incast --shared-queue --rate 125000 --messages 3000 --loss 0.01
--seeds 4 --drop-every 3 --messages 20000
--seeds 4 --drop-every 2 --restarts 2 --messages 5000
CONFIGS
echo "equivalent=$((1 - differ)) against=$(git -C "$root" rev-parse --short "$rev")"
exit "$differ"
