#!/usr/bin/env bash
# tp.sh: tensor-parallel checks on the GPU(s), with binaries built on the development machine and
# carried (bin, lib, plugins.d; default .carry-dev, or $CARRY). One H200 runs two ranks on one
# device (oneshot; nccl must refuse that clearly); two H200s run them on two. Modes (in order):
#   coll     the collectives through their vtables (memra_cuda_check_collective): oneshot at 2 ranks,
#            nccl at 1 rank (one GPU) or 2 (two GPUs)
#   gates    tiny and small (F32) and llama-1b (BF16): cuda:tp=2 against cuda-graph:tp=2 (exact, with
#            every refusal cell), windows 1 and 3, stages=2,tp=2; cpu:tp=2 against cuda:tp=2 (nmse);
#            cuda against cuda-graph at tp=1 (nothing regressed)
#   (neg-*   negative controls: rc=1 expected)
#   refuse   what must be refused clearly (nccl with two ranks on one device; at tp=1 a
#            collective= with an unknown key of its own, and one that has no effect: rc=2)
#   window   every refusal cell with the arm's window full (issue 24.9): cuda and cuda-graph at
#            tp=2 with window 3, stages=2,tp=2 with windows 3 and 4
#   neg-window  the same cells against the plugins before issue 24's fixes ($B/old-plugins.d,
#            where carried): rc=1 expected (a step queued behind a refused one committed)
#   mixed    plans with one stage of ranks and one plain (the test placement mixedtp, issue
#            24.3), every cell with the window full; neg-mixed: the same with $B/old-plugins.d
#   race     staged arms with windows 3 and 4, every cell, three times each, against
#            $B/race-plugins.d where carried (a cuda plugin whose commit reads the previous
#            stage's verdict live, as before issue 24.2): whether one GPU shows that race
#   full     the issue's gates at full length on what is lent: 256 prime + 256 generated steps,
#            greedy and sampled, 20 ABBA timing rows, refusal cells: cuda:tp=2 against
#            cuda-graph:tp=2 on tiny, llama-1b and llama-8b (BF16); cpu:tp=2 against cuda:tp=2 (nmse)
#   slices   every dtype's and architecture's slicing against the cpu backend's (nmse 1e-4):
#            cpu:tp=2 vs cuda:tp=2 on tiny at f32, f16, bf16, q8_0, on qwen2-tiny (biases) and
#            qwen3-tiny (q/k norms), small q8_0; and stages=2,tp=2 with window 3 (exact)
#   ranks    4 and 8 ranks (on as many GPUs as there are, wrapping): the collectives' checks, exact
#            gates of cuda:tp=4 and tp=8 against cuda-graph, stages=2,tp=2 against tp=4 (nmse), and
#            cpu against cuda at 4 and 8 ranks (nmse)
#   pdl      oneshot's pdl=1 (its kernel launched to start while the kernel before drains) against
#            pdl=0: its collective check, gates of the two (the same bits, then ABBA timing)
#   sync     oneshot's sync=acqrel (release/acquire flags) against sync=fence (the default): its
#            collective check, gates of the two (the same bits, then ABBA timing), the bench
#   bench    memra bench-collective, 4 KB to 64 MB: oneshot at 2 ranks, nccl at 2 (two GPUs) or 1
#   neg-coll the collective checks against $B/old-plugins.d (oneshot and nccl before issue 24.5 and
#            24.7's fixes, where carried): rc=1 expected; coll also runs the stand-in NCCL's check
#            ($B/bin/fakenccl_graph_check, $B/fakenccl/libfakenccl-graph.so) where carried
#   stall    issue 24.2: stages=2,tp=2,window=3 with stall_us=3000 (stage 1 held after it took the
#            hidden), every cell; neg-stall: the same against $B/race-plugins.d: rc=1 expected
#   ncclcost issue 24.8: nccl at one rank (two with two GPUs), nonblocking and blocking=1, oneshot
#            (and the old one), nccl-tests' all_reduce_perf -g N with and without -G where carried
#            ($B/nccl-tests: built with MPI=0 against the system NCCL)
# A short table last; logs under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 MEMRA_SYNTH_THREADS=16
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
B=${CARRY:-$PWD/.carry-dev}
export LD_LIBRARY_PATH=$B/lib MEMRA_PLUGIN_PATH=$B/plugins.d
# the test-only plugins (mixedtp, faulty: build/tests/plugins.d), carried as test-plugins.d
[ -d "$B/test-plugins.d" ] && MEMRA_PLUGIN_PATH=$MEMRA_PLUGIN_PATH:$B/test-plugins.d
G=$B/bin/memra-gate
T="$OUT/table.txt"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$OUT/machine.txt" 2>&1
gate() { local name=$1; shift; local t0=$SECONDS
  timeout 300 "$G" "$@" --quiet --jsonl "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1; local rc=$?
  local v=$(grep '"record":"verdict"' "$OUT/$name.jsonl" 2>/dev/null | grep -o '"pass":[a-z]*\|"reason":"[^"]*"' | tr '\n' ' ' | cut -c1-110)
  local c=$(grep -o '"cells_passed":[0-9]*\|"cells":[0-9]*' "$OUT/$name.jsonl" 2>/dev/null | sort -u | tr '\n' ' ')
  printf '%-30s rc=%s %3ss %s %s\n' "$name" "$rc" "$((SECONDS-t0))" "$v" "$c" | tee -a "$T"
  [ $rc -eq 0 ] || tail -3 "$OUT/$name.log" | cut -c1-240 | tee -a "$T"; }
prog() { local name=$1; shift; local t0=$SECONDS
  timeout ${PT:-120} "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  printf '%-30s rc=%s %3ss %s\n' "$name" "$rc" "$((SECONDS-t0))" "$(tail -1 "$OUT/$name.log" | cut -c1-150)" | tee -a "$T"
  [ $rc -eq 0 ] || grep -m3 'FAIL\|error' "$OUT/$name.log" | cut -c1-240 | tee -a "$T"; }
D2=0,0; [ "$NGPU" -ge 2 ] && D2=0,1
for mode in "${@:-coll gates refuse}"; do for m in $mode; do case $m in
coll)
  prog coll-oneshot-2 "$B/bin/memra_cuda_check_collective" --collective oneshot --ranks 2 --devices $D2
  prog tp-fault "$B/bin/memra_cuda_check_tp_fault" --devices $D2
  if [ -e "$B/plugins.d/nccl.collective.manifest" ]; then
    if [ "$NGPU" -ge 2 ]; then
      prog coll-nccl-2 "$B/bin/memra_cuda_check_collective" --collective nccl --ranks 2 --devices 0,1
      prog coll-nccl-ag-2 "$B/bin/memra_cuda_check_collective" --collective nccl:allgather --ranks 2 --devices 0,1
    else
      prog coll-nccl-1 "$B/bin/memra_cuda_check_collective" --collective nccl --ranks 1
    fi
    prog coll-nccl-device "$B/bin/nccl_device_check" "$B/plugins.d"
  fi
  [ -x "$B/bin/fakenccl_graph_check" ] && prog coll-nccl-standin "$B/bin/fakenccl_graph_check" "$B/plugins.d" "$B/fakenccl/libfakenccl-graph.so" ;;
neg-coll)
  if [ -d "$B/old-plugins.d" ]; then
    MEMRA_PLUGIN_PATH=$B/old-plugins.d prog neg-coll-oneshot-2 "$B/bin/memra_cuda_check_collective" --collective oneshot --ranks 2 --devices $D2
    [ -x "$B/bin/fakenccl_graph_check" ] && prog neg-coll-nccl-standin "$B/bin/fakenccl_graph_check" "$B/old-plugins.d" "$B/fakenccl/libfakenccl-graph.so"
  fi ;;
stall|neg-stall)
  # issue 24.2: stall_us= holds stage 1 after it took a step's hidden, so stage 0 runs the next
  # step (and judges it) first; every refusal cell with the window full. neg-stall: against
  # $B/race-plugins.d (a cuda plugin whose commit reads the previous stage's verdict live)
  S="--prime 32 --gen 32 --rows 0 --cells all"; P=$MEMRA_PLUGIN_PATH; pre=""
  if [ $m = neg-stall ]; then [ -d "$B/race-plugins.d" ] || continue; P=$B/race-plugins.d; pre=neg-; fi
  MEMRA_PLUGIN_PATH=$P gate ${pre}stall-st2tp2 --preset tiny --a cuda:stages=2,tp=2,window=3,stall_us=3000 --b cuda-graph:stages=2,tp=2,window=3 $S ;;
ncclcost)
  # issue 24.8: what a memra nccl arm pays per all-reduce beyond NCCL itself, at one rank:
  # bench-collective with nonblocking (default) and blocking communicators, and nccl-tests'
  # all_reduce_perf (carried in $B/nccl-tests, built against the system NCCL) with and without -G
  NR=1; DN=0; [ "$NGPU" -ge 2 ] && NR=2 && DN=0,1
  for c in nccl nccl:blocking=1; do
    n=$(echo "bc-$c" | tr ':=' '--')
    prog "$n" "$B/bin/memra" bench-collective --collective $c --ranks $NR --devices $DN --max-bytes 4M
    sed -n '1,14p' "$OUT/$n.log" | tee -a "$T"
  done
  for P in "$MEMRA_PLUGIN_PATH" "$B/old-plugins.d"; do
    [ -d "$P" ] || continue; n=bc-oneshot-$(basename "$P")
    MEMRA_PLUGIN_PATH=$P prog "$n" "$B/bin/memra" bench-collective --collective oneshot --ranks 2 --devices $D2 --max-bytes 4M
    sed -n '1,14p' "$OUT/$n.log" | tee -a "$T"
  done
  if [ -x "$B/nccl-tests/all_reduce_perf" ]; then
    ldd "$B/nccl-tests/all_reduce_perf" | grep -i nccl | tee -a "$T"
    prog nt-eager "$B/nccl-tests/all_reduce_perf" -g $NR -b 4K -e 4M -f 2 -w 5 -n 20
    grep -v '^#\s*$' "$OUT/nt-eager.log" | tail -16 | tee -a "$T"
    prog nt-graph "$B/nccl-tests/all_reduce_perf" -g $NR -b 4K -e 4M -f 2 -w 5 -n 20 -G 10
    grep -v '^#\s*$' "$OUT/nt-graph.log" | tail -16 | tee -a "$T"
  fi ;;
gates)
  S="--prime 32 --gen 32 --rows 0"
  gate tiny-tp2-eager-graph --preset tiny --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 $S --cells all
  gate tiny-tp2-eager-graph-T1 --preset tiny --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 $S --temp 1 --cells some
  gate tiny-tp2-window3 --preset tiny --a cuda:tp=2,devices=$D2 --b cuda:tp=2,devices=$D2,window=3 $S --cells none
  gate tiny-st2-tp2 --preset tiny --a cuda:stages=2,tp=2 --b cuda-graph:stages=2,tp=2 $S --cells some
  gate tiny-cpu-cuda-tp2 --preset tiny --a cpu:tp=2 --b cuda:tp=2,devices=$D2 $S --compare nmse:1e-4 --cells none
  gate tiny-tp1-eager-graph --preset tiny --a cuda --b cuda-graph $S
  # negative control: tp=2 sums in another order than tp=1, so an exact gate of them must fail
  gate neg-tiny-tp1-vs-tp2 --preset tiny --a cuda --b cuda:tp=2,devices=$D2 $S --cells none
  gate small-tp2-eager-graph --preset small --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 $S --cells some
  gate 1b-bf16-tp2 --preset llama-1b --dtype bf16 --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 --prime 64 --gen 64 --rows 0 --cells some
  gate 1b-q8-tp2-T1 --preset llama-1b --dtype q8_0 --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 --prime 64 --gen 64 --rows 0 --temp 1 --cells none ;;
refuse)
  if [ -e "$B/plugins.d/nccl.collective.manifest" ] && [ "$NGPU" -lt 2 ]; then
    gate refuse-nccl-one-device --preset tiny --a cuda:tp=2,collective=nccl --b cuda-graph:tp=2,collective=nccl --prime 4 --gen 4 --rows 0
  fi
  gate refuse-tp1-coll-key --preset tiny --a cuda --b cuda:collective=oneshot:nosuchkey=1 --prime 4 --gen 4 --rows 0
  gate refuse-tp1-coll --preset tiny --a cuda --b cuda-graph:collective=nccl --prime 4 --gen 4 --rows 0
  gate refuse-tp1-step-timeout --preset tiny --a cuda:step_timeout_ms=500 --b cuda-graph --prime 4 --gen 4 --rows 0
  gate refuse-stall-one-stage --preset tiny --a cuda:tp=2,stall_us=1000 --b cuda:tp=2 --prime 4 --gen 4 --rows 0 ;;
window)
  S="--prime 32 --gen 32 --rows 0 --cells all"
  gate win-tp2-eager --preset tiny --a cuda:tp=2,devices=$D2 --b cuda:tp=2,devices=$D2,window=3 $S
  gate win-tp2-graph --preset tiny --a cuda-graph:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2,window=3 $S
  gate win-st2tp2 --preset tiny --a cuda:stages=2,tp=2,window=3 --b cuda-graph:stages=2,tp=2,window=4 $S
  gate win-small-st2tp2 --preset small --a cuda:stages=2,tp=2,window=4 --b cuda:stages=2,tp=2 --prime 32 --gen 32 --rows 0 --cells some ;;
neg-window)
  if [ -d "$B/old-plugins.d" ]; then
    S="--prime 32 --gen 32 --rows 0 --cells all"
    MEMRA_PLUGIN_PATH=$B/old-plugins.d gate neg-win-tp2-eager --preset tiny --a cuda:tp=2,devices=$D2 --b cuda:tp=2,devices=$D2,window=3 $S
    MEMRA_PLUGIN_PATH=$B/old-plugins.d gate neg-win-tp2-graph --preset tiny --a cuda-graph:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2,window=3 $S
    MEMRA_PLUGIN_PATH=$B/old-plugins.d gate neg-win-st2tp2 --preset tiny --a cuda:stages=2,tp=2,window=3 --b cuda-graph:stages=2,tp=2,window=4 $S
  fi ;;
mixed|neg-mixed)
  S="--prime 32 --gen 32 --rows 0 --cells all"; P=$MEMRA_PLUGIN_PATH; pre=""
  if [ $m = neg-mixed ]; then [ -d "$B/old-plugins.d" ] || continue; P=$B/old-plugins.d; pre=neg-; fi
  MEMRA_PLUGIN_PATH=$P gate ${pre}mixed-st0 --preset tiny --a cuda:placement=mixedtp --b cuda-graph:placement=mixedtp,window=3 $S
  MEMRA_PLUGIN_PATH=$P gate ${pre}mixed-st1 --preset tiny --a cuda:placement=mixedtp,tp_stage=1,window=3 --b cuda-graph:placement=mixedtp,tp_stage=1 $S
  MEMRA_PLUGIN_PATH=$P gate ${pre}mixed-small --preset small --a cuda:placement=mixedtp,window=4 --b cuda-graph:placement=mixedtp,tp_stage=1,window=4 --prime 32 --gen 32 --rows 0 --cells some --compare nmse:1e-4 ;;
race)
  if [ -d "$B/race-plugins.d" ]; then
    for k in 1 2 3; do
      MEMRA_PLUGIN_PATH=$B/race-plugins.d gate race-tiny-$k --preset tiny --a cuda:stages=2,tp=2,window=3 --b cuda-graph:stages=2,tp=2,window=4 --prime 32 --gen 32 --rows 0 --cells all
      MEMRA_PLUGIN_PATH=$B/race-plugins.d gate race-small-$k --preset small --a cuda:stages=2,tp=2,window=4 --b cuda:stages=4,tp=2,window=4 --prime 32 --gen 32 --rows 0 --cells all --compare nmse:1e-4
    done
  fi ;;
bench)
  NR=1; [ "$NGPU" -ge 2 ] && NR=2
  for c in "oneshot 2 $D2" "oneshot:blocks=16,chunk=32 2 $D2" "oneshot:chunk=256 2 $D2" "oneshot:chunk=4096 2 $D2" "nccl $NR 0,1" "nccl:allgather $NR 0,1"; do set -- $c
    [ "$2" = 1 ] && d=0 || d=$3
    n=$(echo "bc-$1-$2" | tr ':=' '--')
    prog "$n" "$B/bin/memra" bench-collective --collective $1 --ranks $2 --devices $d --max-bytes 4M --jsonl "$OUT/bench-collective.jsonl"
    sed -n '1,12p' "$OUT/$n.log" | tee -a "$T"
  done ;;
slices)
  S="--prime 32 --gen 32 --rows 0 --cells none"
  for d in f32 f16 bf16 q8_0; do
    gate "slice-tiny-$d" --preset tiny --dtype $d --a cpu:tp=2 --b cuda:tp=2,devices=$D2 $S --compare nmse:1e-4
  done
  for p in qwen2-tiny qwen3-tiny; do
    gate "slice-$p" --preset $p --a cpu:tp=2 --b cuda:tp=2,devices=$D2 $S --compare nmse:1e-4
    gate "exact-$p" --preset $p --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 --prime 32 --gen 32 --rows 0 --cells some
  done
  gate slice-small-q8 --preset small --dtype q8_0 --a cpu:tp=2 --b cuda:tp=2,devices=$D2 $S --compare nmse:1e-4
  gate st2tp2-window3 --preset small --a cuda:stages=2,tp=2 --b cuda:stages=2,tp=2,window=3 $S
  gate st2tp2-graph-T1 --preset small --a cuda:stages=2,tp=2,window=3 --b cuda-graph:stages=2,tp=2 --prime 32 --gen 32 --rows 0 --temp 1 --cells some
  grep -h -o '"max_nmse":[0-9.e-]*' "$OUT"/slice-*.jsonl | tr '\n' ' ' | tee -a "$T"; echo | tee -a "$T" ;;
ranks)
  prog coll-oneshot-4 "$B/bin/memra_cuda_check_collective" --collective oneshot --ranks 4
  prog coll-oneshot-8 "$B/bin/memra_cuda_check_collective" --collective oneshot --ranks 8
  S="--prime 32 --gen 32 --rows 0"
  gate small-tp4 --preset small --a cuda:tp=4 --b cuda-graph:tp=4 $S --cells some
  gate small-st2tp2-vs-tp4 --preset small --a cuda-graph:tp=4 --b cuda-graph:stages=2,tp=2 $S --compare nmse:1e-4 --cells none
  gate small-st2tp2-exact --preset small --a cuda:stages=2,tp=2 --b cuda-graph:stages=2,tp=2,window=3 $S --cells some
  gate small-cpu-cuda-tp4 --preset small --a cpu:tp=4 --b cuda:tp=4 $S --compare nmse:1e-4 --cells none
  gate 1b-tp8 --preset llama-1b --dtype bf16 --a cuda:tp=8 --b cuda-graph:tp=8 $S --cells some
  gate 1b-tp8-T1 --preset llama-1b --dtype q8_0 --a cuda:tp=8 --b cuda-graph:tp=8 $S --temp 1 --cells none
  gate 1b-cpu-cuda-tp8 --preset llama-1b --dtype bf16 --a cpu:tp=8 --b cuda:tp=8 --prime 16 --gen 16 --rows 0 --compare nmse:1e-4 --cells none
  prog bc-oneshot-8 "$B/bin/memra" bench-collective --collective oneshot --ranks 8 --max-bytes 1M
  sed -n '4,12p' "$OUT/bc-oneshot-8.log" | tee -a "$T" ;;
pdl)
  prog coll-oneshot-pdl "$B/bin/memra_cuda_check_collective" --collective oneshot:pdl=1 --ranks 2 --devices $D2
  gate pdl-1b --preset llama-1b --dtype bf16 --a cuda-graph:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2,collective=oneshot:pdl=1 --prime 64 --gen 128 --rows 8 --cells some
  gate pdl-8b --preset llama-8b --dtype bf16 --a cuda-graph:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2,collective=oneshot:pdl=1 --prime 64 --gen 128 --rows 8 --cells none
  gate pdl-8b-eager --preset llama-8b --dtype bf16 --a cuda:tp=2,devices=$D2 --b cuda:tp=2,devices=$D2,collective=oneshot:pdl=1 --prime 32 --gen 64 --rows 4 --cells none
  for g in pdl-1b pdl-8b pdl-8b-eager; do
    echo "$g: $(grep -o '"median_tok_s":[0-9.]*\|"ratio_b_over_a":[0-9.]*\|"ratio_ci95":\[[0-9.,]*\]' "$OUT/$g.jsonl" | tr '\n' ' ')" | tee -a "$T"
  done ;;
sync)
  prog coll-oneshot-acqrel "$B/bin/memra_cuda_check_collective" --collective oneshot:sync=acqrel --ranks 2 --devices $D2
  gate sync-1b --preset llama-1b --dtype bf16 --a cuda-graph:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2,collective=oneshot:sync=acqrel --prime 64 --gen 128 --rows 8 --cells none
  gate sync-8b --preset llama-8b --dtype bf16 --a cuda-graph:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2,collective=oneshot:sync=acqrel --prime 64 --gen 128 --rows 8 --cells none
  for g in sync-1b sync-8b; do
    grep -o '"median_tok_s":[0-9.]*\|"ratio_b_over_a":[0-9.]*\|"ratio_ci95":\[[0-9.,]*\]' "$OUT/$g.jsonl" | tr '\n' ' ' | tee -a "$T"; echo | tee -a "$T"
  done
  for c in "oneshot:sync=fence" "oneshot:sync=acqrel"; do
    n=$(echo "bc-$c" | tr ':=' '--')
    prog "$n" "$B/bin/memra" bench-collective --collective $c --ranks 2 --devices $D2 --max-bytes 256K
    sed -n '4,12p' "$OUT/$n.log" | tee -a "$T"
  done ;;
full)
  F="--prime 256 --gen 256"
  for p in "tiny f32" "llama-1b bf16" "llama-8b bf16"; do set -- $p
    gate "full-$1-greedy" --preset $1 --dtype $2 --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 $F --cells some
    gate "full-$1-T1" --preset $1 --dtype $2 --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 $F --temp 1 --seed 7 --cells none
    grep -o '"median_tok_s":[0-9.]*\|"ratio_b_over_a":[0-9.]*\|"ratio_ci95":\[[0-9.,]*\]' "$OUT/full-$1-greedy.jsonl" | tr '\n' ' ' | tee -a "$T"; echo | tee -a "$T"
  done
  for p in tiny small; do
    gate full-$p-cpu-cuda --preset $p --a cpu:tp=2 --b cuda:tp=2,devices=$D2 $F --compare nmse:1e-4 --rows 0 --cells none
  done ;;
speed)
  # decode speed of the graph arm at tp=1 and tp=2 (with two ranks on one GPU this measures the
  # collective's overhead in a real decode, not the speed-up of two GPUs)
  k=0; for arm in cuda-graph cuda-graph:tp=2,devices=$D2 cuda-graph:tp=2,devices=$D2,collective=oneshot:chunk=4096 cuda-graph:tp=2,devices=$D2,collective=oneshot:chunk=256; do
    k=$((k+1)); echo "speed-8b-$k: $arm" | tee -a "$T"
    PT=300 prog "speed-8b-$k" "$B/bin/memra" bench --preset llama-8b --dtype bf16 --backend "$arm" --prime 512 -n 128
    grep -i 'tok/s\|floor\|ceiling' "$OUT/speed-8b-$k.log" | head -4 | tee -a "$T"
  done ;;
esac; done; done
echo "== table =="; cat "$T"
