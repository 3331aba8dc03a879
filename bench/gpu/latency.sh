#!/usr/bin/env bash
# latency.sh: the memory system's latency and a dependent launch's parts on whichever card runs it
# (memra_cuda_mem_latency: a pointer chase from L1, L2, far L2 and HBM; empty, handoff and cold PDL
# chains), commit=sampler's bits at window=3, then commit=launch against commit=sampler on 8B
# Q6_K (--abba). Issues 26 and 27's open question (thirty-third session): is the H200's larger
# fixed cost a boundary its memory's latency? Run it on an H200 beside the H100 rows of RESULTS'
# thirty-third session. Binaries carried (bin,
# lib, plugins.d in $CARRY, with bin/memra_cuda_mem_latency); a short table last, logs under $OUT.
#   bash bench/gpu/latency.sh [any|H200]   (default H200: stops at once on another card)
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$T"
need_card "${1:-H200}"
timeout 120 "$B/bin/memra_cuda_mem_latency" > "$OUT/mem_latency.log" 2>&1
echo "mem_latency rc=$?" | tee -a "$T"
tee -a "$T" < "$OUT/mem_latency.log"
# commit=sampler's bits where the H100 calls did not reach: a window of 3 steps in flight, sampled
gate c_w3_temp --a cuda --b cuda-graph:commit=sampler,window=3 --preset llama-1b --dtype bf16 --prime 256 --gen 256 --rows 0 --temp 1 --seed 11
W=/tmp/w; mkdir -p $W
mk llama-8b q6_k
bench b_8b_q6k --model $W/llama-8b-q6_k.gguf --arm cuda-graph:commit=launch,cuda-graph:commit=sampler --prime 512 -n 128 --reps 10 --abba
echo ---; cat "$T"
