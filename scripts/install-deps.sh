#!/usr/bin/env bash
# Installs the Debian packages chaosbed needs to build, test and run. Idempotent: packages already
# present are skipped by apt. Runs as root, or through sudo when not root.
#   --with-observability  also Prometheus and the Pushgateway (the tests against a real Prometheus; they skip
#                         with a message without them)
#   --with-browser        also Chromium (the test that checks report.html as a browser draws it; it skips
#                         with a message without it)
#   --with-bench          also the benchmarks' peers: PyTorch (bench/torch_train.py), Open MPI and Gloo
#                         (bench/allreduce_compare.sh)
#   --with-slurm          also Slurm and munge (the tests that start a one-machine Slurm cluster with
#                         deploy/slurm/local-cluster.sh) and Open MPI's mpirun (the test that starts host
#                         agents with it); they skip with a message without them. On a machine with systemd,
#                         Debian starts a munged of its own; the tests do not use it.
set -euo pipefail

with_observability=false
with_bench=false
with_browser=false
with_slurm=false
for arg in "$@"; do
  case "$arg" in
    --with-observability) with_observability=true ;;
    --with-bench) with_bench=true ;;
    --with-browser) with_browser=true ;;
    --with-slurm) with_slurm=true ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown option '$arg' (--with-observability, --with-browser, --with-bench, --with-slurm)" >&2; exit 2 ;;
  esac
done

packages=(
  # toolchain (clang: the lock-annotation check, scripts/check-lock-annotations.sh)
  build-essential cmake ninja-build pkg-config git clang
  # transports
  libucx-dev ucx-utils libssl-dev
  # core
  libgflags-dev libgoogle-glog-dev libopenblas-dev libopenblas0-pthread zlib1g-dev
  # experiments and observability
  libyaml-cpp-dev nlohmann-json3-dev prometheus-cpp-dev libboost-dev
  # tests
  googletest libgtest-dev libgmock-dev
  # data
  dataset-fashion-mnist
  # tools the tests call (groff: the man page check; jsonschema and yaml: the spec schema check; matplotlib:
  # bench/plot.py's figures)
  procps iproute2 python3 groff-base python3-jsonschema python3-yaml python3-matplotlib
)
if $with_observability; then packages+=(prometheus prometheus-pushgateway); fi
if $with_browser; then packages+=(chromium fonts-dejavu-core); fi
# PyTorch on Debian's Python and the system OpenBLAS; Open MPI and Gloo for the all-reduce comparison.
if $with_bench; then packages+=(python3-torch openmpi-bin libopenmpi-dev libgloo-dev); fi
if $with_slurm; then packages+=(slurmctld slurmd slurm-client munge openmpi-bin); fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo: run as root" >&2; exit 4; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
