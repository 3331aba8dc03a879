#!/usr/bin/env bash
# attn_chunk.sh (issue 28, attention_chunk_rows: a prefill chunk's attention on one block per row
# and kv head, with the cluster kernel's bits). Run from the repository root with CARRY set to a
# carried release build of the branch (bench/gpu/common.sh) and OLD to one of the commit before
# (bin, lib, plugins.d), both on the device:
#   1. memra_cuda_check_attn_chunk: the chunk's attention bit for bit against decode row by row
#      (and the old launch), with its negative control (the split path's chunk must differ)
#   2. memra_cuda_check_attn_chunk bench: the chunk attention alone, old launch against new
#   3. gates (exact, --rows 0): llama-1b bf16 prime 600 gen 32, cuda:prefill=1 against cuda-graph
#      greedy and --temp 0.8 --seed 3, and against cuda:prefill=7; llama-8b bf16 prime 520 gen 16
#   4. pp512 (memra bench) of llama-1b bf16 cuda-graph and cuda-graph:gemv=mma, and of llama-8b
#      gemv=mma, OLD's build and this one (the 8B parts only while the 160 s budget allows)
# The run of 2026-12-02 (bench/gpu/NOTES.md) took 79 s on a cold H200.
GATE_TIMEOUT=60; BENCH_TIMEOUT=60
. "$(dirname "$0")/common.sh"
O=${OLD:?set OLD to the old build (bin, lib, plugins.d)}
left() { echo $((160 - SECONDS)); }
use() { export LD_LIBRARY_PATH=$1/lib MEMRA_PLUGIN_PATH=$1/plugins.d; M=$1/bin/memra; G=$1/bin/memra-gate; }
use $B
timeout 60 $B/bin/memra_cuda_check_attn_chunk > $OUT/check.log 2>&1
echo "check rc=$? $(tail -1 $OUT/check.log)" | tee -a $T
grep -v "^control" $OUT/check.log | head -6 | cut -c1-200 | tee -a $T
grep "^control" $OUT/check.log | cut -c1-160 | tee -a $T
timeout 30 $B/bin/memra_cuda_check_attn_chunk bench > $OUT/bench_attn.log 2>&1; echo "bench_attn rc=$?" | tee -a $T
tee -a $T < $OUT/bench_attn.log
S1="--preset llama-1b --dtype bf16 --prime 600 --gen 32 --rows 0"
GATE_TIMEOUT=40 gate b1_graph --a cuda:prefill=1 --b cuda-graph $S1
GATE_TIMEOUT=40 gate b1_graph_temp --a cuda:prefill=1 --b cuda-graph $S1 --temp 0.8 --seed 3
GATE_TIMEOUT=40 gate b1_prefill7 --a cuda:prefill=1 --b cuda:prefill=7 $S1
PP="--preset llama-1b --dtype bf16 --arm cuda-graph,cuda-graph:gemv=mma --prime 512 -n 128 --reps 3"
use $O; BENCH_TIMEOUT=30 bench pp1b_old $PP
use $B; BENCH_TIMEOUT=30 bench pp1b_new $PP
[ $(left) -gt 40 ] && GATE_TIMEOUT=$(left) gate b8_graph --a cuda:prefill=1 --b cuda-graph --preset llama-8b --dtype bf16 --prime 520 --gen 16 --rows 0
PP8="--preset llama-8b --dtype bf16 --arm cuda-graph:gemv=mma --prime 512 -n 16 --reps 2"
[ $(left) -gt 40 ] && { use $O; BENCH_TIMEOUT=$(( $(left) / 2 )) bench pp8b_old $PP8; }
[ $(left) -gt 20 ] && { use $B; BENCH_TIMEOUT=$(left) bench pp8b_new $PP8; }
echo "t=$SECONDS" >> $T
cd $OUT && tar czf logs.tgz *.log *.jsonl 2>/dev/null; rm -f *.log *.jsonl
cat $T
