#!/usr/bin/env bash
# chunk_mma.sh (issue 28, chunk=mma: the prefill chunk's integer Q8_0 GEMV on int8 tensor cores):
# the device check program (bit for bit against decode per row, with its negative control), the
# kernel bench (chunk=mma tiles against chunk=fma on 8B's shapes, M 512), then on llama-1b and
# llama-8b Q8_0 (256 prime, 256 generated steps, --rows 2): cuda prefill=1 against prefill=512
# greedy and sampled, cuda-graph likewise, prefill=7, chunk=fma against chunk=mma at prefill=512,
# and a negative control (prefill=512 against q8=float, which must fail); last, memra bench of
# both models (pp512 and decode) on cuda-graph and cuda with chunk=mma and chunk=fma.
# Run from the repository root with CARRY set to a carried release build (bench/gpu/common.sh).
GATE_TIMEOUT=${GATE_TIMEOUT:-150}; BENCH_TIMEOUT=${BENCH_TIMEOUT:-150}
. "$(dirname "$0")/common.sh"
W=${W:-/tmp/q8mma}; mkdir -p $W
( mk llama-8b q8_0 ) & MKPID=$!
timeout 180 $B/bin/memra_cuda_check_chunk_mma > "$OUT/check_chunk_mma.log" 2>&1
echo "check_chunk_mma rc=$? $(tail -1 "$OUT/check_chunk_mma.log")" | tee -a "$T"
[ "$(tail -1 "$OUT/check_chunk_mma.log" | grep -c PASS)" = 1 ] || head -8 "$OUT/check_chunk_mma.log" | cut -c1-220 | tee -a "$T"
timeout 120 $B/bin/memra_cuda_chunk_bench > "$OUT/chunk_bench.log" 2>&1; echo "chunk_bench rc=$?" | tee -a "$T"
cut -c1-175 "$OUT/chunk_bench.log" | tee -a "$T"
mk llama-1b q8_0
S="--prime 256 --gen 256 --rows 2"; TEMP="--temp 1 --seed 20261201 --schedule BAAB"
for m in llama-1b llama-8b; do
  [ $m = llama-8b ] && wait $MKPID
  F="--model $W/$m-q8_0.gguf"; n=${m#llama-}
  gate "${n}_prefill"       --a cuda:prefill=1 --b cuda:prefill=512 $F $S
  gate "${n}_prefill_temp"  --a cuda:prefill=1 --b cuda:prefill=512 $F $S $TEMP
  gate "${n}_gprefill"      --a cuda-graph:prefill=1 --b cuda-graph:prefill=512 $F $S
  gate "${n}_gprefill_temp" --a cuda-graph:prefill=1 --b cuda-graph:prefill=512 $F $S $TEMP
  gate "${n}_prefill7"      --a cuda:prefill=1 --b cuda:prefill=7 $F $S
  gate "${n}_fma_mma"       --a cuda:chunk=fma,prefill=512 --b cuda:chunk=mma,prefill=512 $F $S
  control "${n}_ctl_q8float" --a cuda:prefill=512 --b cuda:q8=float,prefill=512 $F $S
done
for m in llama-1b llama-8b; do
  bench "bench_${m#llama-}" --model $W/$m-q8_0.gguf --arm cuda-graph,cuda,cuda-graph:chunk=fma,cuda:chunk=fma \
    --prime 512 -n 128 --reps 3
done
