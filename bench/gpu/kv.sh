#!/usr/bin/env bash
# kv.sh: the H200 checks of issue 28 item 3 (the kv=f32|f16|bf16 arm key of cuda and cuda-graph:
# a cache of 2-byte values, each rounded to nearest even as it is written), with binaries built
# on the development machine and carried in .carry-dev (bin, lib, plugins.d). Modes (any number,
# in order; no mode: exact f32 nmse speed):
#   exact   cuda:kv=T against cuda-graph:kv=T, T in f16 and bf16: llama-1b, 256 + 256, 4 rows,
#           greedy and sampled (T 1, BAAB); and cuda:kv=T,prefill=1 against cuda:kv=T,prefill=512
#           (and cuda-graph likewise): exact pairs within one kv type
#   f32     the same two pairs at kv=f32 (the default, whose kernels kept their code: a regression
#           check against the records of bench/RESULTS.md)
#   nmse    cpu:kv=T against cuda:kv=T (and cuda-graph), nmse 1e-3, on small and gemma3-tiny (a
#           sliding window: its layers read a window of the 2-byte cache), 32 + 32 steps, every
#           attention path (auto, tiled, unfused) on small. Why 1e-3 and not the 1e-5 of f32
#           caches: the cpu's and the GPU's k and v differ in the last float bits, and a value
#           near the midpoint of two f16 (bf16) neighbours then rounds to different neighbours,
#           a step of 2^-11 (2^-8) relative that the synthetic models amplify (the H200 call of
#           2026-12-01: small f32 cpu/cuda 1.2e-7, kv=f16 cpu/cuda 7.6e-5, bf16 2.4e-5). The
#           pair is still discriminating: a cuda cache not rounded as the cpu rounds it sits
#           at the distance of the rounding itself (the `tri` mode: 1.3e-2 for f16, 0.27 for
#           bf16, and cpu against cpu:kv=f16 1.5e-2).
#   tri     the triad behind that tolerance, nmse reported without a bound (--compare nmse:1):
#           cpu/cuda at f32, cpu:kv=T/cuda:kv=T, cpu/cuda:kv=T, cpu/cpu:kv=T, on small and
#           gemma3-tiny
#   long    cuda:kv=f16 against cuda-graph:kv=f16 over 8,156 steps on llama-1b (--prime 8000
#           --gen 156: the issue's check), then the same with prefill=512 on both
#   speed   memra bench --preset llama-1b --dtype bf16 --arm cuda-graph,cuda-graph:kv=f16 at
#           --prime 7900 and --prime 512, -n 128 (the long-context speed: the issue asks 0.95x of
#           the 512 figure at 7900; flash-decoding is not part of this change, so expect less)
# A short table last ($OUT/table.txt); logs under $OUT. Record the table in bench/RESULTS.md.
. "$(dirname "$0")/common.sh"
S="--prime 256 --gen 256"
L1="--preset llama-1b --dtype bf16"
TEMP="--temp 1 --seed 20261201 --schedule BAAB"
pairs() { local t=$1
  gate "e1b_kv${t}_greedy" --a cuda:kv=$t --b cuda-graph:kv=$t $L1 $S --rows 4
  gate "e1b_kv${t}_temp" --a cuda:kv=$t --b cuda-graph:kv=$t $L1 $S --rows 4 $TEMP
  gate "e1b_kv${t}_prefill" --a cuda:kv=$t,prefill=1 --b cuda:kv=$t,prefill=512 $L1 $S --rows 4
  gate "e1b_kv${t}_prefill_temp" --a cuda:kv=$t,prefill=1 --b cuda:kv=$t,prefill=512 $L1 $S --rows 4 $TEMP
  gate "e1b_kv${t}_gprefill" --a cuda-graph:kv=$t,prefill=1 --b cuda-graph:kv=$t,prefill=512 $L1 $S --rows 4
  gate "e1b_kv${t}_prefill7" --a cuda:kv=$t,prefill=1 --b cuda-graph:kv=$t,prefill=7 $L1 $S --rows 4; }
[ $# -gt 0 ] || set -- exact f32 nmse speed
while [ $# -gt 0 ]; do mode=$1; shift; case $mode in
exact) pairs f16; pairs bf16 ;;
f32) pairs f32 ;;
nmse)
  for t in f16 bf16; do
    for p in small gemma3-tiny; do
      gate "n_${p}_kv${t}" --a cpu:kv=$t --b cuda:kv=$t --compare nmse:1e-3 --preset $p --prime 32 --gen 32 --rows 0
      gate "n_${p}_kv${t}_graph" --a cpu:kv=$t --b cuda-graph:kv=$t --compare nmse:1e-3 --preset $p --prime 32 --gen 32 --rows 0
    done
    for a in tiled unfused; do
      gate "n_small_kv${t}_$a" --a cpu:kv=$t --b cuda:kv=$t,attention=$a --compare nmse:1e-3 --preset small --prime 32 --gen 32 --rows 0
    done
    # the sliding window past its end (gemma3-tiny's window is short): more steps
    gate "n_g3tiny_kv${t}_long" --a cpu:kv=$t --b cuda:kv=$t --compare nmse:1e-3 --preset gemma3-tiny --prime 200 --gen 56 --rows 0
  done
  # negative control: f16 against f32 must not pass exact
  gate "ctl_kvf16_vs_f32" --a cuda --b cuda:kv=f16 $L1 --prime 32 --gen 32 --rows 0
  grep '"record":"verdict"' "$OUT/ctl_kvf16_vs_f32.jsonl" 2>/dev/null | grep -q '"pass":true' &&
    echo "CONTROL FAILED: kv=f16 gave f32's bits" | tee -a "$T" ;;
tri)
  for p in small gemma3-tiny; do
    gate "tri_${p}_f32" --a cpu --b cuda --compare nmse:1 --preset $p --prime 32 --gen 32 --rows 0
    for t in f16 bf16; do
      gate "tri_${p}_${t}_${t}" --a cpu:kv=$t --b cuda:kv=$t --compare nmse:1 --preset $p --prime 32 --gen 32 --rows 0
      gate "tri_${p}_f32_${t}" --a cpu --b cuda:kv=$t --compare nmse:1 --preset $p --prime 32 --gen 32 --rows 0
      gate "tri_${p}_cpu_${t}" --a cpu --b cpu:kv=$t --compare nmse:1 --preset $p --prime 32 --gen 32 --rows 0
    done
  done ;;
long)
  GATE_TIMEOUT=600 gate "long_kvf16" --a cuda:kv=f16 --b cuda-graph:kv=f16 $L1 --prime 8000 --gen 156 --rows 2
  GATE_TIMEOUT=600 gate "long_kvf16_prefill" --a cuda:kv=f16,prefill=512 --b cuda-graph:kv=f16,prefill=512 $L1 --prime 8000 --gen 156 --rows 2 ;;
speed)
  bench b1b_7900 $L1 --arm cuda-graph,cuda-graph:kv=f16,cuda-graph:kv=bf16 --prime 7900 -n 128
  bench b1b_512 $L1 --arm cuda-graph,cuda-graph:kv=f16,cuda-graph:kv=bf16 --prime 512 -n 128 ;;
*) echo "unknown mode $mode" | tee -a "$T" ;;
esac; done
