#!/usr/bin/env bash
# chunk_mma.sh (issue 28, chunk=mma: the prefill chunk's integer Q8_0 GEMV on int8 tensor cores).
# PARTS (default "check bench gates pp ncu") picks what runs:
#   check  memra_cuda_check_chunk_mma: bit for bit against decode per row, with its negative control
#   bench  memra_cuda_chunk_bench: chunk=mma's tiles against chunk=fma on 8B's shapes, M 512
#   gates  on llama-1b and llama-8b Q8_0 (256 prime, 256 generated, --rows $ROWS): cuda prefill=1
#          against prefill=512 greedy and sampled, cuda-graph likewise (sampled on 1b), prefill=7,
#          chunk=fma against chunk=mma at prefill=512, and a negative control (prefill=512 against
#          q8=float, which must fail)
#   pp     memra bench of both models (pp512 and decode), cuda-graph and cuda, chunk=mma and fma
#   ncu    Nsight Compute's warp states of the MMA kernel on 4096 x 4096, M 512 (where ncu exists)
# Run from the repository root with CARRY set to a carried release build (bench/gpu/common.sh).
GATE_TIMEOUT=${GATE_TIMEOUT:-150}; BENCH_TIMEOUT=${BENCH_TIMEOUT:-150}
. "$(dirname "$0")/common.sh"
PARTS=${PARTS:-check bench gates pp ncu}; ROWS=${ROWS:-2}
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
W=${W:-/tmp/q8mma}; mkdir -p $W
( mk llama-8b q8_0 ) & MKPID=$!
if has check; then
  timeout 180 $B/bin/memra_cuda_check_chunk_mma > "$OUT/check_chunk_mma.log" 2>&1
  echo "check_chunk_mma rc=$? $(tail -1 "$OUT/check_chunk_mma.log")" | tee -a "$T"
  grep -q PASS "$OUT/check_chunk_mma.log" || head -8 "$OUT/check_chunk_mma.log" | cut -c1-220 | tee -a "$T"
fi
if has bench; then
  timeout 120 $B/bin/memra_cuda_chunk_bench > "$OUT/chunk_bench.log" 2>&1; echo "chunk_bench rc=$?" | tee -a "$T"
  cut -c1-175 "$OUT/chunk_bench.log" | tee -a "$T"
fi
mk llama-1b q8_0
S="--prime 256 --gen 256 --rows $ROWS"; TEMP="--temp 1 --seed 20261201 --schedule BAAB"
if has gates; then
  for m in llama-1b llama-8b; do
    [ $m = llama-8b ] && wait $MKPID
    F="--model $W/$m-q8_0.gguf"; n=${m#llama-}
    gate "${n}_prefill"       --a cuda:prefill=1 --b cuda:prefill=512 $F $S
    gate "${n}_prefill_temp"  --a cuda:prefill=1 --b cuda:prefill=512 $F $S $TEMP
    gate "${n}_gprefill"      --a cuda-graph:prefill=1 --b cuda-graph:prefill=512 $F $S
    [ $m = llama-1b ] && gate "${n}_gprefill_temp" --a cuda-graph:prefill=1 --b cuda-graph:prefill=512 $F $S $TEMP
    gate "${n}_prefill7"      --a cuda:prefill=1 --b cuda:prefill=7 $F $S
    gate "${n}_fma_mma"       --a cuda:chunk=fma,prefill=512 --b cuda:chunk=mma,prefill=512 $F $S
    control "${n}_ctl_q8float" --a cuda:prefill=512 --b cuda:q8=float,prefill=512 $F $S
  done
fi
wait $MKPID
if has pp; then
  for m in llama-1b llama-8b; do
    bench "pp_${m#llama-}" --model $W/$m-q8_0.gguf --arm cuda-graph,cuda-graph:chunk=fma,cuda,cuda:chunk=fma \
      --prime 512 -n 128 --reps 3
  done
fi
if has ncu; then
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ]; then
    timeout 90 "$NCU" --section WarpStateStats --section SchedulerStats --section SpeedOfLight -k regex:chunk_gemv_q8_mma \
      --launch-skip 22 --launch-count 1 $B/bin/memra_cuda_chunk_bench 4096 4096 512 0 > "$OUT/ncu.log" 2>&1
    echo "ncu rc=$?" | tee -a "$T"
    grep -E "Stall|Warp Cycles|Issued|Eligible|No Eligible|Throughput|Active Warps|Duration" "$OUT/ncu.log" | tr -s ' ' | cut -c1-120 | tee -a "$T"
  else echo "ncu: not found" | tee -a "$T"; fi
fi
