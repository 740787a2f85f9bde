# Sourced by the benchmarks: a figure taken under load is not a result. Quiet means under a tenth of the
# machine's CPU time busy over the last 2 seconds (/proc/stat), as chaosbed's own provenance judges a run's
# start; the 1-minute load average is printed beside it but not used, since it holds a previous
# measurement's own load for a minute after that ended.
quiet_cores=$(nproc)

quiet_load() { cut -d' ' -f1 /proc/loadavg; }

# The percentage of all cores' time busy (not idle, not iowait) over SECONDS (default 2).
cpu_busy_percent() {
  local a b
  a=$(head -1 /proc/stat)
  sleep "${1:-2}"
  b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {
    n = split(a, x, " "); split(b, y, " "); busy = 0; total = 0
    for (i = 2; i <= 9 && i <= n; i++) { d = y[i] - x[i]; total += d; if (i != 5 && i != 6) busy += d }
    printf "%.1f", (total > 0 ? 100 * busy / total : 100) }'
}

quiet_busy=""
is_quiet() { quiet_busy=$(cpu_busy_percent 2); awk -v b="$quiet_busy" 'BEGIN { exit !(b < 10) }'; }

# require_quiet WHO: exits 2, saying why, unless the machine is quiet.
require_quiet() {
  is_quiet && return 0
  echo "$1: ${quiet_busy}% of $quiet_cores cores busy over the last 2 s (load $(quiet_load)), not under 10%; refusing to measure (wait for a quiet machine)" >&2
  exit 2
}

# wait_quiet SECONDS: waits up to SECONDS for a quiet machine; false if it stays busy. Prints the CPU use,
# the load and the wait.
wait_quiet() {
  local limit=$1 waited=0
  until is_quiet; do
    [ "$waited" -ge "$limit" ] && return 1
    sleep 3
    waited=$((waited + 5))
  done
  echo "(${quiet_busy}% busy, load $(quiet_load), after waiting ${waited} s)"
}
