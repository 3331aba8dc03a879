#!/usr/bin/env bash
# chunk_kq.sh (issue 28, chunk=mma, the default: the Q4_K/Q5_K/Q6_K GEMVs of a prefill chunk on
# int8 tensor cores, backends/cuda/chunk_kq_mma.cu), sized for one device call of about 270 s:
#   memra_cuda_check_chunk_kq (bit for bit against decode's qdot=auto GEMV per row, its negative
#   control) and memra_cuda_check_chunk_mma (the Q8_0 kernel); on llama-1b q4_k_m and q4_k (600
#   prime, 64 generated, --rows 0): cuda prefill=1 against cuda-graph (prefill 512) greedy and
#   sampled, cuda:chunk=fma (K-quant layers as single steps) against cuda (the same bits by
#   another path); prefill=1 against prefill=7 on q4_k_m, and a control that must fail
#   (qdot=float: other bits); pp512 of llama-1b q4_k_m (the default against chunk=mma-q8, whose
#   K-quant chunks run as single steps); 8B q4_k_m pp512 when time is left.
# Run from the repository root with CARRY set to a carried release build (bench/gpu/common.sh).
GATE_TIMEOUT=${GATE_TIMEOUT:-60}; BENCH_TIMEOUT=${BENCH_TIMEOUT:-70}
. "$(dirname "$0")/common.sh"
for c in check_chunk_kq check_chunk_mma; do
  timeout 60 $B/bin/memra_cuda_$c > $OUT/$c.log 2>&1; echo "$c rc=$? $SECONDS s: $(tail -1 $OUT/$c.log | cut -c1-100)" | tee -a $T
  grep -v PASS $OUT/$c.log | head -8 | cut -c1-200 | tee -a $T
done
K="--preset llama-1b --dtype q4_k"; KM="--preset llama-1b --dtype q4_k_m"
P="--prime 600 --gen 64 --rows 0"; S="--temp 0.8 --seed 3"
gate km_pf   --a cuda:prefill=1 --b cuda-graph $KM $P
gate k_pf    --a cuda:prefill=1 --b cuda-graph $K $P
gate km_fma  --a cuda:chunk=fma --b cuda $KM $P
gate k_fma   --a cuda:chunk=fma --b cuda $K $P
gate km_pf_s --a cuda:prefill=1 --b cuda-graph $KM $P $S
gate k_pf_s  --a cuda:prefill=1 --b cuda-graph $K $P $S
gate km_pf7  --a cuda:prefill=1 --b cuda:prefill=7 $KM --prime 100 --gen 16 --rows 0
control km_ctl --a cuda:prefill=1 --b cuda-graph:qdot=float $KM --prime 64 --gen 8 --rows 0
echo "t=$SECONDS" | tee -a $T
bench km_pp $KM --arm cuda-graph,cuda-graph:chunk=mma-q8 --prime 512 -n 128 --reps 3
echo "t=$SECONDS" | tee -a $T
if [ $SECONDS -lt 150 ]; then
  timeout 75 $M mkmodel --preset llama-8b --dtype q4_k_m -o /tmp/8b.gguf > $OUT/mk8b.log 2>&1; echo "mk8b rc=$? t=$SECONDS" | tee -a $T
  [ $SECONDS -lt 225 ] && BENCH_TIMEOUT=$((262-SECONDS)) bench b8_pp --model /tmp/8b.gguf --arm cuda-graph,cuda-graph:chunk=mma-q8 --prime 512 -n 32 --reps 1
fi
cd $OUT && tar czf logs.tgz *.log *.jsonl 2>/dev/null && rm -f *.log *.jsonl
cat $T
