#!/usr/bin/env bash
# mma_chunk.sh (issue 28: gemv=mma's BF16 prefill chunk near the tensor rate, branch mmachunk).
# Run from the repository root with CARRY set to a carried release build (bench/gpu/common.sh)
# that also holds bin/memra_cuda_mma_chunk_bench_old (the same bench linked with the previous
# memra_cuda_kernels) and plugins-old (the previous cuda plugins). PARTS (default "bench check
# gates pp ncu") picks the parts; in order, each skipped when fewer seconds than it needs are left
# of BUDGET:
#   bench  the chunk GEMV alone (prep + GEMV), old and new (and the new file's other tiles 1-3) on
#          llama-8b's shapes at M 512, then mma2 on 4096 x 4096
#   check  memra_cuda_check_mma_gemv (chunk against decode bit for bit; its negative control),
#          in the background during the llama-1b gates
#   gates  llama-1b BF16, 600 prime + 32 gen: cuda:gemv=mma,prefill=1 against cuda-graph:gemv=mma
#          greedy and sampled, against cuda:gemv=mma,prefill=7, mma2 likewise, and the control
#          gemv=mma against the default (must fail); llama-8b 520 + 16 against the graph arm
#   pp     memra bench pp512 on llama-8b BF16 cuda-graph:gemv=mma, new plugins then old
#   ncu    Nsight Compute's gpu__time_duration of each chunk kernel in the bench, old and new
GATE_TIMEOUT=${GATE_TIMEOUT:-60}; BENCH_TIMEOUT=${BENCH_TIMEOUT:-60}
. bench/gpu/common.sh
BUDGET=${BUDGET:-160}; PARTS=${PARTS:-bench check gates pp ncu}
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
left() { [ $SECONDS -le $((BUDGET - $1)) ] || { echo "skipped $2: $SECONDS s spent" | tee -a "$T"; return 1; }; }
L1="--preset llama-1b --dtype bf16"; L8="--preset llama-8b --dtype bf16"; P="--prime 600 --gen 32 --rows 0"
MB=$B/bin/memra_cuda_mma_chunk_bench
mb() { local name=$1; shift; timeout 40 "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?" | tee -a "$T"
  sed 's/^gemv=//' "$OUT/$name.log" | tr -s ' ' | cut -c1-120 | tee -a "$T"; }
if has bench && left 140 bench; then
  mb bench_old ${MB}_old -r 20
  mb bench_new $MB -r 20
  mb mma2_old ${MB}_old -r 10 mma2 4096 4096 512 0 0
  mb mma2_new $MB -r 10 mma2 4096 4096 512 0 0
fi
has check && ( timeout 100 $B/bin/memra_cuda_check_mma_gemv > "$OUT/check.log" 2>&1
  echo "check_mma_gemv rc=$? $(tail -1 "$OUT/check.log" | cut -c1-100)" > "$OUT/check.rc" ) & CK=$!
if has gates && left 100 gates; then
  gate m1b_pf    --a cuda:gemv=mma,prefill=1 --b cuda-graph:gemv=mma $L1 $P
  gate m1b_pf_t  --a cuda:gemv=mma,prefill=1 --b cuda-graph:gemv=mma $L1 $P --temp 0.8 --seed 3
  gate m1b_pf7   --a cuda:gemv=mma,prefill=1 --b cuda:gemv=mma,prefill=7 $L1 $P
  gate m1b_mma2  --a cuda:gemv=mma2,prefill=1 --b cuda-graph:gemv=mma2 $L1 $P --temp 0.8 --seed 3
  control m1b_ctl --a cuda:gemv=mma --b cuda $L1 --prime 64 --gen 16 --rows 0
fi
if has check; then
  wait $CK; cat "$OUT/check.rc" | tee -a "$T"; grep -q PASS "$OUT/check.log" || head -8 "$OUT/check.log" | cut -c1-200 | tee -a "$T"
fi
has gates && left 75 gate8b && gate m8b_pf --a cuda:gemv=mma,prefill=1 --b cuda-graph:gemv=mma $L8 --prime 520 --gen 16 --rows 0
if has pp && left 50 pp; then
  bench pp8_new $L8 --arm cuda-graph:gemv=mma --prime 512 -n 32 --reps 2
  export MEMRA_PLUGIN_PATH=$B/plugins-old
  left 25 pp_old && bench pp8_old $L8 --arm cuda-graph:gemv=mma --prime 512 -n 32 --reps 2
  export MEMRA_PLUGIN_PATH=$B/plugins.d
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for v in old new; do
  has ncu && [ -n "$NCU" ] && left 12 ncu_$v || break
  b=$MB; [ $v = old ] && b=${MB}_old
  timeout 20 "$NCU" --metrics gpu__time_duration.sum --csv -k regex:chunk_ "$b" -r 1 > "$OUT/ncu_$v.csv" 2> "$OUT/ncu_$v.err"
  echo "ncu_$v rc=$? (us per launch: kernel, grid, each launch in order)" | tee -a "$T"
  python3 - "$OUT/ncu_$v.csv" <<'PY' | tee -a "$T"
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1], errors='replace'))); h = None; out = collections.OrderedDict()
for r in rows:
    if h is None:
        if 'Kernel Name' in r: h = {k: i for i, k in enumerate(r)}
        continue
    if len(r) < len(h) or r[h['Metric Name']] != 'gpu__time_duration.sum': continue
    v = float(r[h['Metric Value']].replace(',', '')); u = r[h['Metric Unit']]
    v = v / 1000.0 if u.startswith('n') else v * 1000.0 if u.startswith('m') else v
    k = r[h['Kernel Name']].split('(')[0].replace('void ', '')[:60] + ' ' + r[h['Grid Size']]
    out.setdefault(k, []).append('%.1f' % v)
for k, v in out.items(): print(k, ' '.join(v))
PY
done
cd "$OUT" && tar czf logs.tgz *.log *.jsonl *.csv *.err 2>/dev/null; rm -f *.log *.jsonl *.csv *.err *.rc
echo "== table (mmachunk, $SECONDS s)"; cat "$T"
