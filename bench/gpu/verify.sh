#!/usr/bin/env bash
# verify.sh: gates on the H200(s) with binaries built on the development machine (carried in
# .carry-dev: bin, lib, plugins.d). Modes (any number, in order):
#   graph    the issue-6 graph gates: tiny, llama-1b, llama-8b, BF16 and Q8_0, greedy and sampled
#   stages   the issue-5 stage gates (small, llama-1b), windows 1 and 3, greedy and sampled
#   xdev     stages and graph stages across two GPUs (needs nvidia-h200-x2)
#   nmse     cpu vs cuda (check_arms, NMSE per step) on tiny, small, qwen3-tiny, qwen2-tiny at every
#            dtype and llama-1b BF16 / Q8_0; cuda vs cuda-graph / stages exact (check_arms)
#   sanitize compute-sanitizer memcheck and racecheck, 8+8 steps of tiny and small (BF16, Q8_0)
#   kernels  per-kernel timing (memra_cuda_kernel_bench), 8b BF16 / Q8_0, 1b BF16, at 576
#   speed    memra bench, 512 + 128, eager and graph, 8b BF16 / Q8_0, 1b BF16
#   quick    five gates that catch a non-deterministic kernel fast (1b, 8b Q8_0 graph; small stages)
#   pdl      the arm option pdl=0 (eager without programmatic launch) against graph and eager
#   sampler  the device sampler against the cpu sampler (memra_cuda_check_sampler)
#   seq      the kernel bench (kernels alone, then in the layer sequence and without each kind) on
#            8b Q8_0 / BF16 and 1b BF16, and on 8b Q8_0 with a few arm keys (trigger=, pdl=)
#   final1, final2  a last call's checks split in two for one GPU (speed, sanitizer; the graph
#            gates, NMSE)
#   final    the session's last call (two GPUs): speed, every gate of issues 5 and 6, NMSE,
#            compute-sanitizer, most important first
# A previous build against this one (bits and speed): bench/gpu/compare_builds.sh. One variant
# against another: a gate of two arms (e.g. --a cuda-graph --b cuda-graph:trigger=19).
# A short table last; logs under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 MEMRA_SYNTH_THREADS=16
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
use() { B=$1; export LD_LIBRARY_PATH=$B/lib MEMRA_PLUGIN_PATH=$B/plugins.d; G=$B/bin/memra-gate; }
use "$PWD/.carry-dev"
T="$OUT/table.txt"
nvidia-smi --query-gpu=index,name,memory.used,clocks.sm --format=csv > "$OUT/machine.txt" 2>&1
gate() { local name=$1; shift; local t0=$SECONDS
  timeout 200 "$G" "$@" --quiet --jsonl "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1; local rc=$?
  local v=$(grep '"record":"verdict"' "$OUT/$name.jsonl" 2>/dev/null | grep -o '"pass":[a-z]*\|"reason":"[^"]*"' | tr '\n' ' ' | cut -c1-120)
  local s=$(grep '"record":"summary"' "$OUT/$name.jsonl" 2>/dev/null | grep -o '"ratio_b_over_a":[0-9.]*')
  local c=$(grep -o '"captures":[0-9]*' "$OUT/$name.jsonl" 2>/dev/null | sort -u | tr '\n' ' ')
  printf '%-28s rc=%s %3ss %s %s %s\n' "$name" "$rc" "$((SECONDS-t0))" "$v" "$s" "$c" | tee -a "$T"
  [ $rc -eq 0 ] || tail -3 "$OUT/$name.log" | cut -c1-200 | tee -a "$T"; }
bench() { local name=$1; shift; local t0=$SECONDS
  timeout 200 "$B/bin/memra" bench "$@" --jsonl "$OUT/bench.jsonl" > "$OUT/$name.log" 2>&1; local rc=$?
  printf '%-28s rc=%s %3ss %s\n' "$name" "$rc" "$((SECONDS-t0))" "$(grep '^| [a-z]' "$OUT/$name.log" | grep -v '^| arm ' | head -2 | tr -s ' ' | tr '\n' ' ' | cut -c1-150)" | tee -a "$T"; }
S="--prime 256 --gen 256"
# the device sampler against the cpu sampler (memra_cuda_check_sampler), one table row
sampler_check() { $B/bin/memra_cuda_check_sampler > "$OUT/$1.log" 2>&1
  echo "$1 rc=$? $(tail -1 "$OUT/$1.log" | cut -c1-120)" | tee -a "$T"; }
do_nmse() {
  CA=$B/bin/memra_cuda_check_arms
  ck() { local name=$1; shift; local t0=$SECONDS; timeout 300 "$CA" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
    printf '%-34s rc=%s %3ss %s\n' "$name" "$rc" "$((SECONDS-t0))" "$(tail -1 "$OUT/$name.log" | cut -c1-110)" | tee -a "$T"; }
  for p in tiny small qwen3-tiny qwen2-tiny; do for d in f32 f16 bf16 q8_0; do
    ck "n_${p}_${d}" --a cpu --b cuda --preset $p --dtype $d --prime 32 --gen 32 --nmse 1e-5
  done; done
  ck n_tiny_tokens128 --a cpu --b cuda --preset tiny --prime 1 --gen 127 --nmse 1e-5
  for d in bf16 q8_0; do ck "n_1b_$d" --a cpu --b cuda --preset llama-1b --dtype $d --prime 8 --gen 8 --nmse 1e-5; done
  for d in bf16 q8_0; do
    ck "e_small_${d}_graph" --a cuda --b cuda-graph --preset small --dtype $d --prime 64 --gen 64 --temp 1 --seed 7
    ck "e_small_${d}_s4w3" --a cuda --b cuda:stages=4 --window 3 --preset small --dtype $d --prime 64 --gen 64
  done
  ck neg_perturb40 --a cuda --b cuda-graph --preset small --prime 32 --gen 32 --perturb-step 40
}
# the issue-6 graph gates of a last call: 256 + 256, greedy and T 1, 8b (2 rows), 1b (20 rows,
# ABBA and BAAB), tiny
final_graph_gates() {
  gate f_g8b_bf16_greedy --a cuda --b cuda-graph --preset llama-8b --dtype bf16 $S --rows 2
  gate f_g8b_bf16_temp   --a cuda --b cuda-graph --preset llama-8b --dtype bf16 $S --rows 2 --temp 1 --seed 7 --schedule BAAB
  gate f_g8b_q8_greedy   --a cuda --b cuda-graph --preset llama-8b --dtype q8_0 $S --rows 2
  gate f_g8b_q8_temp     --a cuda --b cuda-graph --preset llama-8b --dtype q8_0 $S --rows 2 --temp 1 --seed 7 --schedule BAAB
  gate f_g1b_bf16_abba   --a cuda --b cuda-graph --preset llama-1b --dtype bf16 $S --rows 20
  gate f_g1b_q8_temp_baab --a cuda --b cuda-graph --preset llama-1b --dtype q8_0 $S --rows 20 --temp 1 --seed 20261129 --schedule BAAB
  gate f_gtiny_greedy    --a cuda --b cuda-graph --preset tiny --dtype bf16 $S --rows 4
  gate f_gtiny_temp      --a cuda --b cuda-graph --preset tiny --dtype bf16 $S --rows 4 --temp 1 --seed 3 --schedule BAAB
}
for mode in "$@"; do case $mode in
graph)
  for p in tiny llama-1b llama-8b; do for d in bf16 q8_0; do
    [ $p = tiny ] && [ $d = q8_0 ] && continue
    gate "g_${p}_${d}_greedy" --a cuda --b cuda-graph --preset $p --dtype $d $S --rows 20
    gate "g_${p}_${d}_temp"   --a cuda --b cuda-graph --preset $p --dtype $d $S --rows 20 --schedule BAAB --temp 1 --seed 20261129
  done; done ;;
stages)
  for p in small llama-1b; do for b in cuda:stages=2 cuda:stages=4,window=3 cuda:stages=2,splits=5,window=3; do
    gate "s_${p}_${b//[:=,]/_}" --a cuda --b $b --preset $p $S --rows 0 --temp 1 --seed 5
  done; done ;;
xdev)
  gate x_small_greedy  --a cuda --b cuda:stages=2,devices=0,1 --preset small $S --rows 4
  gate x_1b_w3_temp    --a cuda --b cuda:stages=2,devices=0,1,window=3 --preset llama-1b $S --temp 1 --seed 11 --rows 4
  gate xg_small_temp   --a cuda --b cuda-graph:stages=2,devices=0,1 --preset small $S --temp 1 --seed 3 --rows 4
  gate xg_1b_w3        --a cuda-graph --b cuda-graph:stages=2,devices=0,1,window=3 --preset llama-1b --dtype bf16 $S --rows 4
  ;;
nmse) do_nmse ;;
sanitize)
  CA=$B/bin/memra_cuda_check_arms
  for p in tiny small; do for d in bf16 q8_0; do for tool in memcheck racecheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$CA" --a cuda --b cuda-graph --preset $p --dtype $d --prime 8 --gen 8 --temp 1 --top-k 20 > "$OUT/san_${p}_${d}_$tool.log" 2>&1
    printf '%-34s rc=%s %s\n' "san_${p}_${d}_$tool" "$?" "$(grep -m1 'ERROR SUMMARY' "$OUT/san_${p}_${d}_$tool.log")" | tee -a "$T"
  done; done; done ;;
kernels)
  for a in "8b bf16" "8b q8_0" "1b bf16" "1b q8_0"; do
    $B/bin/memra_cuda_kernel_bench $a 576 > "$OUT/kern_${a// /_}.log" 2>&1
    echo "== kernels $a rc=$?" | tee -a "$T"; grep -v '^#' "$OUT/kern_${a// /_}.log" | tail -13 | tee -a "$T"
  done
  for a in "8b q8_0" "1b bf16"; do
    $B/bin/memra_cuda_kernel_bench $a 576 attention=tiled q8=float > "$OUT/kern_v6_${a// /_}.log" 2>&1
    echo "== kernels (attention=tiled q8=float) $a rc=$?" | tee -a "$T"; grep -v '^#' "$OUT/kern_v6_${a// /_}.log" | tail -13 | tee -a "$T"
  done ;;
final)
  # the session's last call (two GPUs): speed, the issue-6 graph gates, stages across devices,
  # the issue-5 stage gates, NMSE against cpu, compute-sanitizer; most important first
  for a in "llama-8b bf16" "llama-8b q8_0" "llama-1b bf16"; do set -- $a; for arm in cuda cuda-graph; do
    bench "f_${1}_${2}_${arm}" --backend $arm --preset $1 --dtype $2 --prime 512 -n 128
  done; done
  final_graph_gates
  for p in tiny small llama-1b; do for d in f32 f16 bf16 q8_0; do
    n=64; [ $p = llama-1b ] && n=12
    gate "f_nmse_${p}_${d}" --a cpu --b cuda --compare nmse:1e-4 --preset $p --dtype $d --prime $n --gen $n --rows 0
  done; done
  gate f_x_small_greedy  --a cuda --b cuda:stages=2,devices=0,1 --preset small $S --rows 0
  gate f_x_1b_w3_temp    --a cuda --b cuda:stages=2,devices=0,1,window=3 --preset llama-1b $S --temp 1 --seed 11 --rows 0
  gate f_xg_small_temp   --a cuda --b cuda-graph:stages=2,devices=0,1 --preset small $S --temp 1 --seed 3 --rows 0
  gate f_xg_1b_w3        --a cuda-graph --b cuda-graph:stages=2,devices=0,1,window=3 --preset llama-1b --dtype bf16 $S --rows 0
  for p in small llama-1b; do for b in cuda:stages=2 cuda:stages=4,window=3 cuda:stages=2,splits=5,window=3; do
    gate "f_s_${p}_${b//[:=,]/_}" --a cuda --b $b --preset $p $S --rows 0 --temp 1 --seed 5
  done; done
  do_nmse
  CA=$B/bin/memra_cuda_check_arms
  for d in bf16 q8_0; do for tool in memcheck racecheck; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 "$CA" --a cuda --b cuda-graph --preset small --dtype $d --prime 8 --gen 8 --temp 1 --top-k 20 > "$OUT/san_small_${d}_$tool.log" 2>&1
    printf '%-34s rc=%s %s\n' "f_san_small_${d}_$tool" "$?" "$(grep -m1 'SUMMARY' "$OUT/san_small_${d}_$tool.log")" | tee -a "$T"
  done; done
  sampler_check f_check_sampler ;;
final1)
  # a last call on one GPU, part 1: speed, compute-sanitizer
  for a in "llama-8b bf16" "llama-8b q8_0" "llama-1b bf16"; do set -- $a; for arm in cuda-graph cuda; do
    bench "f_${1}_${2}_${arm}" --backend $arm --preset $1 --dtype $2 --prime 512 -n 128
  done; done
  CA=$B/bin/memra_cuda_check_arms
  for d in bf16 q8_0; do for tool in memcheck racecheck; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 "$CA" --a cuda --b cuda-graph --preset small --dtype $d --prime 8 --gen 8 --temp 1 --top-k 20 > "$OUT/san_small_${d}_$tool.log" 2>&1
    printf '%-34s rc=%s %s\n' "f_san_small_${d}_$tool" "$?" "$(grep -m1 'SUMMARY' "$OUT/san_small_${d}_$tool.log")" | tee -a "$T"
  done; done ;;
final2)
  # part 2: the issue-6 graph gates (256 + 256, timing rows), NMSE against cpu, check_arms
  final_graph_gates
  do_nmse ;;
quick)
  gate q_1b_bf16_greedy --a cuda --b cuda-graph --preset llama-1b --dtype bf16 $S --rows 2
  gate q_1b_bf16_temp  --a cuda --b cuda-graph --preset llama-1b --dtype bf16 $S --rows 4 --temp 1 --seed 7
  gate q_1b_q8_temp    --a cuda --b cuda-graph --preset llama-1b --dtype q8_0 $S --rows 4 --temp 1 --seed 7
  gate q_8b_q8_temp    --a cuda --b cuda-graph --preset llama-8b --dtype q8_0 $S --rows 4 --temp 1 --seed 7
  gate q_small_s4w3    --a cuda --b cuda:stages=4,window=3 --preset small --dtype q8_0 $S --rows 0 --temp 1 --seed 5 ;;
seq)
  # kernels alone and in the layer sequence (memra_cuda_kernel_bench), with a few arm keys on 8b Q8_0
  for v in "" trigger=19 trigger=127 pdl=0; do
    for a in "8b q8_0" "8b bf16" "1b bf16"; do
      [ -n "$v" ] && [ "$a" != "8b q8_0" ] && continue
      n="seq_${a// /_}_${v:-default}"
      $B/bin/memra_cuda_kernel_bench $a 576 $v > "$OUT/$n.log" 2>&1
      echo "== $n rc=$? $(grep '^per token' "$OUT/$n.log" | tr -s ' ' | cut -c1-60)" | tee -a "$T"; grep '^seq' "$OUT/$n.log" | tee -a "$T"
    done
  done ;;
sampler) sampler_check check_sampler ;;
pdl)
  # the arm option pdl=0 (plain stream order): graph and eager against eager without PDL on
  # llama-1b (20 rows ABBA), 8b Q8_0 (2 rows), a graph captured without PDL; benches
  gate p_1b_nopdl_vs_graph  --a cuda:pdl=0 --b cuda-graph --preset llama-1b --dtype bf16 $S --rows 20
  gate p_1b_nopdl_vs_cuda   --a cuda:pdl=0 --b cuda --preset llama-1b --dtype bf16 $S --rows 20
  gate p_8bq_nopdl_vs_graph --a cuda:pdl=0 --b cuda-graph --preset llama-8b --dtype q8_0 $S --rows 2
  gate p_small_graph_nopdl  --a cuda --b cuda-graph:pdl=0 --preset small $S --rows 4 --temp 1 --seed 3
  for arm in cuda:pdl=0 cuda-graph:pdl=0; do
    bench "p_1b_${arm/:pdl=0/}_nopdl" --backend $arm --preset llama-1b --dtype bf16 --prime 512 -n 128
  done
  grep '"record":"protocol"' "$OUT/p_1b_nopdl_vs_graph.jsonl" | grep -o '"resolved_text":"[^"]*"' | tee -a "$T" ;;
speed)
  for a in "llama-8b bf16" "llama-8b q8_0" "llama-1b bf16"; do set -- $a; for arm in cuda cuda-graph; do
    bench "b_${1}_${2}_${arm}" --backend $arm --preset $1 --dtype $2 --prime 512 -n 128
  done; done ;;
esac; done
(cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude=table.txt * && find . -maxdepth 1 -type f ! -name logs.tgz ! -name table.txt ! -name machine.txt -delete)
echo; cat "$T"
