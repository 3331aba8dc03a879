#!/usr/bin/env bash
# gemma3.sh: gemma3 on the cuda and cuda-graph backends (issue 26, item 2), with binaries built on
# the development machine and carried (bin, lib, plugins.d; default .carry-dev, or $CARRY), as
# tp.sh has them; op-plugins.d with the example op plugin where carried (ops.sh says how), and
# neg-window/, neg-post/ (a cuda plugin built with the window off by one, and with the post-FFN
# norm left out) for the negative controls where carried. Models are written on the GPU machine
# (memra mkmodel) into /tmp. A short table last; logs under $OUT.
# Modes (in order; default "tiny big tp neg"):
#   tiny   gemma3-tiny (window 8, layers 0-4 local): cpu against cuda in nmse mode (1e-5) at f32,
#          bf16 and q8_0 on each attention path (attention=auto: the cluster kernel; tiled;
#          unfused), 64 + 64 steps; cuda against cuda-graph exact on each path, 256 + 256 steps,
#          greedy and sampled; window=3, norm=unfused, stages=2 exact; postnorm=launch against the
#          fold (f32, q8_0) exact, and memra_cuda_check_post_norm where carried; the example op plugin
#          (norm=unfused against op.rmsnorm=example exact: its norm at every site, the post norms
#          included; against its graph; against cpu)
#   big    the gemma3-270m preset (n_embd 640, 4 q heads, 1 kv head, head_dim 256: the tiled and
#          unfused paths; window 512) where mkmodel has it: cuda against cuda-graph exact, 600 +
#          100 steps (past the window), greedy and sampled, both paths; cpu against cuda (nmse
#          1e-5, 32 + 32 steps: see NOTES below)
#   tp     cuda:tp=2 against cuda-graph:tp=2 exact (refusal cells), cpu:tp=2 against cuda:tp=2
#          (nmse 1e-5), on gemma3-tiny (one device: both ranks on device 0)
#   neg    the negative controls: cpu against the neg-window and neg-post plugins: rc=1 expected
# NOTES (2026-12-01, a scratch preset of the 270M's shapes with vocab 4096, Q8_0): cuda against
# cuda-graph exact (600 + 100 steps, both paths, greedy and sampled); cpu against cuda grows from
# NMSE 1.1e-12 at step 0 to 2e-5 at step 100 and ~5e-3 by step 400 (tokens 0.79-0.82 agree), and
# so does cpu against cpu:tp=2 on the same shapes with 2 kv heads (summation order alone, the
# same RoPE): 9.7e-13 at step 0, 7.6e-7 at 79, 9e-5 at 359: the random 18-layer model amplifies
# any rounding difference with the context. RoPE angles taken in double on cuda (a diagnostic
# build) did not change that. So the nmse mode on that shape needs a short run or a wide tolerance.
set -u
export NCCL_NVLS_ENABLE=0 MEMRA_SYNTH_THREADS=16
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT/l"
B=${CARRY:-$PWD/.carry-dev}
export LD_LIBRARY_PATH=$B/lib MEMRA_PLUGIN_PATH=$B/plugins.d
[ -d "$B/op-plugins.d" ] && MEMRA_PLUGIN_PATH=$MEMRA_PLUGIN_PATH:$B/op-plugins.d
G=$B/bin/memra-gate; M=$B/bin/memra; T=$OUT/table.txt
gate() { local name=$1; shift; local t0=$SECONDS
  timeout 300 "$G" "$@" --quiet --jsonl "$OUT/l/$name.jsonl" > "$OUT/l/$name.log" 2>&1; local rc=$?
  local v=$(grep -o '"record":"verdict","pass":[a-z]*' "$OUT/l/$name.jsonl" 2>/dev/null | cut -d, -f2)
  local w=$(grep '"record":"step"' "$OUT/l/$name.jsonl" 2>/dev/null | grep -o '"nmse":[0-9.e+-]*' | cut -d: -f2 | sort -g | tail -1)
  local bad=$(grep '"record":"step"' "$OUT/l/$name.jsonl" 2>/dev/null | grep -c '"differing_logits":[1-9]')
  local ta=$(grep -o '"token_agreement":[0-9.]*' "$OUT/l/$name.jsonl" 2>/dev/null | head -1)
  printf '%-24s rc=%s %3ss %s maxnmse=%s badsteps=%s %s\n' "$name" "$rc" "$((SECONDS-t0))" "$v" "${w:--}" "$bad" "$ta" | tee -a "$T"
  [ $rc -le 1 ] || tail -2 "$OUT/l/$name.log" | cut -c1-200 | tee -a "$T"; }
N="--rows 0"
for d in f32 bf16 q8_0; do $M mkmodel --preset gemma3-tiny --dtype $d -o /tmp/g3-$d.gguf > /dev/null; done
for mode in ${@:-tiny big tp neg}; do case $mode in
tiny)
  for d in f32 bf16 q8_0; do for a in auto tiled unfused; do
    gate nmse-$d-$a --model /tmp/g3-$d.gguf --a cpu --b cuda:attention=$a --prime 64 -n 64 $N --compare nmse:1e-5; done; done
  for d in f32 q8_0; do for a in auto tiled unfused; do
    gate ex-$d-$a --model /tmp/g3-$d.gguf --a cuda:attention=$a --b cuda-graph:attention=$a --prime 256 -n 256 --rows 4; done; done
  gate ex-bf16-T --model /tmp/g3-bf16.gguf --a cuda --b cuda-graph --prime 256 -n 256 --rows 4 --temp 0.8 --top-k 40 --seed 3
  gate ex-q8-unf-T --model /tmp/g3-q8_0.gguf --a cuda:attention=unfused --b cuda-graph:attention=unfused --prime 256 -n 256 $N --temp 1 --seed 5
  gate ex-window3 --model /tmp/g3-f32.gguf --a cuda --b cuda:window=3 --prime 64 -n 64 $N
  gate ex-norm-unfused --model /tmp/g3-q8_0.gguf --a cuda:norm=unfused --b cuda-graph:norm=unfused --prime 64 -n 64 $N
  gate ex-stages2 --model /tmp/g3-f32.gguf --a cuda --b cuda:stages=2 --prime 64 -n 64 $N
  for d in f32 q8_0; do # postnorm=launch against the fold (issue 27.1): exact
    gate ex-postnorm-$d --model /tmp/g3-$d.gguf --a cuda:postnorm=launch --b cuda-graph --prime 64 -n 64 $N --temp 1 --seed 5; done
  if [ -x "$B/bin/memra_cuda_check_post_norm" ]; then
    timeout 120 "$B/bin/memra_cuda_check_post_norm" > "$OUT/l/check_post_norm.log" 2>&1
    echo "check_post_norm rc=$? $(tail -1 "$OUT/l/check_post_norm.log")" | tee -a "$T"; fi
  if [ -d "$B/op-plugins.d" ]; then
    gate op-unfused-vs-example --model /tmp/g3-q8_0.gguf --a cuda:norm=unfused --b cuda:norm=unfused,op.rmsnorm=example --prime 64 -n 64 $N
    gate op-example-graph --model /tmp/g3-q8_0.gguf --a cuda:op.rmsnorm=example --b cuda-graph:op.rmsnorm=example --prime 64 -n 64 $N --temp 1
    gate op-example-cpu --model /tmp/g3-f32.gguf --a cpu:op.rmsnorm=example --b cuda:op.rmsnorm=example --prime 64 -n 64 $N --compare nmse:1e-5
  fi ;;
big)
  for d in q8_0 bf16; do
    $M mkmodel --preset gemma3-270m --dtype $d -o /tmp/g3big-$d.gguf > /dev/null 2>&1 || { echo "big: no gemma3-270m preset" | tee -a "$T"; break; }
    for a in auto unfused; do
      gate big-ex-$d-$a --model /tmp/g3big-$d.gguf --a cuda:attention=$a --b cuda-graph:attention=$a --prime 600 -n 100 --rows 4
    done
    gate big-ex-$d-T --model /tmp/g3big-$d.gguf --a cuda --b cuda-graph --prime 600 -n 100 --rows 4 --temp 0.8 --top-k 40 --seed 3
    gate big-nmse-$d --model /tmp/g3big-$d.gguf --a cpu --b cuda --prime 32 -n 32 $N --compare nmse:1e-5
  done ;;
tp)
  gate tp2-ex --model /tmp/g3-f32.gguf --a cuda:tp=2,devices=0,0 --b cuda-graph:tp=2,devices=0,0 --prime 128 -n 128 $N --cells some
  gate tp2-ex-q8-T --model /tmp/g3-q8_0.gguf --a cuda:tp=2,devices=0,0 --b cuda-graph:tp=2,devices=0,0 --prime 128 -n 128 $N --temp 1 --cells none
  for d in f32 q8_0; do
    gate tp2-nmse-$d --model /tmp/g3-$d.gguf --a cpu:tp=2 --b cuda:tp=2,devices=0,0 --prime 64 -n 64 $N --compare nmse:1e-5 --cells none
  done ;;
neg)
  for n in window post; do
    [ -d "$B/neg-$n" ] || continue
    mkdir -p /tmp/neg-$n && cp $B/plugins.d/* /tmp/neg-$n/ && cp $B/neg-$n/*.so /tmp/neg-$n/
    MEMRA_PLUGIN_PATH=/tmp/neg-$n gate NEG-$n --model /tmp/g3-f32.gguf --a cpu --b cuda --prime 64 -n 64 $N --compare nmse:1e-5
  done ;;
esac; done
(cd "$OUT" && tar czf gemma3-logs.tgz l && rm -rf l)
echo ====; cat "$T"
