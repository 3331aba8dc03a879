#!/usr/bin/env bash
# checks.sh: every speed check still open (issues 26, 27, 29) on whatever card the call got, with
# the default graph arm at window 1: `memra bench --arm cuda-graph --prime 512 -n 128 --abba` on the
# synthetic presets built in memory (no file on disk: the 8B presets would fill it). The card's
# name is the table's first line: a figure counts for a check only on the card the check names.
# Binaries carried (bin, lib, plugins.d in $CARRY); a short table last, logs under $OUT.
#   bash bench/gpu/checks.sh [PART...]   parts: dense (llama-8b in Q6_K, Q4_K, q4_k_m, Q5_K,
#   Q4_0, Q8_0), small (llama-1b BF16, gemma3-270m q4_k_m), moe (granite-moe-1b BF16,
#   qwen3moe-30b Q8_0); default all three (about 3 minutes on an H100, the 30B preset a minute of it).
#   ARM=... measures another arm (or a comma-separated list of arms, each row of the A/B) instead.
#   Exit status 1 when any bench failed (its rc is in the table), 2 for an unknown part.
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$T"
one() { bench "$1" --preset "$2" --dtype "$3" --arm "${ARM:-cuda-graph}" --prime 512 -n 128 --reps 5 --abba; }
for part in "${@:-dense small moe}"; do for p in $part; do case $p in
  dense) for d in q6_k q4_k q4_k_m q5_k q4_0 q8_0; do one "8b_$d" llama-8b $d; done ;;
  small) one 1b_bf16 llama-1b bf16; one g3_q4km gemma3-270m q4_k_m ;;
  moe) one granite_bf16 granite-moe-1b bf16; one q30b_q8 qwen3moe-30b q8_0 ;;
  *) echo "checks.sh: unknown part '$p' (dense, small, moe)" | tee -a "$T"; exit 2 ;;
esac; done; done
echo ---; cat "$T"
exit "$FAILED"
