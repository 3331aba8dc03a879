#!/usr/bin/env bash
# moe.sh: the H200 checks of issue 29 items 3-4 (mixtures of experts on cuda and cuda-graph), with
# binaries built on the development machine and carried (bin, lib, plugins.d; default .carry-dev,
# or $CARRY), the check program memra_cuda_check_moe among the bins (bin/). Prepare the carry:
#   cmake --preset release && cmake --build --preset release -j2
#   mkdir -p .carry-dev && cp -r build-release/bin build-release/lib build-release/plugins.d .carry-dev/
# Then on the GPU machine: CARRY=$PWD/.carry-dev bash bench/gpu/moe.sh check nmse tiny
# (each device call at most 10 minutes: split the modes over calls; files live in /tmp/q29).
# Modes (any number, in order):
#   check    the kernels against a host float64 reference (tests/cuda/check_moe.c: the router's
#            top-k with ties and k = n_expert, the expert GEMV in F32/F16/BF16/Q8_0 with negative
#            controls, the combine bit for bit the cpu's, the whole FFN)
#   nmse     cpu against cuda, nmse 1e-5, 32 + 32 steps: moe-tiny, qwen2moe-tiny, granitemoe-tiny
#            in f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 (the tiny shapes take no K-quant: granite
#            runs those); the refusal by name of ep=3
#   tiny     cuda against cuda-graph exact on the tiny presets (f32, bf16, q8_0), greedy and sampled;
#            cuda against cuda:stages=2 and cuda:prefill=1 against cuda:prefill=512 (a MoE chunk runs
#            as single steps), exact
#   ep       expert and tensor ranks on ONE GPU (two ranks on device 0, oneshot; cpu arms: local):
#            on moe-tiny, qwen2moe-tiny, granitemoe-tiny in bf16 and q8_0, 32 + 32 steps, greedy
#            and sampled: cuda:ep=2 against cuda-graph:ep=2 exact with --cells all; cuda against
#            cuda:ep=2 exact; cpu:ep=2 against cuda:ep=2 (nmse 1e-5); cuda:tp=2 against
#            cuda-graph:tp=2 exact (cells); cpu:tp=2 against cuda:tp=2 (nmse); ep=2,tp=2 likewise;
#            the negative control cuda:ep=2 against cuda:tp=2 (rc=1: partial sums in another order);
#            nccl on two GPUs where there are (devices=0,1), else its refusal of two ranks on one
#            device; then granite-moe-1b bf16 (mkmodel into /tmp/q29): cuda-graph:ep=2 against
#            cuda-graph exact, 256 + 256, 4 rows
#   granite  granite-moe-1b (bf16, q8_0): cuda against cuda-graph, 256 + 256, 20 ABBA rows, greedy
#            and sampled; memra bench of the graph and eager arms (bf16 is a speed target)
#   q30b     qwen3moe-30b q8_0 (about 32 GB; mkmodel writes it once): the same gates and bench (the
#            speed target); q30b_rm removes the file
#   fuse     the arm's moe_fuse key (the MoE kernel variants: 1 the top k in the router GEMV, 2
#            the combine in the down GEMV, 4 granite's attention scale in the router, 8 the
#            experts' gate/up GEMV with all of a lane's loads in flight, 16 the router on one cluster):
#            unfused eager against fused graph exact on the tiny presets (every fold, a shared
#            expert, granite's scales, sampled), each bit alone against 0 on granitemoe-tiny; then
#            granite-moe-1b (bf16, q8_0) and qwen3moe-30b q8_0: the graph arm moe_fuse=0 against
#            the default (119) exact, and memra bench of the variants one by one (0, 1, 3, 7, 23, 55, 119, 247; 887 the default since the forty-first session)
#   int      experts=int (the Q8_0 experts on the integer kernel, not yet run on a GPU when written):
#            cpu nmse, eager / graph, moe_fuse=0, ep=2 exact, the control against float; granite-moe-1b
#            and qwen3moe-30b q8_0 gates and bench against the default
# The speed target: the graph arm at >= 70% of the ceiling counting only the bytes a token reads
# (memra bench's share column: tools/session.c cli_step_bytes counts only the chosen experts).
# A short table last ($OUT/table.txt); logs under $OUT.
GATE_TIMEOUT=${GATE_TIMEOUT:-500} BENCH_TIMEOUT=${BENCH_TIMEOUT:-500}
. "$(dirname "$0")/common.sh"
W=/tmp/q29; mkdir -p $W
S="--prime 256 --gen 256"
TEMP="--temp 1 --seed 20261201 --schedule BAAB"
TINY="moe-tiny qwen2moe-tiny granitemoe-tiny"
nvidia-smi --query-gpu=index,name,memory.used,clocks.sm --format=csv > "$OUT/machine.txt" 2>&1
while [ $# -gt 0 ]; do mode=$1; shift; case $mode in
check)
  timeout 300 "$B/bin/memra_cuda_check_moe" > "$OUT/check_moe.log" 2>&1
  echo "check_moe rc=$? $(tail -1 "$OUT/check_moe.log")" | tee -a "$T"
  grep -i "fail\|missed" "$OUT/check_moe.log" | head -5 | tee -a "$T" ;;
nmse)
  for p in $TINY; do for d in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1; do
    gate "n_${p}_$d" --a cpu --b cuda --compare nmse:1e-5 --preset $p --dtype $d --prime 32 --gen 32 --rows 0
  done; done
  refuse r_ep3 "is not divisible by 3 ranks" --a cuda --b cuda-graph:ep=3 --preset moe-tiny --prime 4 --gen 4 --rows 0
  gate n_tp2_moe_q4_0 --a cpu:tp=2 --b cuda:tp=2 --compare nmse:1e-5 --preset moe-tiny --dtype q4_0 --prime 16 --gen 16 --rows 0 ;;
ep)
  # the tiny presets' pairs, one background job a preset and type (the GPU is shared; every pair
  # is exact or nmse whatever the timing; no timing rows), their table lines gathered in order
  E="--prime 32 --gen 32 --rows 0"; GATE_TIMEOUT=90  # a tiny gate takes seconds: a hang costs 90 s, not 500
  mk granite-moe-1b bf16 & MKPID=$!  # written while the tiny gates run
  for p in $TINY; do for d in bf16 q8_0; do (
    T="$OUT/t_${p}_$d.txt"; : > "$T"
    A="--preset $p --dtype $d"
    gate "ep_g_${p}_$d" --a cuda:ep=2 --b cuda-graph:ep=2 $A $E --cells all
    gate "ep_g_${p}_${d}_temp" --a cuda:ep=2 --b cuda-graph:ep=2 $A $E $TEMP
    gate "ep_1_${p}_$d" --a cuda --b cuda:ep=2 $A $E
    gate "ep_1g_${p}_${d}_temp" --a cuda-graph --b cuda-graph:ep=2 $A $E $TEMP
    gate "ep_n_${p}_$d" --a cpu:ep=2 --b cuda:ep=2 --compare nmse:1e-5 $A $E
    gate "tp_g_${p}_$d" --a cuda:tp=2 --b cuda-graph:tp=2 $A $E --cells all
    gate "tp_g_${p}_${d}_temp" --a cuda:tp=2 --b cuda-graph:tp=2 $A $E $TEMP
    gate "tp_n_${p}_$d" --a cpu:tp=2 --b cuda:tp=2 --compare nmse:1e-5 $A $E
    gate "et_g_${p}_$d" --a cuda:ep=2,tp=2 --b cuda-graph:ep=2,tp=2 $A $E --cells all
    gate "et_g_${p}_${d}_temp" --a cuda:ep=2,tp=2 --b cuda-graph:ep=2,tp=2 $A $E $TEMP
    gate "et_n_${p}_$d" --a cpu:ep=2,tp=2 --b cuda:ep=2,tp=2 --compare nmse:1e-5 $A $E
  ) & done; done; for j in $(jobs -p); do [ "$j" = "$MKPID" ] || wait "$j"; done
  for p in $TINY; do for d in bf16 q8_0; do cat "$OUT/t_${p}_$d.txt" >> "$T"; done; done
  gate ep_local_cpu --a cpu:ep=2,collective=local --b cpu --preset qwen2moe-tiny --dtype q8_0 $E --cells all
  gate ep_oneshot_prefill --a cuda:ep=2,collective=oneshot,prefill=1 --b cuda-graph:ep=2,prefill=64 --preset qwen2moe-tiny --dtype bf16 --prime 70 --gen 16 --rows 0
  gate ep_stages2 --a cuda-graph --b cuda:stages=2,ep=2,window=3 --preset granitemoe-tiny --dtype q8_0 $E --cells all
  gate neg_ep_vs_tp --a cuda:ep=2 --b cuda:tp=2 --preset moe-tiny --dtype bf16 --prime 16 --gen 8 --rows 0
  echo "(neg_ep_vs_tp: rc=1 expected)" | tee -a "$T"
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    gate ep_nccl --a cuda:ep=2,collective=nccl,devices=0,1 --b cuda-graph:ep=2,collective=nccl,devices=0,1 --preset qwen2moe-tiny --dtype q8_0 $E --cells all
    gate et_nccl --a cuda:ep=2,tp=2,collective=nccl,devices=0,1 --b cuda-graph:ep=2,tp=2,collective=nccl,devices=0,1 --preset granitemoe-tiny --dtype bf16 $E $TEMP
  else
    refuse ep_nccl_one_device "NCCL needs one device per rank" --a cuda:ep=2,collective=nccl --b cuda-graph:ep=2,collective=nccl --preset moe-tiny --prime 4 --gen 4 --rows 0
  fi
  wait "$MKPID"; GATE_TIMEOUT=500
  gate g1b_bf16_ep2 --a cuda-graph --b cuda-graph:ep=2 --model $W/granite-moe-1b-bf16.gguf $S --rows 4 ;;
tiny)
  for p in $TINY; do for d in f32 bf16 q8_0; do
    gate "e_${p}_${d}" --a cuda --b cuda-graph --preset $p --dtype $d --prime 64 --gen 64 --rows 4
    gate "e_${p}_${d}_temp" --a cuda --b cuda-graph --preset $p --dtype $d --prime 64 --gen 64 --rows 4 $TEMP
  done; done
  gate e_moe_stages2 --a cuda --b cuda:stages=2 --preset moe-tiny --dtype bf16 --prime 64 --gen 64 --rows 2
  gate e_moe_graph_stages2 --a cuda-graph --b cuda-graph:stages=2,window=3 --preset qwen2moe-tiny --dtype q8_0 --prime 64 --gen 64 --rows 2
  gate e_moe_prefill --a cuda:prefill=1 --b cuda:prefill=512 --preset moe-tiny --dtype bf16 --prime 100 --gen 32 --rows 2
  gate e_moe_graph_prefill --a cuda-graph:prefill=1 --b cuda-graph --preset granitemoe-tiny --dtype q8_0 --prime 100 --gen 32 --rows 2 ;;
granite)
  for d in bf16 q8_0; do mk granite-moe-1b $d
    gate "g1b_${d}_greedy" --a cuda --b cuda-graph --model $W/granite-moe-1b-$d.gguf $S --rows 20
    gate "g1b_${d}_temp" --a cuda --b cuda-graph --model $W/granite-moe-1b-$d.gguf $S --rows 20 $TEMP
    gate "g1b_${d}_nmse" --a cpu --b cuda --compare nmse:1e-5 --model $W/granite-moe-1b-$d.gguf --prime 16 --gen 16 --rows 0
    bench "b_g1b_${d}" --arm cuda-graph,cuda --model $W/granite-moe-1b-$d.gguf --prime 512 -n 128
  done ;;
q30b)
  mk qwen3moe-30b q8_0
  gate q30b_q8_greedy --a cuda --b cuda-graph --model $W/qwen3moe-30b-q8_0.gguf $S --rows 20
  gate q30b_q8_temp --a cuda --b cuda-graph --model $W/qwen3moe-30b-q8_0.gguf $S --rows 20 $TEMP
  bench b_q30b_q8 --arm cuda-graph,cuda --model $W/qwen3moe-30b-q8_0.gguf --prime 512 -n 128 ;;
fuse)
  gate f_moe_q8_0 --a cuda:moe_fuse=0 --b cuda-graph --preset moe-tiny --dtype q8_0 --prime 64 --gen 64 --rows 0
  gate f_qwen2moe_f32 --a cuda:moe_fuse=0 --b cuda-graph --preset qwen2moe-tiny --dtype f32 --prime 64 --gen 64 --rows 0
  gate f_qwen2moe_q8_0_temp --a cuda:moe_fuse=0 --b cuda-graph --preset qwen2moe-tiny --dtype q8_0 --prime 64 --gen 64 \
    --rows 0 $TEMP
  gate f_granitemoe_bf16 --a cuda:moe_fuse=0 --b cuda-graph --preset granitemoe-tiny --dtype bf16 --prime 64 --gen 64 --rows 0
  for f in 1 2 5 8 17 21; do
    gate "f_granitemoe_q8_0_bits$f" --a cuda-graph:moe_fuse=0 --b cuda-graph:moe_fuse=$f --preset granitemoe-tiny \
      --dtype q8_0 --prime 64 --gen 64 --rows 0
  done
  mk granite-moe-1b bf16
  gate f_g1b_bf16 --a cuda-graph:moe_fuse=0 --b cuda-graph --model $W/granite-moe-1b-bf16.gguf --prime 256 --gen 256 --rows 2
  bench b_f_g1b_bf16 --arm cuda-graph:moe_fuse=0,cuda-graph:moe_fuse=1,cuda-graph:moe_fuse=3,cuda-graph:moe_fuse=7,cuda-graph:moe_fuse=23,cuda-graph:moe_fuse=55,cuda-graph,cuda-graph:moe_fuse=247 \
    --model $W/granite-moe-1b-bf16.gguf --prime 512 -n 128
  mk granite-moe-1b q8_0
  bench b_f_g1b_q8_0 --arm cuda-graph:moe_fuse=0,cuda-graph:moe_fuse=7,cuda-graph:moe_fuse=23,cuda-graph:moe_fuse=55,cuda-graph,cuda-graph:moe_fuse=247 --model $W/granite-moe-1b-q8_0.gguf --prime 512 -n 128
  mk qwen3moe-30b q8_0
  gate f_q30b_q8 --a cuda-graph:moe_fuse=0 --b cuda-graph --model $W/qwen3moe-30b-q8_0.gguf --prime 128 --gen 128 --rows 2
  bench b_f_q30b_q8 --arm cuda-graph:moe_fuse=0,cuda-graph:moe_fuse=1,cuda-graph:moe_fuse=7,cuda-graph:moe_fuse=23,cuda-graph:moe_fuse=55,cuda-graph,cuda-graph:moe_fuse=247 \
    --model $W/qwen3moe-30b-q8_0.gguf --prime 512 -n 128 ;;
int)
  # experts=int (the Q8_0 experts on the integer kernel's body a slot: other bits than float)
  E="--prime 32 --gen 32 --rows 0"
  gate i_nmse_moe --a cpu --b cuda:experts=int --compare nmse:1e-5 --preset moe-tiny --dtype q8_0 $E
  gate i_qwen2moe --a cuda:experts=int --b cuda-graph:experts=int --preset qwen2moe-tiny --dtype q8_0 --prime 64 --gen 64 --rows 0 $TEMP
  gate i_fuse0 --a cuda:experts=int,moe_fuse=0 --b cuda-graph:experts=int --preset granitemoe-tiny --dtype q8_0 --prime 64 --gen 64 --rows 0 $TEMP
  gate i_ep2 --a cuda:experts=int --b cuda-graph:experts=int,ep=2 --preset moe-tiny --dtype q8_0 $E --cells all
  gate i_ctl --a cuda-graph --b cuda-graph:experts=int --preset moe-tiny --dtype q8_0 --prime 8 --gen 4 --rows 0
  echo "(i_ctl: rc=1 expected: other bits)" | tee -a "$T"
  mk granite-moe-1b q8_0
  gate i_g1b --a cuda:experts=int --b cuda-graph:experts=int --model $W/granite-moe-1b-q8_0.gguf $S --rows 4 $TEMP
  bench b_i_g1b --arm cuda-graph,cuda-graph:experts=int --model $W/granite-moe-1b-q8_0.gguf --prime 512 -n 128
  mk qwen3moe-30b q8_0
  gate i_q30b --a cuda:experts=int --b cuda-graph:experts=int --model $W/qwen3moe-30b-q8_0.gguf --prime 128 --gen 128 --rows 2
  bench b_i_q30b --arm cuda-graph,cuda-graph:experts=int --model $W/qwen3moe-30b-q8_0.gguf --prime 512 -n 128 ;;
q30b_rm) rm -f $W/qwen3moe-30b-*.gguf ;;
*) echo "unknown mode $mode" | tee -a "$T" ;;
esac; done
