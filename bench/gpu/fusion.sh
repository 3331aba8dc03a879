#!/usr/bin/env bash
# fusion.sh: what fewer launches a decode layer would gain (issues 26, 27 and 29; bench/gpu/NOTES.md,
# "Fewer launches a layer"), and the measurements that sit within the spread between machines.
# Needs a carried release build in $CARRY (bench/gpu/common.sh). PART picks one device call's worth:
#   PART=1  memra_cuda_wofuse_bench ($WOFUSE, or the carried build's; wo in a stand-in attention's
#           epilogue, and q/k/v too), then the real graph arm with launches left out: $SKIP is the
#           cuda plugin of a scratch build with bench/gpu/scratch_skip.patch applied (never main),
#           MEMRA_SCRATCH_SKIP bits 1 wo, 2 q/k/v, 4 attention (wrong results, timing only), on
#           llama-1b BF16, gemma3-270m q4_k_m and 8B Q8_0 files made once in $W (about 5 min);
#   PART=2  8B Q6_K (issue 26: 75%), 8B Q8_0 (issue 27: 85%) and llama-1b BF16 (80%) at window 1
#           and 2, both orders (--abba), 5 repetitions (about 3 min);
#   PART=3  llama.cpp's llama-bench tg128 ($LLAMA_BENCH: a CUDA build for the device) beside memra
#           on granite-moe-1b BF16 and Q8_0 and qwen3moe-30b Q8_0 (issue 29 asks for it in the same
#           call; the 8B files of PART 1 and 2 are removed first: the 30B file is 30 GiB).
#   CARRY=/tmp/m SKIP=/tmp/skip.so PART=1 bash bench/gpu/fusion.sh
. "$(dirname "$0")/common.sh"
PART=${PART:-1}; W=${W:-/tmp/w}; mkdir -p "$W"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$T"
# row LOG: each arm's row of a bench table: arm, prime, tok/s, sd, share of the ceiling
row() { grep '^| [a-z]' "$1" | grep -v '^| arm ' | tr -s ' ' | cut -d'|' -f2,3,6,7,10; }
if [ "$PART" = 1 ]; then
  : "${SKIP:?set SKIP to the cuda plugin of a scratch build with scratch_skip.patch}"
  S=$OUT/skip-plugins; rm -rf "$S"; cp -r "$B/plugins.d" "$S"; cp "$SKIP" "$S/libmemra-backend-cuda.so"
  timeout 120 "${WOFUSE:-$B/bin/memra_cuda_wofuse_bench}" 50 > "$OUT/wofuse.log" 2>&1
  echo "wofuse rc=$? t=$SECONDS" | tee -a "$T"
  grep -E '^==|^note|^control|^x after|^FUSED|^  |^summary|rror' "$OUT/wofuse.log" | cut -c1-240 | tee -a "$T"
  for pd in "llama-1b bf16" "gemma3-270m q4_k_m" "llama-8b q8_0"; do
    set -- $pd; mk $1 $2; f=$W/$1-$2.gguf
    echo "== $1 $2 (t=$SECONDS)" | tee -a "$T"
    for v in main 0 1 2 3 4 7 main; do
      if [ $v = main ]; then P=$B/plugins.d; s=0; else P=$S; s=$v; fi
      MEMRA_PLUGIN_PATH=$P MEMRA_SCRATCH_SKIP=$s timeout 120 "$M" bench --model "$f" --arm cuda-graph --prime 512 \
        -n 128 --reps 3 > "$OUT/skip_$1_$v.log" 2>&1
      echo "skip=$v rc=$? $(row "$OUT/skip_$1_$v.log")" | tee -a "$T"
    done
  done
fi
if [ "$PART" = 2 ]; then
  for pd in "llama-8b q6_k" "llama-8b q8_0" "llama-1b bf16"; do
    set -- $pd; mk $1 $2
    timeout 200 "$M" bench --model "$W/$1-$2.gguf" --arm cuda-graph,cuda-graph:window=2 --prime 512 -n 128 --reps 5 \
      --abba > "$OUT/w_$1_$2.log" 2>&1
    echo "== window $1 $2 rc=$? t=$SECONDS" | tee -a "$T"
    row "$OUT/w_$1_$2.log" | tee -a "$T"
  done
fi
if [ "$PART" = 3 ]; then
  : "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench of llama.cpp built for the device}"
  ldd "$LLAMA_BENCH" | grep "not found" | tee -a "$T"
  rm -f "$W"/llama-8b-*.gguf
  for pd in "granite-moe-1b bf16" "granite-moe-1b q8_0" "qwen3moe-30b q8_0"; do
    set -- $pd; mk $1 $2; f=$W/$1-$2.gguf
    timeout 200 "$LLAMA_BENCH" -m "$f" -p 0 -n 128 -r 3 -ngl 99 > "$OUT/lb_$1_$2.log" 2>&1
    echo "== llama-bench $1 $2 rc=$? t=$SECONDS" | tee -a "$T"
    grep '^|' "$OUT/lb_$1_$2.log" | cut -c1-200 | tee -a "$T"
    timeout 200 "$M" bench --model "$f" --arm cuda-graph --prime 512,1 -n 128 --reps 3 > "$OUT/mb_$1_$2.log" 2>&1
    echo "memra $1 $2 rc=$?" | tee -a "$T"
    row "$OUT/mb_$1_$2.log" | tee -a "$T"
  done
fi
echo "t=$SECONDS" | tee -a "$T"
cat "$T"
