#!/usr/bin/env bash
# compare_builds.sh: a previous build against this one on one GPU, for changes that must keep the
# bits and the speed (a refactor, a rename, a move of kernels between files).
#   bits   step digests (logits, cache, hidden of both arms, tokens) of `cuda` against
#          `cuda-graph` gates, 32 + 32 steps, greedy and sampled, on tiny, llama-1b and llama-8b,
#          BF16 and Q8_0: each build's gate must PASS and the digests of the two builds be EQUAL
#   speed  `memra bench --backend cuda-graph --prime 512 -n 128` on llama-8b BF16, llama-8b Q8_0
#          and llama-1b BF16, the builds interleaved old, new, new, old in one call
# Binaries are built on the development machine and carried: .carry-old and .carry-dev, each with
# bin, lib and plugins.d. Models are made once as files by the new build's mkmodel, so both builds
# read the same bytes. Modes: bits, speed (default both); XB and SP override their model lists
# ("preset:dtype ..."). A short table last; logs under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 MEMRA_SYNTH_THREADS=16
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
OLD=$PWD/.carry-old NEW=$PWD/.carry-dev
MODELS=${MODELS:-/tmp/memra-models}; mkdir -p "$MODELS"
T="$OUT/table.txt"
use() { export LD_LIBRARY_PATH=$1/lib MEMRA_PLUGIN_PATH=$1/plugins.d; }
nvidia-smi --query-gpu=index,name,memory.used,clocks.sm --format=csv > "$OUT/machine.txt" 2>&1

model() { # preset:dtype -> file, made by the new build once
  local f="$MODELS/${1/:/_}.gguf"
  if [ ! -s "$f" ]; then use "$NEW"; "$NEW/bin/memra" mkmodel --preset "${1%:*}" --dtype "${1#*:}" -o "$f" \
    > "$OUT/mkmodel_${1/:/_}.log" 2>&1 || echo "mkmodel $1 failed" | tee -a "$T"; fi
  echo "$f"; }

bits() {
  local XB=${XB:-"tiny:bf16 tiny:q8_0 llama-1b:bf16 llama-1b:q8_0 llama-8b:bf16 llama-8b:q8_0"}
  for x in $XB; do local f; f=$(model "$x"); local n=${x/:/_}
    for s in greedy sampled; do local extra=""; [ $s = sampled ] && extra="--temp 1 --seed 9"
      for bld in old new; do local B=$OLD; [ $bld = new ] && B=$NEW; use "$B"
        timeout 300 "$B/bin/memra-gate" --a cuda --b cuda-graph --model "$f" --prime 32 --gen 32 --rows 0 $extra \
          --quiet --jsonl "$OUT/xb_${bld}_${n}_$s.jsonl" > "$OUT/xb_${bld}_${n}_$s.log" 2>&1
        echo $? > "$OUT/xb_${bld}_${n}_$s.rc"
        grep '"record":"step"' "$OUT/xb_${bld}_${n}_$s.jsonl" 2>/dev/null \
          | grep -o '"[a-z_]*\(sha256\|token\)":"\?[0-9a-f-]*"\?' > "$OUT/xb_${bld}_${n}_$s.dig"
      done
      local ro rn; ro=$(cat "$OUT/xb_old_${n}_$s.rc") rn=$(cat "$OUT/xb_new_${n}_$s.rc")
      local same=DIFFER; [ -s "$OUT/xb_new_${n}_$s.dig" ] && cmp -s "$OUT/xb_old_${n}_$s.dig" "$OUT/xb_new_${n}_$s.dig" && same=EQUAL
      printf 'bits %-15s %-8s gate old rc=%s new rc=%s  %5s digests %s\n' "$n" "$s" "$ro" "$rn" \
        "$(wc -l < "$OUT/xb_new_${n}_$s.dig")" "$same" | tee -a "$T"
    done
  done; }

speed() {
  local SP=${SP:-"llama-8b:bf16 llama-8b:q8_0 llama-1b:bf16"}
  for x in $SP; do model "$x" > /dev/null; done
  for x in $SP; do local f; f=$(model "$x"); local n=${x/:/_} i=0
    for bld in old new new old; do i=$((i + 1)); local B=$OLD; [ $bld = new ] && B=$NEW; use "$B"
      timeout 300 "$B/bin/memra" bench --backend cuda-graph --model "$f" --prime 512 -n 128 \
        --jsonl "$OUT/bench_$bld.jsonl" > "$OUT/bench_${n}_${i}_$bld.log" 2>&1
      printf 'speed %-14s %-4s rc=%s %s\n' "$n" "$bld" "$?" \
        "$(grep '^| [a-z]' "$OUT/bench_${n}_${i}_$bld.log" | grep -v '^| arm ' | head -1 | tr -s ' ' | cut -c1-110)" | tee -a "$T"
    done
  done; }

[ $# -eq 0 ] && set -- bits speed
for m in "$@"; do case $m in bits) bits ;; speed) speed ;; *) echo "unknown mode $m" | tee -a "$T" ;; esac; done
# the device call brings back a limited number of files: the per-gate and per-bench logs go home in
# one archive each (kept loose where the archive could not be written)
for p in xb bench mkmodel; do
  ls "$OUT"/${p}_* > /dev/null 2>&1 || continue
  (cd "$OUT" && tar cJf "$p.tar.xz" ${p}_*) && rm -f "$OUT"/${p}_*
done
echo "=== table"; cat "$T"
