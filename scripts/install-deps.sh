#!/usr/bin/env bash
# Installs every Debian package chaosbed needs to build, test and run. Idempotent: packages already
# present are skipped by apt. Runs as root, or through sudo when not root.
set -euo pipefail

packages=(
  # toolchain (clang: the lock-annotation check, scripts/check-lock-annotations.sh)
  build-essential cmake ninja-build pkg-config git clang
  # transports
  libucx-dev ucx-utils libssl-dev
  # core
  libgflags-dev libgoogle-glog-dev libopenblas-dev libopenblas0-pthread zlib1g-dev
  # experiments and observability
  libyaml-cpp-dev nlohmann-json3-dev prometheus-cpp-dev
  # tests
  googletest libgtest-dev libgmock-dev
  # data
  dataset-fashion-mnist
  # tools the tests and benchmarks call
  procps iproute2 prometheus prometheus-pushgateway
  # bench/torch_train.py: the PyTorch reference (Debian's Python on the system OpenBLAS)
  python3-torch
)

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
