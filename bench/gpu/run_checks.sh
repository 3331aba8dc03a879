#!/usr/bin/env bash
# run_checks.sh: builds memra on the device machine and runs the cuda checks of issues 5 and 6,
# logging everything under $OUT (or ./gpu-logs) and printing a short table last.
#   bench/gpu/run_checks.sh [smoke] [gate] [gatelite] [sanitize] [kernels] [speed1b] [speed8b]
#                           [speed1bq] [speedab] [fallback] [profile] [gate8b]  (default: smoke)
# smoke: device sampler vs cpu sampler; cpu vs cuda (tiny/small/qwen3-tiny, every dtype, NMSE);
#        cuda vs cuda-graph / cuda:stages=2,4 (windows 1 and 3) exact; per-kernel timing.
# gate:  memra-gate runs (256 prime + 256 gen, greedy and sampled) and llama-1b NMSE checks.
# gatelite: the llama-1b NMSE checks (BF16, Q8_0) and the small multi-stage gates of `gate`.
# kernels: per-kernel timing (also with the column split off). speedab: llama-1b graph with one
# change undone through the environment. fallback: after a failed smoke row, the failing kinds
# of check again with each change undone, to say which one broke it.
# speed1b/speed8b: memra bench on llama-1b and llama-8b (BF16, Q8_0), eager and graph, 512 + 128
# (speed1bq: without the no-PDL runs). profile: ncu sections of single kernel launches.
# sanitize: compute-sanitizer memcheck and racecheck over 16 steps of tiny.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
MODES=${*:-smoke}
B=build-dev
TABLE="$OUT/table.txt"
: > "$TABLE"
row() { printf '%-64s %s\n' "$1" "$2" | tee -a "$TABLE"; }

# run NAME CMD...: runs, logs to $OUT/log.txt, records PASS/FAIL(rc) and the last line.
run() {
    local name=$1; shift
    echo "=== $name: $*" >> "$OUT/log.txt"
    local t0=$SECONDS
    "$@" >> "$OUT/log.txt" 2>&1
    local rc=$?
    local dt=$((SECONDS - t0))
    local last=$(tail -n 1 "$OUT/log.txt" | cut -c1-150)
    row "$name" "rc=$rc ${dt}s | $last"
    return $rc
}

if [ ! -x $B/bin/memra-gate ] || [ "${REBUILD:-1}" = 1 ]; then
    { nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem --format=csv;
      ls /usr/include/openssl/evp.h; nvcc --version | tail -1; } > "$OUT/machine.txt" 2>&1
    SSL=""
    if [ ! -f /usr/include/openssl/evp.h ] && [ -d .carry/ssl/include ]; then
        # no libssl-dev there: the carried headers and the runtime's libcrypto
        SSL="-DOPENSSL_INCLUDE_DIR=$PWD/.carry/ssl/include -DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so* | head -1)"
        echo "using carried OpenSSL headers: $SSL" >> "$OUT/machine.txt"
    fi
    # BUILD_TYPE=RelWithDebInfo skips the Release attempt (it failed on a host -Werror in core)
    (cmake -S . -B $B -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} $SSL > "$OUT/build.txt" 2>&1 &&
     cmake --build $B -j16 >> "$OUT/build.txt" 2>&1) ||
    (echo "Release build failed; RelWithDebInfo" >> "$OUT/build.txt";
     cmake -S . -B $B -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $SSL >> "$OUT/build.txt" 2>&1 &&
     cmake --build $B -j16 >> "$OUT/build.txt" 2>&1)
    row "build" "rc=$? $(grep -c ' error' "$OUT/build.txt") errors ($(grep CMAKE_BUILD_TYPE: $B/CMakeCache.txt))"
fi
CA=$B/bin/memra_cuda_check_arms
GATE=$B/bin/memra-gate
MEMRA=$B/bin/memra

for mode in $MODES; do case $mode in
smoke)
    run "sampler: device vs cpu (ties, near-ties, all branches)" $B/bin/memra_cuda_check_sampler
    for p in tiny small qwen3-tiny qwen2-tiny; do for d in f32 f16 bf16 q8_0; do
        run "cpu vs cuda $p $d 32+32 nmse" $CA --a cpu --b cuda --preset $p --dtype $d --prime 32 --gen 32 --nmse 1e-5
    done; done
    run "cpu vs cuda tiny f32 greedy 128 steps (token agreement)" $CA --a cpu --b cuda --preset tiny --prime 1 --gen 127 --nmse 1e-5
    for d in f32 bf16 q8_0; do
        run "cuda vs cuda-graph tiny $d sampled 64+64" $CA --a cuda --b cuda-graph --preset tiny --dtype $d --prime 64 --gen 64 --temp 1 --seed 7
        run "cuda vs cuda:stages=2 window=3 small $d greedy" $CA --a cuda --b cuda:stages=2 --window 3 --preset small --dtype $d --prime 64 --gen 64
    done
    run "cuda vs cuda:stages=4 window=3 small sampled topk/p" $CA --a cuda --b cuda:stages=4 --window 3 --preset small --prime 64 --gen 64 --temp 0.8 --top-k 40 --top-p 0.9 --seed 3
    run "cuda vs cuda-graph:stages=2 small sampled" $CA --a cuda --b cuda-graph:stages=2 --preset small --prime 64 --gen 64 --temp 1 --seed 5
    run "NEGATIVE control: perturbed token at step 40 (expect rc=1, first_bad=40)" $CA --a cuda --b cuda-graph --preset tiny --prime 32 --gen 32 --perturb-step 40
    run "gate tiny cuda vs cuda-graph 256+256 greedy" $GATE --a cuda --b cuda-graph --preset tiny --prime 256 --gen 256 --rows 4 --jsonl "$OUT/gate_tiny.jsonl" --quiet
    ;;
sanitize)
    for tool in memcheck racecheck; do
        run "compute-sanitizer $tool: tiny cuda 8+8" compute-sanitizer --tool $tool --error-exitcode 9 $CA --a cuda --b cuda-graph --preset tiny --prime 8 --gen 8 --temp 1 --top-k 20
    done
    ;;
gate)
    for d in f32 f16 bf16 q8_0; do
        run "cpu vs cuda llama-1b $d 8+8 nmse" $CA --a cpu --b cuda --preset llama-1b --dtype $d --prime 8 --gen 8 --nmse 1e-5
    done
    for p in tiny llama-1b; do
        run "gate $p bf16 cuda vs cuda-graph greedy ABBA" $GATE --a cuda --b cuda-graph --preset $p --dtype bf16 --prime 256 --gen 256 --greedy --rows 20 --schedule ABBA --jsonl "$OUT/gate_${p}.jsonl" --quiet
        run "gate $p bf16 cuda vs cuda-graph temp1 BAAB" $GATE --a cuda --b cuda-graph --preset $p --dtype bf16 --prime 256 --gen 256 --temp 1 --seed 42 --rows 20 --schedule BAAB --jsonl "$OUT/gate_${p}.jsonl" --quiet
    done
    for b in "cuda:stages=2" "cuda:stages=4,window=3" "cuda:stages=2,splits=3,window=3"; do for s in "--greedy" "--temp 1 --seed 42"; do
        run "gate small cuda vs $b $s" $GATE --a cuda --b $b --preset small --prime 256 --gen 256 $s --rows 0 --quiet
    done; done
    ;;
kernels)
    run "kernels llama-8b bf16" $B/bin/memra_cuda_kernel_bench 8b bf16 576
    run "kernels llama-8b q8_0" $B/bin/memra_cuda_kernel_bench 8b q8_0 576
    run "kernels llama-1b bf16" $B/bin/memra_cuda_kernel_bench 1b bf16 576
    for d in bf16 q8_0; do
        MEMRA_CUDA_KSPLIT=1 run "kernels llama-8b $d, no column split (KSPLIT=1)" $B/bin/memra_cuda_kernel_bench 8b $d 576
    done
    MEMRA_CUDA_KSPLIT=1 run "kernels llama-1b bf16, no column split (KSPLIT=1)" $B/bin/memra_cuda_kernel_bench 1b bf16 576
    ;;
gatelite)
    for d in bf16 q8_0; do
        run "cpu vs cuda llama-1b $d 8+8 nmse" $CA --a cpu --b cuda --preset llama-1b --dtype $d --prime 8 --gen 8 --nmse 1e-5
    done
    for b in "cuda:stages=2" "cuda:stages=4,window=3" "cuda:stages=2,splits=3,window=3"; do for s in "--greedy" "--temp 1 --seed 42"; do
        run "gate small cuda vs $b $s" $GATE --a cuda --b $b --preset small --prime 256 --gen 256 $s --rows 0 --quiet
    done; done
    ;;
speed1bq)
    for arm in cuda cuda-graph; do
        run "bench llama-1b bf16 $arm" $MEMRA bench --backend $arm --preset llama-1b --dtype bf16 --prime 512 -n 128 --jsonl "$OUT/bench.jsonl"
    done
    ;;
profile)
    # Nsight Compute on single launches of the kernel bench (hardware counters; clocks left alone):
    # where the Q8_0 GEMVs and the fused attention stall. Summary lines into the table.
    NCU="ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy"
    for spec in "regex:mc_gemv 10 8b q8_0 qkv" "regex:mc_gemv 170 8b q8_0 gate-up" "regex:mc_att_fused 10 8b bf16 attention" "regex:mc_gemv 10 8b bf16 qkv"; do
        set -- $spec
        echo "=== ncu $5 $3 $4" >> "$OUT/ncu.txt"
        timeout 90 $NCU -k $1 --launch-skip $2 --launch-count 1 $B/bin/memra_cuda_kernel_bench $3 $4 576 >> "$OUT/ncu.txt" 2>&1
        row "ncu $5 $3 $4" "rc=$? $(grep -E 'Memory Throughput|Duration' "$OUT/ncu.txt" | tail -2 | tr -s ' ' | tr '\n' ';')"
    done
    ;;
speedab)
    # the same binaries with one change undone through the environment
    MEMRA_CUDA_ATT_UNFUSED=1 run "bench llama-1b bf16 cuda-graph (unfused attention)" $MEMRA bench --backend cuda-graph --preset llama-1b --dtype bf16 --prime 512 -n 128
    MEMRA_CUDA_KSPLIT=1 run "bench llama-1b bf16 cuda-graph (no column split)" $MEMRA bench --backend cuda-graph --preset llama-1b --dtype bf16 --prime 512 -n 128
    ;;
fallback)
    # only when a smoke row failed: which change breaks it
    if grep -q "^cpu vs cuda\|^cuda vs" "$TABLE" && grep "^cpu vs cuda\|^cuda vs" "$TABLE" | grep -qv "rc=0"; then
        for env in MEMRA_CUDA_ATT_UNFUSED=1 MEMRA_CUDA_KSPLIT=1; do
            for d in f32 q8_0; do
                env $env $CA --a cpu --b cuda --preset qwen3-tiny --dtype $d --prime 32 --gen 32 --nmse 1e-5 >> "$OUT/log.txt" 2>&1
                row "[$env] cpu vs cuda qwen3-tiny $d" "rc=$?"
                env $env $CA --a cuda --b cuda-graph --preset tiny --dtype $d --prime 64 --gen 64 --temp 1 --seed 7 >> "$OUT/log.txt" 2>&1
                row "[$env] cuda vs cuda-graph tiny $d" "rc=$?"
                env $env $CA --a cuda --b cuda:stages=2 --window 3 --preset small --dtype $d --prime 64 --gen 64 >> "$OUT/log.txt" 2>&1
                row "[$env] cuda vs cuda:stages=2 small $d" "rc=$?"
            done
        done
    fi
    ;;
speed1b)
    for arm in cuda cuda-graph; do
        run "bench llama-1b bf16 $arm" $MEMRA bench --backend $arm --preset llama-1b --dtype bf16 --prime 512 -n 128 --jsonl "$OUT/bench.jsonl"
        MEMRA_CUDA_NO_PDL=1 run "bench llama-1b bf16 $arm (no PDL)" $MEMRA bench --backend $arm --preset llama-1b --dtype bf16 --prime 512 -n 128
    done
    ;;
speed8b)
    for d in ${DTYPES8B:-bf16 q8_0}; do for arm in cuda cuda-graph; do
        run "bench llama-8b $d $arm" $MEMRA bench --backend $arm --preset llama-8b --dtype $d --prime 512 -n 128 --jsonl "$OUT/bench.jsonl"
    done; done
    ;;
gate8b)
    for d in ${DTYPES8B:-bf16}; do for s in "--greedy" "--temp 1 --seed 42"; do
        run "gate llama-8b $d cuda vs cuda-graph $s" $GATE --a cuda --b cuda-graph --preset llama-8b --dtype $d --prime 256 --gen 256 $s --rows 20 --jsonl "$OUT/gate_8b.jsonl" --quiet
    done; done
    ;;
esac; done
echo; echo "==== summary ($MODES) ===="; cut -c1-130 "$TABLE"
echo "==== speed ===="
grep -E "^=== bench|^decode:" "$OUT/log.txt" | sed 's/=== bench //; s/: build-dev.*//; s/decode: *//' | paste - - | cut -c1-120
echo "==== kernels ===="
grep -E "^=== kernels|^gemv|^attention|^rope|^per token" "$OUT/log.txt" | sed 's/: build-dev.*//' | cut -c1-110
