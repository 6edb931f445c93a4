#!/usr/bin/env bash
# Builds every fuzz target and runs each for a bounded time (default 60 s), starting from the
# committed seed corpus. Installs cargo-fuzz if missing. Needs a nightly toolchain.
# Usage: fuzz/smoke.sh [seconds-per-target]
set -euo pipefail
secs="${1:-60}"
cd "$(dirname "$0")"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz smoke: no nightly toolchain here, skipping (rustup toolchain install nightly)"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz smoke: installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi
cargo +nightly fuzz build
for t in $(cargo +nightly fuzz list); do
  mkdir -p "corpus/$t"
  seeds=()
  [ -d "seeds/$t" ] && seeds=("seeds/$t")
  echo "fuzz smoke: $t for ${secs}s"
  log="$(mktemp)"
  if ! cargo +nightly fuzz run "$t" "corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    grep -E -A8 "panicked|ERROR|SUMMARY" "$log" | head -n 60
    echo "fuzz smoke: $t FAILED; reproducer in fuzz/artifacts/$t/"
    rm -f "$log"
    exit 1
  fi
  grep -E "^Done|number_of_executed_units" "$log" || true
  rm -f "$log"
done
echo "fuzz smoke: all targets ran ${secs}s without a crash"
