#!/usr/bin/env bash
# flash.sh: the H200 checks of issue 28 item 3's flash-decoding, the attention=split value of the
# cuda and cuda-graph attention key (fixed spans of 128 absolute positions spread over many blocks,
# folded in span order; a prefill chunk's rows fold the same spans in one block), with binaries
# built on the development machine and carried in .carry-dev (bin, lib, plugins.d). Modes (any
# number, in order; no mode: exact nmse control census speed):
#   exact    attention=split on both arms, llama-1b bf16, 256 + 256, 4 rows: cuda against
#            cuda-graph, greedy and sampled (T 1, BAAB); prefill=1 against prefill=512 (eager,
#            and graph) and against prefill=7 (graph; an odd chunk that ends mid-span); all of it
#            again at kv=f16; gemma3-tiny (sliding windows across span boundaries) 200 + 56, eager
#            against graph and prefill=1 against prefill=7; and a 2,000-token prime on llama-1b
#            (16 spans: decode merges partials of up to 16 blocks, a chunk's row folds 16 spans):
#            cuda against cuda-graph (both prefill 512), and prefill=1 against prefill=512
#   nmse     cpu against cuda:attention=split (and cuda-graph) within 1e-5 on small (300 + 33:
#            three spans) and gemma3-tiny (200 + 56), f32; at kv=f16 within 1e-3 (kv.sh says why)
#   control  the negative control: cuda (the cluster path, the default) against
#            cuda:attention=split on a 200-token prefix (longer than one span) must NOT pass
#            exact; and llama-1b likewise (a PASS there means the key changed nothing)
#   loop     (not in the default list: ~1 min) past 16,384 positions a decode block takes more than
#            one span (128 blocks a kv head at most): llama-1b, 16,600 + 16, graph prefill=1 (every
#            prime step a decode step, the late ones looping) against eager prefill=512 (chunk rows)
#   census   the graph arms' census records name no unexpected kernel (the split kernel counts
#            as attention, one launch a layer in decode)
#   speed    memra bench --preset llama-1b --dtype bf16 --arm cuda-graph,cuda-graph:attention=split,
#            cuda-graph:kv=f16,cuda-graph:kv=f16,attention=split at --prime 7900 and --prime 512,
#            -n 128 (today without split: 803.8 tok/s at 7,900, 57.0% of the ceiling, against
#            1152.1 at 512; kv=f16 833.3 against 1196.9)
# A short table last ($OUT/table.txt, printed at the end); the logs and records go into
# $OUT/flash-logs.tgz. Record the table in bench/RESULTS.md and the speed in bench/gpu/NOTES.md.
# Two device calls of under 10 minutes each (census reads the exact mode's records, so they go
# together): `bash bench/gpu/flash.sh exact census` (~6 min) and
# `bash bench/gpu/flash.sh nmse control speed` (~5 min; add `loop` for the 16,600-token check).
. "$(dirname "$0")/common.sh"
S="--prime 256 --gen 256"
L1="--preset llama-1b --dtype bf16"
TEMP="--temp 1 --seed 20261201 --schedule BAAB"
A=attention=split
pairs() { local kv=$1 k=${1:+,kv=$1} t=${1:-f32}
  gate "e1b_${t}_greedy" --a cuda:$A$k --b cuda-graph:$A$k $L1 $S --rows 4
  gate "e1b_${t}_temp" --a cuda:$A$k --b cuda-graph:$A$k $L1 $S --rows 4 $TEMP
  gate "e1b_${t}_prefill" --a cuda:$A$k,prefill=1 --b cuda:$A$k,prefill=512 $L1 $S --rows 4
  gate "e1b_${t}_prefill_temp" --a cuda:$A$k,prefill=1 --b cuda:$A$k,prefill=512 $L1 $S --rows 4 $TEMP
  gate "e1b_${t}_gprefill" --a cuda-graph:$A$k,prefill=1 --b cuda-graph:$A$k,prefill=512 $L1 $S --rows 4
  gate "e1b_${t}_prefill7" --a cuda:$A$k,prefill=1 --b cuda-graph:$A$k,prefill=7 $L1 $S --rows 4; }
[ $# -gt 0 ] || set -- exact nmse control census speed
while [ $# -gt 0 ]; do mode=$1; shift; case $mode in
exact)
  pairs ""; pairs f16
  for k in "" ",kv=f16"; do t=${k:+f16}; t=${t:-f32}
    gate "g3tiny_${t}_graph" --a cuda:$A$k --b cuda-graph:$A$k --preset gemma3-tiny --prime 200 --gen 56 --rows 2 $TEMP
    gate "g3tiny_${t}_prefill7" --a cuda:$A$k,prefill=1 --b cuda-graph:$A$k,prefill=7 --preset gemma3-tiny --prime 200 --gen 56 --rows 0
  done
  GATE_TIMEOUT=600 gate "long2000_graph" --a cuda:$A --b cuda-graph:$A $L1 --prime 2000 --gen 64 --rows 2
  GATE_TIMEOUT=600 gate "long2000_prefill" --a cuda:$A,prefill=1 --b cuda-graph:$A,prefill=512 $L1 --prime 2000 --gen 64 --rows 0
  GATE_TIMEOUT=600 gate "long2000_f16_prefill" --a cuda:$A,kv=f16,prefill=1 --b cuda:$A,kv=f16,prefill=512 $L1 --prime 2000 --gen 64 --rows 0 ;;
nmse)
  for p in "small --prime 300 --gen 33" "gemma3-tiny --prime 200 --gen 56"; do n=${p%% *}
    gate "n_${n}" --a cpu --b cuda:$A --compare nmse:1e-5 --preset $p --rows 0
    gate "n_${n}_graph" --a cpu --b cuda-graph:$A --compare nmse:1e-5 --preset $p --rows 0
    gate "n_${n}_kvf16" --a cpu:kv=f16 --b cuda:$A,kv=f16 --compare nmse:1e-3 --preset $p --rows 0
    gate "n_${n}_kvbf16_graph" --a cpu:kv=bf16 --b cuda-graph:$A,kv=bf16 --compare nmse:1e-3 --preset $p --rows 0
  done
  gate "n_qwen3tiny" --a cpu --b cuda:$A --compare nmse:1e-5 --preset qwen3-tiny --prime 300 --gen 33 --rows 0 ;;
loop)
  GATE_TIMEOUT=600 gate "loop16600_prefill" --a cuda-graph:$A,prefill=1 --b cuda:$A,prefill=512 $L1 --prime 16600 --gen 16 --rows 0 ;;
control)
  control "ctl_small_split_vs_default" --a cuda --b cuda:$A --preset small --prime 200 --gen 8 --rows 0
  control "ctl_1b_split_vs_default" --a cuda-graph --b cuda-graph:$A $L1 --prime 200 --gen 8 --rows 0 ;;
census)
  for f in "$OUT"/*graph*.jsonl "$OUT"/e1b_*.jsonl; do [ -f "$f" ] || continue
    grep '"record":"census"' "$f" | grep -q 'unexpected' && echo "CENSUS: unexpected kernel in $(basename "$f")" | tee -a "$T"
  done
  # one attention launch a layer in the decode graph (llama-1b: 16)
  grep -h '"record":"census"' "$OUT"/e1b_f32_greedy.jsonl 2>/dev/null | grep '"arm":"b"' |
    grep -o '"kind":"kernel:attention","count":[0-9]*' | head -2 | sed 's/^/census e1b_f32_greedy /' | tee -a "$T" ;;
speed)
  ARMS=cuda-graph,cuda-graph:$A,cuda-graph:kv=f16,cuda-graph:kv=f16,$A
  bench b1b_7900 $L1 --arm $ARMS --prime 7900 -n 128
  bench b1b_512 $L1 --arm $ARMS --prime 512 -n 128 ;;
*) echo "unknown mode $mode" | tee -a "$T" ;;
esac; done
(cd "$OUT" && ls *.log *.jsonl > /dev/null 2>&1 && tar czf flash-logs.tgz *.log *.jsonl && rm -f *.log *.jsonl)
echo "---- table"; cat "$T"
