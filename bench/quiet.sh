# Sourced by the benchmarks: a figure taken under load is not a result. Quiet means a 1-minute load below
# 0.5 per core.
quiet_cores=$(nproc)

quiet_load() { cut -d' ' -f1 /proc/loadavg; }

is_quiet() { awk -v l="$(quiet_load)" -v c="$quiet_cores" 'BEGIN { exit !(l < 0.5 * c) }'; }

# require_quiet WHO: exits 2, saying why, unless the machine is quiet.
require_quiet() {
  is_quiet && return 0
  echo "$1: load $(quiet_load) on $quiet_cores cores is not below 0.5 per core; refusing to measure (wait for a quiet machine)" >&2
  exit 2
}

# wait_quiet SECONDS: waits up to SECONDS for a quiet machine (the load a previous measurement left behind
# decays with a time constant of a minute); false if it stays loaded. Prints the load and the wait.
wait_quiet() {
  local limit=$1 waited=0
  until is_quiet; do
    [ "$waited" -ge "$limit" ] && return 1
    sleep 5
    waited=$((waited + 5))
  done
  echo "(load $(quiet_load) after waiting ${waited} s)"
}
