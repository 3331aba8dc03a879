#!/usr/bin/env bash
# quant.sh: the H200 checks of issue 26 (the published quant types and gemma3 on cuda and
# cuda-graph), with binaries built on the development machine and carried in .carry-dev (bin,
# lib, plugins.d). Modes (any number, in order):
#   nmse       cpu against cuda, nmse mode, 32 + 32 steps: tiny (the legacy types; its rows are
#              not multiples of 256, so a K-quant tiny file is Q8_0), small (every type and both
#              mixes) and gemma3-tiny, each at qdot=auto and qdot=float
#   exact1b    cuda against cuda-graph, 256 + 256, 20 ABBA rows, llama-1b in every new type and
#              both mixes, greedy and sampled (T 1, BAAB)
#   exact8b T  the same on llama-8b files of the types T (comma list; written once by mkmodel)
#   gemma      the gemma3-270m preset: cuda against cuda-graph (greedy and sampled, 20 rows, 600
#              prime steps: past the 512 window), cpu against cuda nmse
#   tp         cuda:tp=2 against cuda-graph:tp=2 on llama-8b q4_k_m (one GPU, two ranks)
#   t8b T      per type of T: exact8b, speed (for the types in $S8) and tp (q4_k_m), then rm
#   speed T    memra bench --prime 512 -n 128, graph and eager, llama-8b in the types T
#   real F     a real file F (under /tmp): cuda against cuda-graph from a --prompt, cpu against
#              cuda nmse, memra run --chat on cuda-graph, memra bench of both arms
# A short table last ($OUT/table.txt); logs under $OUT.
. "$(dirname "$0")/common.sh"
W=/tmp/q26; mkdir -p $W
S="--prime 256 --gen 256"
TYPES="q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m q5_k_m"
while [ $# -gt 0 ]; do mode=$1; shift; case $mode in
nmse)
  for d in q4_0 q4_1 q5_0 q5_1; do for q in auto float; do
    gate "n_tiny_${d}_$q" --a cpu --b cuda:qdot=$q --compare nmse:1e-5 --preset tiny --dtype $d --prime 32 --gen 32 --rows 0
  done; done
  for d in $TYPES; do for q in auto float; do
    gate "n_small_${d}_$q" --a cpu --b cuda:qdot=$q --compare nmse:1e-5 --preset small --dtype $d --prime 32 --gen 32 --rows 0
  done; done
  for d in f32 bf16 q8_0 q4_0 q5_0 q4_k_m; do
    gate "n_g3tiny_$d" --a cpu --b cuda --compare nmse:1e-5 --preset gemma3-tiny --dtype $d --prime 32 --gen 32 --rows 0
  done
  gate n_g3tiny_tp2 --a cpu:tp=2 --b cuda:tp=2 --compare nmse:1e-5 --preset gemma3-tiny --dtype q8_0 --prime 32 --gen 32 --rows 0 ;;
exact1b)
  for d in $TYPES; do
    gate "e1b_${d}_greedy" --a cuda --b cuda-graph --preset llama-1b --dtype $d $S --rows 20
    gate "e1b_${d}_temp" --a cuda --b cuda-graph --preset llama-1b --dtype $d $S --rows 20 --temp 1 --seed 20261201 --schedule BAAB
  done ;;
exact8b)
  for d in ${1//,/ }; do mk llama-8b $d
    gate "e8b_${d}_greedy" --a cuda --b cuda-graph --model $W/llama-8b-$d.gguf $S --rows 20
    gate "e8b_${d}_temp" --a cuda --b cuda-graph --model $W/llama-8b-$d.gguf $S --rows 20 --temp 1 --seed 20261201 --schedule BAAB
  done; shift ;;
speed)
  for d in ${1//,/ }; do mk llama-8b $d
    bench "b8b_${d}" --arm cuda-graph,cuda --model $W/llama-8b-$d.gguf --prime 512 -n 128
  done; shift ;;
t8b)
  # per type: the file, the exact gates, the speed (bench) where asked (S8 lists the types), then
  # the file is removed (the disk holds a few 8B files at most)
  for d in ${1//,/ }; do mk llama-8b $d
    gate "e8b_${d}_greedy" --a cuda --b cuda-graph --model $W/llama-8b-$d.gguf $S --rows 20
    gate "e8b_${d}_temp" --a cuda --b cuda-graph --model $W/llama-8b-$d.gguf $S --rows 20 --temp 1 --seed 20261201 --schedule BAAB
    case ",${S8:-q4_k,q4_k_m,q5_k,q4_0,q6_k}," in *,$d,*)
      bench "b8b_${d}" --arm cuda-graph,cuda --model $W/llama-8b-$d.gguf --prime 512 -n 128 ;; esac
    [ $d = q4_k_m ] && gate tp2_8b_q4km --a cuda:tp=2 --b cuda-graph:tp=2 --model $W/llama-8b-q4_k_m.gguf $S --rows 4
    rm -f $W/llama-8b-$d.gguf
  done; shift ;;
rm8b) rm -f $W/llama-8b-*.gguf ;;
gemma)
  mk gemma3-270m q4_k_m
  gate g270_greedy --a cuda --b cuda-graph --model $W/gemma3-270m-q4_k_m.gguf --prime 600 --gen 256 --rows 20
  gate g270_temp --a cuda --b cuda-graph --model $W/gemma3-270m-q4_k_m.gguf --prime 600 --gen 256 --rows 20 --temp 1 --seed 20261201 --schedule BAAB
  # random weights amplify rounding on this shape (cpu against cpu:tp=2 grows alike): 1.29e-5 at
  # step 45 on 2026-12-01 (bench/RESULTS.md); the real file's nmse is the meaningful one
  gate g270_nmse --a cpu --b cuda --compare nmse:1e-5 --model $W/gemma3-270m-q4_k_m.gguf --prime 24 --gen 24 --rows 0 ;;
tp)
  mk llama-8b q4_k_m
  gate tp2_8b_q4km --a cuda:tp=2 --b cuda-graph:tp=2 --model $W/llama-8b-q4_k_m.gguf $S --rows 4 ;;
real)
  f=$1; shift; n=$(basename $f .gguf); p="The capital of France is"
  # --rows 0: a chat model's timing rows end at its EOS and the gate calls them ineligible
  gate "r_${n}_exact" --a cuda --b cuda-graph --model $f --prompt "$p" --gen 256 --rows 0
  gate "r_${n}_temp" --a cuda --b cuda-graph --model $f --prompt "$p" --gen 256 --rows 0 --temp 1 --seed 7
  gate "r_${n}_nmse" --a cpu --b cuda --compare nmse:1e-5 --model $f --prompt "$p" --gen 32 --rows 0
  timeout 60 "$M" run --model $f --backend cuda-graph --chat "What is the capital of France?" -n 40 > "$OUT/run_$n.log" 2>&1
  echo "run_${n}_chat rc=$? $(head -c 200 "$OUT/run_$n.log" | tr '\n' ' ')" | tee -a "$T"
  timeout 60 "$M" run --model $f --backend cuda-graph --prompt "$p" -n 24 > "$OUT/runp_$n.log" 2>&1
  echo "run_${n}_prompt rc=$? $(head -c 200 "$OUT/runp_$n.log" | tr '\n' ' ')" | tee -a "$T"
  bench "b_${n}" --arm cuda-graph,cuda --model $f --prime 512 -n 128 ;;
*) echo "unknown mode $mode" | tee -a "$T" ;;
esac; done
