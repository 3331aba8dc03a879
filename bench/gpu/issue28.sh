#!/usr/bin/env bash
# issue28.sh: issue 28's device checks in one place, on a carried release build of main
# (bench/gpu/common.sh: CARRY holds bin, lib, plugins.d). PARTS (default "pp long pairs") picks:
#   pp     pp512 at decode's bits on the arms that meet it: llama-8b BF16 and llama-1b BF16 on
#          gemv=mma,attention=mma,kv=bf16 (eager and graph; the issue asks 25k and 73k), llama-8b
#          Q8_0 on q8=mma,attention=mma,kv=bf16 (11.2k), llama-8b Q4_K on qdot=mma,... (9.8k, the
#          quant issue's type), and the default graph arm's decode on 8B BF16 (not below 242 tok/s);
#          presets made in memory (about 2 min)
#   long   llama-1b graph at a 7,900-token prefix against 512 (0.95x asked) on the long-context
#          arm, A,attfold=tier,trigger=127, beside the default arm, 3 rounds (about 1 min)
#   pairs  exact pairs, 256 prime + 256 generated, --rows 0: prefill=1 against prefill=512 and
#          against prefill=7 on llama-1b, 8B BF16 and 8B Q8_0, greedy and sampled, eager and graph
#          mixed so that each model has each of the four (about 4 min)
#   ppcmp  pp512 side by side with llama.cpp on the same card and the same files (memra mkmodel
#          GGUFs of llama-1b BF16, llama-8b BF16, Q8_0 and Q4_K; $LLAMA_BENCH: a llama-bench of
#          llama.cpp built for the device): memra bench --prime 512 on the eager exact arms,
#          llama-bench -p 512 -n 0 (about 5 min with the files' writing). Any card: it is a ratio
#          on one card, not the issue's H200 figure (run on an H100 in the twenty-ninth session).
# Every table line goes to $OUT/table.txt too. The pp and long checks name the H200, so the script
# stops at once (exit 9) on another card unless CARD says otherwise (CARD=any: the pairs, whose
# check names no card).
#   CARRY=/tmp/m PARTS="pp long" bash bench/gpu/issue28.sh
#   CARRY=/tmp/m PARTS=pairs CARD=any bash bench/gpu/issue28.sh
. "$(dirname "$0")/common.sh"
PARTS=${PARTS:-pp long pairs}
case " $PARTS " in *" ppcmp "*) : "${LLAMA_BENCH:?ppcmp needs LLAMA_BENCH}";; esac
need_card "${CARD:-H200}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$T"
A=gemv=mma,attention=mma,kv=bf16; Q=q8=mma,attention=mma,kv=bf16; KQ=qdot=mma,attention=mma,kv=bf16
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
if has pp; then
  bench pp_8b_bf16 --preset llama-8b --dtype bf16 --arm cuda:$A,cuda-graph:$A,cuda-graph --prime 512 -n 32 --reps 3
  bench pp_1b_bf16 --preset llama-1b --dtype bf16 --arm cuda:$A,cuda-graph:$A --prime 512 -n 64 --reps 3
  bench pp_8b_q8_0 --preset llama-8b --dtype q8_0 --arm cuda:$Q,cuda-graph:$Q --prime 512 -n 32 --reps 3
  bench pp_8b_q4_k --preset llama-8b --dtype q4_k --arm cuda:$KQ,cuda-graph:$KQ --prime 512 -n 32 --reps 3
fi
if has long; then
  for i in 1 2 3; do
    bench long_$i --preset llama-1b --dtype bf16 --arm cuda-graph:$A,attfold=tier,trigger=127,cuda-graph \
      --prime 512,7900 -n 128 --reps 5
  done
fi
if has pairs; then
  S="--temp 0.8 --seed 3"; P="--prime 256 -n 256 --rows 0"
  for md in "llama-1b bf16 $A" "llama-8b bf16 $A" "llama-8b q8_0 $Q"; do
    set -- $md; K="--preset $1 --dtype $2"
    gate "pair_$1_$2_e1_e512" --a cuda:$3,prefill=1 --b cuda:$3,prefill=512 $K $P
    gate "pair_$1_$2_g1_g7_s" --a cuda-graph:$3,prefill=1 --b cuda-graph:$3,prefill=7 $K $P $S
    gate "pair_$1_$2_e1_g512_s" --a cuda:$3,prefill=1 --b cuda-graph:$3,prefill=512 $K $P $S
    gate "pair_$1_$2_g1_e7" --a cuda-graph:$3,prefill=1 --b cuda:$3,prefill=7 $K $P
  done
  control "pair_control_span_tier" --a cuda-graph:$A --b cuda-graph:$A,attfold=tier --preset llama-1b --dtype bf16 \
    --prime 700 -n 16 --rows 0
fi
if has ppcmp; then
  W=${W:-/tmp/w}; mkdir -p "$W"
  for md in "llama-1b bf16 $A" "llama-8b bf16 $A" "llama-8b q8_0 $Q" "llama-8b q4_k $KQ"; do
    set -- $md; mk $1 $2; f=$W/$1-$2.gguf
    # -r 6 as JSON: llama-bench's first sample runs cold (about 0.6x the others on an H100, 29th
    # session), so the line gives every sample and the median of the last five
    timeout 240 "$LLAMA_BENCH" -m "$f" -p 512 -n 0 -r 6 -ngl 99 -o json > "$OUT/lbpp_$1_$2.json" 2> "$OUT/lbpp_$1_$2.log"
    echo "== llama-bench pp512 $1 $2 rc=$? t=$SECONDS" | tee -a "$T"
    python3 -c 'import json,statistics,sys; r=json.load(open(sys.argv[1]))[0]["samples_ts"]; print("samples", [round(v) for v in r], "median of the last five", round(statistics.median(r[1:])))' \
      "$OUT/lbpp_$1_$2.json" 2>&1 | tee -a "$T"
    bench "mbpp_$1_$2" --model "$f" --arm cuda:$3 --prime 512 -n 16 --reps 3
    case $1 in llama-8b) rm -f "$f";; esac
  done
fi
echo "t=$SECONDS" | tee -a "$T"
echo "== table"; cat "$T"
