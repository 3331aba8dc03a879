#!/usr/bin/env bash
# clocks.sh: the SM and memory clocks, the power draw and nvidia-smi's clock-event reasons while
# the graph arm decodes (issues 26 and 27: is the H200's larger fixed cost a lock of its SM clock
# under a bandwidth-bound load, and does that tell its machines apart?). Binaries built on the
# development machine and carried (bin, lib, plugins.d; default .carry-dev, or $CARRY); models
# written by memra mkmodel into /tmp/w. nvidia-smi samples every 50 ms beside each bench, and
# only the samples with the GPU busy (utilization >= 90%) are summarised. Reads the card's state;
# changes nothing of it. A short table last; logs under $OUT.
#   bash bench/gpu/clocks.sh [PRESET:DTYPE ...]   (default llama-8b:q6_k gemma3-270m:q4_k_m llama-1b:bf16)
# Run in the thirty-second session on an H200: SM clock 1,980 MHz (its maximum) in every busy sample,
# no clock-event reason (RESULTS and NOTES, thirty-second session).
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit,enforced.power.limit --format=csv | tee -a "$T"
smi() { nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 50 > "$OUT/smi_$1.csv" 2>&1 & echo $!; }
summ() { python3 - "$OUT/smi_$1.csv" <<'PY' | tee -a $T
import sys, collections
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(", ") >= 6]
busy = [r for r in rows if r[1].strip().isdigit() and int(r[1]) >= 90]
if not busy: print("  no busy samples"); sys.exit()
med = lambda v: sorted(v)[len(v) // 2]
sm = [int(float(r[2])) for r in busy]; mem = [int(float(r[3])) for r in busy]; pw = [float(r[4]) for r in busy]
why = collections.Counter(r[6].strip() for r in busy)
print("  busy samples %d: sm MHz min %d median %d max %d; mem MHz %d; power W median %.0f max %.0f; reasons %s"
      % (len(busy), min(sm), med(sm), max(sm), med(mem), med(pw), max(pw), dict(why)))
PY
}
W=/tmp/w; mkdir -p $W
for P in ${@:-llama-8b:q6_k gemma3-270m:q4_k_m llama-1b:bf16}; do p=${P%%:*} d=${P##*:}
  mk $p $d
  pid=$(smi $p-$d)
  bench "b_${p}_$d" --model $W/$p-$d.gguf --arm cuda-graph,cuda-graph:window=2 --prime 512 -n 128 --reps 10 --abba
  kill $pid
  summ $p-$d
done
echo ---; cat "$T"
