#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian/Ubuntu machine:
# libzmq (with its pkg-config file) for the ZeroMQ bindings, protoc with
# protoc-gen-go for regenerating and drift-checking the protobuf code,
# staticcheck for make vet, and the
# data sets of examples/lr (heart_scale, Fashion-MNIST), and, for the
# multi-host tests' delay and loss (scripts/netns.sh impair), iptables and
# libnetfilter-queue-dev.
# Installs only what is missing; needs root (or sudo) for apt-get.
set -euo pipefail
missing=()
pkg-config --exists libzmq 2>/dev/null || missing+=(libzmq3-dev)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v protoc >/dev/null || missing+=(protobuf-compiler)
command -v gcc >/dev/null || missing+=(gcc)
command -v iptables >/dev/null || missing+=(iptables)
pkg-config --exists libnetfilter_queue 2>/dev/null || missing+=(libnetfilter-queue-dev)
[ -e /usr/share/doc/liblinear-tools/examples/heart_scale ] || missing+=(liblinear-tools)
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || missing+=(dataset-fashion-mnist)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
gobin="$(go env GOPATH)/bin"
if [ ! -x "$gobin/protoc-gen-go" ]; then
  go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
fi
if [ ! -x "$gobin/staticcheck" ]; then
  go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
