#!/usr/bin/env bash
# ring.sh: the result ring's rule on the device (thirty-second session): a sampled step's entry is
# handed back only with its tag (backends/cuda/ring_wait.h). Every read of the ring passes through
# it now, so these gates check that no good step is refused: wait=ring and wait=event, window 1
# and 3, stages, the graph arm, greedy and sampled, a K-quant and gemma3; and the device sampler
# against the cpu's. Binaries carried (bin, lib, plugins.d in $CARRY). A short table last.
#   bash bench/gpu/ring.sh
. "$(dirname "$0")/common.sh"
S="--prime 256 --gen 256"
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee -a "$T"
$B/bin/memra_cuda_check_sampler > "$OUT/sampler.log" 2>&1
echo "sampler rc=$? $(tail -1 "$OUT/sampler.log" | cut -c1-120)" | tee -a "$T"
gate r_1b_q6k_greedy --a cuda --b cuda-graph --preset llama-1b --dtype q6_k $S --rows 2
gate r_1b_q6k_temp   --a cuda --b cuda-graph --preset llama-1b --dtype q6_k $S --rows 4 --temp 1 --seed 7
gate r_1b_event_temp --a cuda:wait=event --b cuda-graph --preset llama-1b --dtype q6_k $S --rows 2 --temp 1 --seed 7
gate r_1b_w3_temp    --a cuda-graph --b cuda-graph:window=3 --preset llama-1b --dtype bf16 $S --rows 2 --temp 1 --seed 11
gate r_small_s2w3    --a cuda --b cuda:stages=2,window=3 --preset small --dtype q8_0 $S --rows 0 --temp 1 --seed 5
gate r_g3_temp       --a cuda --b cuda-graph --preset gemma3-270m --dtype q4_k_m $S --rows 2 --temp 1 --seed 3
gate r_g3_event      --a cuda-graph:wait=event --b cuda-graph --preset gemma3-270m --dtype q4_k_m $S --rows 2
