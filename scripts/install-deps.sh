#!/usr/bin/env bash
# Installs what memra needs to build and test on Debian/Ubuntu when it is missing: a C compiler,
# CMake, pkg-config, OpenSSL's headers (libcrypto), jansson's (the JSON parser of memra report) and
# Criterion. Does nothing when all are there.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
[ -f /usr/include/openssl/evp.h ] || need+=(libssl-dev)
[ -f /usr/include/criterion/criterion.h ] || need+=(libcriterion-dev)
[ -f /usr/include/jansson.h ] || need+=(libjansson-dev)
if [ "${MEMRA_FUZZ_DEPS:-0}" = 1 ]; then command -v clang >/dev/null 2>&1 || need+=(clang); fi
[ ${#need[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${need[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${need[@]}" >/dev/null
