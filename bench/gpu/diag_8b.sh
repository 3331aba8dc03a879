#!/usr/bin/env bash
# diag_8b.sh: which part of the llama-8b cuda path is not deterministic across states?
# eager vs eager, graph with the unfused attention, graph as built; short sampled gates.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
B=$PWD/.carry-dev
export LD_LIBRARY_PATH=$B/lib MEMRA_PLUGIN_PATH=$B/plugins.d MEMRA_SYNTH_THREADS=16
G=$B/bin/memra-gate
one() { local name=$1; shift; local t0=$SECONDS
  timeout 60 env "$@" --quiet --jsonl "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1; local rc=$?
  printf '%-22s rc=%s %3ss %s\n' "$name" "$rc" "$((SECONDS-t0))" "$(grep '"record":"verdict"' "$OUT/$name.jsonl" | cut -c40-200)" | tee -a "$OUT/table.txt"; }
A="--preset llama-8b --dtype bf16 --prime 256 --gen 32 --rows 2 --temp 1 --seed 7"
one eager_eager     $G --a cuda --b cuda $A
one graph_unfused   MEMRA_CUDA_ATT_UNFUSED=1 $G --a cuda --b cuda-graph $A
one graph_default   $G --a cuda --b cuda-graph $A
