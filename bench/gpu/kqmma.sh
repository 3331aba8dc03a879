#!/usr/bin/env bash
# kqmma.sh (issue 28, qdot=mma: Q4_K, Q5_K and Q6_K on gemv=mma's tensor-core chain in decode and in
# the prefill chunk, backends/cuda/gemv_mma.cu and gemv_wgmma.cu); not yet timed: if one device call's
# limit is near, run the benches (the two 8B presets made in memory) in a second call:
#   memra_cuda_check_mma_gemv (the chunk against decode bit for bit on Q4_K, Q5_K, Q6_K, Q8_0 and BF16
#   shapes, a float64 reference, the negative controls) first, with a timeout: if it hangs or fails, the
#   gates and benches below would only repeat it, so the script stops there;
#   llama-1b q4_k, q5_k, q6_k and q4_k_m with qdot=mma: prefill=1 against prefill=512 and against
#   cuda-graph prefill=7 sampled; eager against graph 256 + 256 sampled on q4_k;
#   gemma3-270m q4_k and q6_k (its post-norm GEMVs) prefill=1 against 512, eager against graph; cpu against
#   cuda:qdot=mma in nmse mode (small q4_k, q5_k, q6_k); a control that must fail (qdot=auto against
#   qdot=mma); pp512 and decode of llama-8b q4_k (the default graph arm, qdot=mma eager and graph,
#   and qdot=mma with attention=mma,kv=bf16: issue 28 asks 9.8k at decode's bits) and q4_k_m.
# Run from the repository root with CARRY set to a carried release build (bench/gpu/common.sh).
# PART=checks runs the check program and the gates, PART=bench the benches alone; the default both.
GATE_TIMEOUT=${GATE_TIMEOUT:-90}; BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}; PART=${PART:-all}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$T"
Q=qdot=mma; S="--temp 1 --seed 5"
if [ "$PART" != bench ]; then
timeout 300 $B/bin/memra_cuda_check_mma_gemv > $OUT/check_mma_gemv.log 2>&1; rc=$?
echo "check_mma_gemv rc=$rc $SECONDS s: $(tail -1 $OUT/check_mma_gemv.log | cut -c1-100)" | tee -a $T
grep -v PASS $OUT/check_mma_gemv.log | head -12 | cut -c1-200 | tee -a $T
[ $rc -eq 0 ] || { echo "check failed or hung: stopping" | tee -a $T; cat $T; exit 1; }
for d in q4_k q5_k q6_k q4_k_m; do
  K="--preset llama-1b --dtype $d"
  gate ${d}_p1_p512 --a cuda:$Q,prefill=1 --b cuda:$Q,prefill=512 $K --prime 600 --gen 64 --rows 0
  gate ${d}_p1_g7_s --a cuda:$Q,prefill=1 --b cuda-graph:$Q,prefill=7 $K --prime 300 --gen 64 --rows 0 $S
done
gate k_e_g_s    --a cuda:$Q --b cuda-graph:$Q --preset llama-1b --dtype q4_k --prime 256 --gen 256 --rows 0 $S
# gemma3-270m: its wo and down (1,024 and 2,048 columns) are the K-quant matrices, each GEMV with the
# post norm fused (mc_gemv_post's decode kernel, which check_mma_gemv does not launch)
for d in q4_k q6_k; do
  gate g3_${d}_p1_p512 --a cuda:$Q,prefill=1 --b cuda:$Q,prefill=512 --preset gemma3-270m --dtype $d --prime 300 --gen 32 --rows 0 $S
done
gate g3_e_g     --a cuda:$Q --b cuda-graph:$Q --preset gemma3-270m --dtype q4_k --prime 64 --gen 64 --rows 0
for d in q4_k q5_k q6_k; do
  gate ${d}_cpu_nmse --a cpu --b cuda:$Q --preset small --dtype $d --prime 32 --gen 32 --rows 0 --compare nmse:1e-3
done
control k_ctl   --a cuda --b cuda:$Q --preset llama-1b --dtype q4_k --prime 64 --gen 16 --rows 0
echo "t=$SECONDS" | tee -a $T
fi
[ "$PART" = checks ] && { cat $T; exit 0; }
bench k8b --preset llama-8b --dtype q4_k --arm cuda-graph,cuda:$Q,cuda-graph:$Q,cuda-graph:$Q,attention=mma,kv=bf16 --prime 512 -n 64 --reps 2
bench km8b --preset llama-8b --dtype q4_k_m --arm cuda-graph,cuda-graph:$Q,attention=mma,kv=bf16 --prime 512 -n 64 --reps 2
echo "t=$SECONDS" | tee -a $T
cat $T
