#!/usr/bin/env bash
# chunk_int8.sh (issue 28: the int8-MMA chunk GEMVs, chunk_mma.cu and chunk_kq_mma.cu), sized for
# one device call of about 50 s after the machine's start: memra_cuda_check_chunk_mma and
# memra_cuda_check_chunk_kq (bit for bit against decode per row, their negative controls),
# memra_cuda_chunk_bench (8B's Q8_0 and Q4_K_M shapes at M 512; with OLD_BENCH set, that binary
# too, e.g. the same bench source linked against main's kernels, line by line against this one),
# llama-1b gates (q8_0, q4_k_m, q5_k_m sampled, prefill=7, a qdot=float control that must fail)
# and 8B q4_k_m pp512 (the default against chunk=mma-q8, whose K-quant chunks run as single
# steps). Run from the repository root with CARRY set to a carried release build (common.sh).
GATE_TIMEOUT=${GATE_TIMEOUT:-45}; BENCH_TIMEOUT=${BENCH_TIMEOUT:-60}
. "$(dirname "$0")/common.sh"
( timeout 60 $M mkmodel --preset llama-8b --dtype q4_k_m -o /tmp/8b-q4km.gguf > $OUT/mk8b.log 2>&1
  echo "mk8b rc=$?" >> $OUT/mk8b.log ) & MK=$!
for c in check_chunk_mma check_chunk_kq; do
  timeout 50 $B/bin/memra_cuda_$c > $OUT/$c.log 2>&1; echo "$c rc=$? t=$SECONDS: $(tail -1 $OUT/$c.log | cut -c1-120)" | tee -a $T
  grep -v PASS $OUT/$c.log | head -6 | cut -c1-220 | tee -a $T
done
for v in ${OLD_BENCH:+old} new; do
  b=$B/bin/memra_cuda_chunk_bench; [ $v = old ] && b=$OLD_BENCH
  timeout 30 $b > $OUT/bench_$v.log 2>&1; echo "bench_$v rc=$? t=$SECONDS" | tee -a $T
  grep -E "chunk=" $OUT/bench_$v.log | awk -v v=$v '{print v, $1, $2, $4 "x" $6, "glu" $10, $11, "us"}' | tee -a $T
done
P="--prime 600 --gen 32 --rows 0"
gate q8_0_pf      --a cuda:prefill=1 --b cuda-graph --preset llama-1b --dtype q8_0 $P
gate q4km_pf      --a cuda:prefill=1 --b cuda-graph --preset llama-1b --dtype q4_k_m $P
gate q5km_pf_s    --a cuda:prefill=1 --b cuda-graph --preset llama-1b --dtype q5_k_m $P --temp 0.8 --seed 3
gate q4km_pf7     --a cuda:prefill=1 --b cuda:prefill=7 --preset llama-1b --dtype q4_k_m $P
control q4km_ctl  --a cuda:prefill=1 --b cuda-graph:qdot=float --preset llama-1b --dtype q4_k_m --prime 64 --gen 8 --rows 0
wait $MK; tail -1 $OUT/mk8b.log | tee -a $T
bench pp_8b_q4km --model /tmp/8b-q4km.gguf --arm cuda-graph,cuda-graph:chunk=mma-q8 --prime 512 -n 32 --reps 2
echo "t=$SECONDS" | tee -a $T
