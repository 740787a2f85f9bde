#!/usr/bin/env bash
# Runs the whole test suite N times (each test until it fails, at most N times: ctest --repeat until-fail:N)
# and prints each test's failure count. A flaky test is a bug: this finds it, it never hides it.
# Usage: scripts/flake-hunt.sh [N=10] [extra ctest args, e.g. -L unit or -R Shaper]
# Needs a built tree (scripts/build.sh). Prints the load at the start and the end: a count taken under load
# says how the suite fares under load, not that it is flaky on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
shift || true
[ -d build ] || { echo "flake-hunt: no build/ (run scripts/build.sh first)" >&2; exit 2; }
log=$(mktemp -d "${TMPDIR:-/tmp}/flake-hunt.XXXXXX")
echo "flake-hunt: $n rounds; load at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; logs in $log"
declare -A failures=()
for round in $(seq 1 "$n"); do
  # One round is one pass over every test, so that a test's count is "failed in k of n rounds".
  if ctest --preset default --output-on-failure "$@" >"$log/round-$round.log" 2>&1; then
    echo "round $round: all passed"
  else
    failed=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (\(Failed\|Timeout\|SEGFAULT\|Subprocess aborted\|Exception\).*/\1/p' "$log/round-$round.log")
    echo "round $round: failed: ${failed//$'\n'/, }"
    while IFS= read -r t; do
      [ -n "$t" ] && failures[$t]=$(( ${failures[$t]:-0} + 1 ))
    done <<<"$failed"
  fi
done
echo "flake-hunt: load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ${#failures[@]} -eq 0 ]; then
  echo "flake-hunt: no test failed in $n rounds"
  exit 0
fi
echo "failures per test (of $n rounds):"
for t in "${!failures[@]}"; do printf '%4d  %s\n' "${failures[$t]}" "$t"; done | sort -rn
exit 1
