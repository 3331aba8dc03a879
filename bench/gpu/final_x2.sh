#!/usr/bin/env bash
# final_x2.sh: the last checks of a session on two H200s, with binaries built on the
# development machine (carried build-dev): cross-device stages, window pipelining across
# devices, the graph gate on llama-1b and the no-argument gate. Short table last.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
B=$PWD/.carry-dev
export LD_LIBRARY_PATH=$B/lib MEMRA_PLUGIN_PATH=$B/plugins.d
G=$B/bin/memra-gate
T="$OUT/table.txt"; : > "$T"
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$OUT/machine.txt" 2>&1
nvidia-smi topo -m >> "$OUT/machine.txt" 2>&1
gate() { local name=$1; shift; local t0=$SECONDS
  "$G" "$@" --quiet --jsonl "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1; local rc=$?
  local v=$(grep '"record":"verdict"' "$OUT/$name.jsonl" | cut -c1-170)
  local s=$(grep '"record":"summary"' "$OUT/$name.jsonl" | grep -o '"ratio_b_over_a":[0-9.]*' )
  printf '%-34s rc=%s %3ss %s %s\n' "$name" "$rc" "$((SECONDS-t0))" "$s" "$v" | tee -a "$T"; }
case "${1:-all}" in
all)
gate xdev_small_greedy   --a cuda --b cuda:stages=2,devices=0,1 --preset small --prime 256 --gen 256 --rows 4
gate xdev_small_w3_temp  --a cuda --b cuda:stages=2,devices=0,1,window=3 --preset small --prime 256 --gen 256 --temp 1 --seed 11 --rows 4
gate xdev4_small_split   --a cuda:stages=4,devices=0,1,0,1 --b cuda --preset small --prime 128 --gen 128 --rows 0
gate xdev_graph_small    --a cuda --b cuda-graph:stages=2,devices=0,1 --preset small --prime 128 --gen 128 --temp 1 --seed 3 --rows 4
gate noargs_tiny
gate graph_1b_bf16_abba  --a cuda --b cuda-graph --preset llama-1b --dtype bf16 --prime 256 --gen 256 --rows 20
gate graph_1b_q8_baab    --a cuda --b cuda-graph --preset llama-1b --dtype q8_0 --prime 256 --gen 256 --rows 8 --schedule BAAB --temp 1 --seed 20261129
;;
graph)
gate xdev_graph_small    --a cuda --b cuda-graph:stages=2,devices=0,1 --preset small --prime 256 --gen 256 --temp 1 --seed 3 --rows 4
gate xdev_graph_w3_1b    --a cuda-graph --b cuda-graph:stages=2,devices=0,1,window=3 --preset llama-1b --dtype bf16 --prime 256 --gen 256 --rows 4
MEMRA_SYNTH_THREADS=16 timeout 150 "$G" --a cuda --b cuda-graph --preset llama-8b --dtype bf16 --prime 256 --gen 256 --rows 4 --temp 1 --seed 7 --quiet --jsonl "$OUT/graph_8b.jsonl" > "$OUT/graph_8b.log" 2>&1
printf '%-34s rc=%s %s\n' graph_8b_bf16_sampled "$?" "$(grep '"record":"verdict"' "$OUT/graph_8b.jsonl" | cut -c1-150)" | tee -a "$T"
;;
esac
echo; cat "$T"
