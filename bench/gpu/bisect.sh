#!/usr/bin/env bash
# bisect.sh: the gate's bisect (issue 30 item 1) on the GPU(s), with binaries built on the
# development machine and carried (bin, lib, plugins.d; default .carry-dev, or $CARRY), as tp.sh.
# Each gate here FAILS on purpose (rc=1) except the negative control; what matters is the bisect
# record each writes, printed one line a gate: step, layer, site, tensor, index, ulp, nmse, the
# rank of each arm holding the element (null: every rank), and the cause. Modes (in order):
#   ranks    tp=1 against tp=2 exact on tiny, eager and graph (two ranks on one device, or two
#            devices): must print layer 0, site attn_res (cuda adds the residual inside the reduced
#            GEMV, so attn_res is the all-reduce's output: cpu's attn_out has no cuda twin), b's rank
#            null (every rank holds it), cause "sums across ranks in another order ...". cuda-graph
#            bisects through an uncaptured run of the same token on its inner cuda backend.
#   family   cpu against cuda exact on tiny: fails by design (other device families); the bisect
#            names the first site both backends hand over that differs (expected: layer 0 q, k or v,
#            the qkv GEMV's summation order), cause "the arms differ by design: ...". With tp=2 on
#            both: the same, b's rank the one holding the element (a shard of q: rank 0 or 1).
#   neg      cuda against cuda-graph (exact, passes: rc=0), and tp=2 against tp=2 graph: no bisect
#            record may appear (printed: "bisect: none").
#   fault    a fault at one (layer, op, step), given as $FAULT_A / $FAULT_B arm strings (h11's test
#            op plugin faultyop, once merged and once it has cuda entry points: e.g.
#            FAULT_B='cuda:op.gemv.f32=faultyop:site=q:layer=1:pos=5:index=3' with
#            FAULT_A='cuda:op.gemv.f32=faultyop', unarmed: a GEMV site an op plugin serves runs
#            unfused on cuda, so the built-in cuda arm is no exact twin of it):
#            must print step 5, layer 1, site q, index 3; with tp=2 on both arms, b's rank 0 (every
#            rank's call flips its own row 3: logical 3 and the second shard's row 3); a fault in
#            ffn_gate or ffn_up shows at ffn_act (cuda fuses the SwiGLU into the gate/up GEMV).
# A short table last; logs and records under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 MEMRA_SYNTH_THREADS=16
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
B=${CARRY:-$PWD/.carry-dev}
export LD_LIBRARY_PATH=$B/lib MEMRA_PLUGIN_PATH=$B/plugins.d
# the test-only plugins (faultyop for the fault mode: build/tests/plugins.d), carried as test-plugins.d
[ -d "$B/test-plugins.d" ] && MEMRA_PLUGIN_PATH=$MEMRA_PLUGIN_PATH:$B/test-plugins.d
G=$B/bin/memra-gate
T="$OUT/table.txt"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$OUT/machine.txt" 2>&1
# gate NAME EXPECTED_RC ARGS...: one line of rc and the bisect record's fields.
gate() { local name=$1 want=$2; shift 2; local t0=$SECONDS
  timeout 300 "$G" "$@" --quiet --jsonl "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1; local rc=$?
  local b=$(grep '"record":"bisect"' "$OUT/$name.jsonl" 2>/dev/null)
  local f="none"
  if [ -n "$b" ]; then
    f=$(echo "$b" | grep -o '"step":[0-9]*\|"layer":[^,]*\|"site":"[^"]*"\|"tensor":"[^"]*"\|"index":[^,]*\|"ulp":[0-9]*\|"nmse":[^,]*\|"reproduced":[a-z]*\|"rank":[^,}]*\|"cause":"[^"]\{0,60\}\|"note":"[^"]\{0,100\}' | tr '\n' ' ')
  fi
  local ok=ok; [ $rc -eq $want ] || ok=UNEXPECTED
  printf '%-24s rc=%s (want %s) %-10s %3ss bisect: %s\n' "$name" "$rc" "$want" "$ok" "$((SECONDS-t0))" "$f" | tee -a "$T"
  [ $rc -le 1 ] || tail -3 "$OUT/$name.log" | cut -c1-240 | tee -a "$T"; }
D2=0,0; [ "$NGPU" -ge 2 ] && D2=0,1
S="--preset tiny --prime 16 --gen 16 --rows 0 --cells none --compare exact"
for mode in "${@:-ranks family neg fault}"; do for m in $mode; do case $m in
ranks)
  gate ranks-eager 1 --a cuda --b cuda:tp=2,devices=$D2 $S
  gate ranks-graph 1 --a cuda-graph --b cuda-graph:tp=2,devices=$D2 $S
  gate ranks-mixed 1 --a cuda:tp=2,devices=$D2 --b cuda-graph $S ;;
family)
  gate family-tp1 1 --a cpu --b cuda $S
  gate family-tp2 1 --a cpu:tp=2 --b cuda:tp=2,devices=$D2 $S
  gate family-qwen3 1 --a cpu --b cuda-graph --preset qwen3-tiny --prime 8 --gen 8 --rows 0 --compare exact ;;
neg)
  gate neg-eager-graph 0 --a cuda --b cuda-graph $S
  gate neg-tp2-eager-graph 0 --a cuda:tp=2,devices=$D2 --b cuda-graph:tp=2,devices=$D2 $S ;;
fault)
  if [ -n "${FAULT_B:-}" ]; then
    gate fault 1 --a "${FAULT_A:-cuda}" --b "$FAULT_B" $S
  else
    echo "fault: skipped (set FAULT_A and FAULT_B to arms with a fault op plugin)" | tee -a "$T"
  fi ;;
esac; done; done
echo "== table =="; cat "$T"
