#!/usr/bin/env bash
# The heavy tests: simulations and loopback measurements that take seconds to a minute each
# in a debug build (a flood of 10 000 identities, long fat paths, one-way outages in real
# time, floods of forgeries). They carry `#[ignore = "heavy (CI runs it: ...)"]` so that
# `cargo test --workspace` stays short for a newcomer, and CI runs every one of them here.
#
# Every other ignored test is run by hand (release builds, known limits, long soaks) and is
# skipped by name below. The step fails if it ran a different number of tests than the
# sources mark heavy, so a heavy test can neither be forgotten nor a manual one slip in.
set -euo pipefail
cd "$(dirname "$0")/.."
manual=(
  a_million_forged_ids_leave_bounded_state          # release, by hand
  a_million_forged_ids_over_udp_leave_bounded_state # release, by hand
  a_one_way_outage_at_the_defaults                  # 45 s, the issue's figures
  durable_long_soak                                 # 200 seeds
  a_restored_sender_resends_what_its_copy_knew_no_slot_for # a known limit (docs/durability.md)
  a_stream_resumes_after_a_two_way_outage_without_the_probe # measured by hand
  late_joiners_share_a_bottleneck_scan              # a measure, release, by hand
)
skips=()
for m in "${manual[@]}"; do skips+=(--skip "$m"); done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --tests "$@" -- --ignored "${skips[@]}" 2>&1 | tee "$log"
ran=$(grep -E '^test result: ok' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | paste -sd+ | bc)
want=$(grep -rE --include='*.rs' '^\s*#\[ignore = "heavy' exon exon-sim exon-cli exon-testkit exon-outbox benches src tests 2>/dev/null | wc -l)
echo "heavy tests: $ran run, $want marked heavy in the sources"
if [ "$ran" != "$want" ]; then
  echo "error: the heavy step ran $ran tests, the sources mark $want heavy" >&2
  exit 1
fi

# The turmoil suite on more seeds than its default (7), each run a few seconds: a stall, or
# a test whose disruption only lands mid-stream with one seed's latencies, shows here (a
# seed sweep found a server stalled for a minute by a lost first challenge; seeds 23, 25).
for seed in 1 2 3 4 5 6 8 9 10 11 12 13; do
  echo "== turmoil suite, seed $seed"
  EXON_TURMOIL_SEED=$seed cargo test -q -p exon --test turmoil
done
