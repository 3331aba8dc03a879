#!/usr/bin/env bash
# tails.sh: the step's tail keys on an H200 (thirty-fourth session): the memory-latency probe
# (memra_cuda_mem_latency); commit=launch / sampler / handoff / handoff,wait=word with --abba on 8B
# Q6_K (with head and head,wait=word too: the thirty-fifth session's, greedy's argmax in the K-quant
# head's launch), llama-1b BF16 and 8B Q8_0; gemma3-270m, where handoff does not apply (launch / sampler /
# sampler,wait=word); two exact gates of handoff (timing rows restored from the prefix; sampled at
# window 3). Binaries carried (bin with memra_cuda_mem_latency, lib, plugins.d in $CARRY); a short
# table last, logs under $OUT.
#   bash bench/gpu/tails.sh [any|H200]   (default H200: stops at once on another card; ONLY=q6k: the
#   probe and the 8B Q6_K A/B alone)
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$T"
need_card "${1:-H200}"
timeout 120 "$B/bin/memra_cuda_mem_latency" > "$OUT/mem_latency.log" 2>&1
echo "mem_latency rc=$?" | tee -a "$T"
tee -a "$T" < "$OUT/mem_latency.log"
W=/tmp/w; mkdir -p $W
A=cuda-graph:commit=launch,cuda-graph:commit=sampler,cuda-graph:commit=handoff,cuda-graph:commit=handoff,wait=word
AH=$A,cuda-graph:commit=head,cuda-graph:commit=head,wait=word
mk llama-8b q6_k
bench b_8b_q6k --model $W/llama-8b-q6_k.gguf --arm $AH --prime 512 -n 128 --reps 10 --abba
# ONLY=q6k: the probe and 8B Q6_K's A/B alone (about 3 minutes, for a short device budget)
[ "${ONLY:-}" = q6k ] && { echo ---; cat "$T"; exit 0; }
mk llama-1b bf16
bench b_1b_bf16 --model $W/llama-1b-bf16.gguf --arm $A --prime 512 -n 128 --reps 10 --abba
gate e_bf16_greedy --a cuda --b cuda-graph:commit=handoff --model $W/llama-1b-bf16.gguf --prime 256 --gen 256 --rows 4
gate e_bf16_temp --a cuda:commit=handoff --b cuda-graph:commit=handoff,wait=word,window=3 \
    --model $W/llama-1b-bf16.gguf --prime 256 --gen 256 --rows 0 --temp 1 --top-k 40 --seed 11
mk gemma3-270m q4_k_m
bench b_g3 --model $W/gemma3-270m-q4_k_m.gguf --arm cuda-graph:commit=launch,cuda-graph:commit=sampler,cuda-graph:commit=sampler,wait=word \
    --prime 512 -n 128 --reps 10 --abba
mk llama-8b q8_0
bench b_8b_q8 --model $W/llama-8b-q8_0.gguf --arm $A --prime 512 -n 128 --reps 10 --abba
echo ---; cat "$T"
