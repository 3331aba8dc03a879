#!/usr/bin/env bash
# crosscheck.sh: memra's cpu backend against llama.cpp's own reading of the same synthetic GGUF
# files (issue 29 item 5: no MoE GGUF is on PyPI). llama.cpp's source comes from PyPI's
# llama-cpp-python sdist (it vendors llama.cpp), built here CPU-only (libllama, ~2 min on 2
# cores); lcdump.c (ours) decodes token ids one at a time with an f32 KV cache and flash attention
# off and writes every step's logits; `memra run --backend cpu:prefill=1 --dump-logits` writes
# memra's. Per preset and dtype: the largest per-step NMSE and the argmax agreement.
#   bash bench/llamacpp/crosscheck.sh [BUILD_DIR (default build; relative to the tree or absolute)] [PRESETS...]
# Exit 1 when an f32 row's NMSE exceeds 1e-7, or when the negative control (llama.cpp on the
# seed-1 file against memra on a seed-2 file of the same preset) falls under 1e-3: a comparison
# that cannot fail; 77 (a skip) when the llama.cpp source cannot be downloaded. ctest runs it as
# llamacpp_crosscheck (label slow).
# At f32 both compute in float, so the NMSE is rounding (about 1e-10 to 1e-9); at f16, bf16 and
# q8_0 llama.cpp's CPU rounds the activations to the weight type (or q8_0) before each dot
# product, memra does not: larger by design, and the dense `tiny` preset shows the same size.
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
build=${1:-build}; shift || true
presets=${*:-tiny moe-tiny qwen2moe-tiny granitemoe-tiny}
W=${MEMRA_CROSSCHECK_DIR:-$HOME/.cache/memra/llamacpp}; mkdir -p "$W"
case $build in /*) M=$build/bin/memra ;; *) M=$root/$build/bin/memra ;; esac
[ -x "$M" ] || { echo "crosscheck: $M not built" >&2; exit 2; }
V=0.3.36
src=$W/llama_cpp_python-$V/vendor/llama.cpp
if [ ! -f "$src/build/bin/libllama.so" ]; then
  (cd "$W" && pip download "llama-cpp-python==$V" --no-deps --no-binary :all: -d . -q > "$W/pip.log" 2>&1) ||
    { echo "SKIP: crosscheck: pip could not download llama-cpp-python $V (no network, or no package index)"; exit 77; }
  tar xzf "$W/llama_cpp_python-$V.tar.gz" -C "$W"
  cmake -S "$src" -B "$src/build" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=Release > "$W/cmake.log"
  cmake --build "$src/build" --target llama -j2 > "$W/build.log"
fi
gcc -O2 -Wall -Werror -o "$W/lcdump" "$here/lcdump.c" -I"$src/include" -I"$src/ggml/include" -L"$src/build/bin" -lllama \
  -Wl,-rpath,"$src/build/bin"
python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(3, 512)) for _ in range(24)))" > "$W/ids.txt"
fail=0
# nmse FILE_LLAMACPP FILE_MEMRA: cmp.py's line for two dumps of n_vocab logits a step
row() { local nv; nv=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['n_vocab'])" "$W/m.bin.json")
  python3 "$here/cmp.py" "$1" "$2" "$nv"; }
dump() { "$M" mkmodel --preset "$1" --dtype "$2" --seed "$3" -o "$W/$1-$2-$3.gguf" > /dev/null 2> "$W/mk.err" ||
           { cat "$W/mk.err" >&2; exit 3; }
         "$M" run --model "$W/$1-$2-$3.gguf" --backend cpu:prefill=1 --prompt-ids "$W/ids.txt" -n 1 \
           --dump-logits "$W/m.bin" > /dev/null 2> "$W/m.err" || { cat "$W/m.err" >&2; exit 3; }; }
for p in $presets; do for d in f32 f16 bf16 q8_0; do
  dump "$p" "$d" 1
  "$W/lcdump" "$W/$p-$d-1.gguf" "$W/ids.txt" "$W/l.bin" 2> "$W/l.err" || { tail -3 "$W/l.err" >&2; exit 3; }
  r=$(row "$W/l.bin" "$W/m.bin"); echo "$p $d: $r"
  n=$(echo "$r" | awk '{print $4}')
  if [ "$d" = f32 ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 1e-7 else 1)" "$n"; then
    echo "FAIL: $p f32 differs from llama.cpp's reading beyond rounding"; fail=1; fi
done; done
# the negative control: the last preset's f32 logits of llama.cpp (seed 1) against memra's on seed 2
p=${presets##* }
"$W/lcdump" "$W/$p-f32-1.gguf" "$W/ids.txt" "$W/l.bin" 2> "$W/l.err" || { tail -3 "$W/l.err" >&2; exit 3; }
dump "$p" f32 2
r=$(row "$W/l.bin" "$W/m.bin"); echo "control ($p f32, llama.cpp on seed 1, memra on seed 2): $r"
n=$(echo "$r" | awk '{print $4}')
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1e-3 else 1)" "$n"; then
  echo "FAIL: the negative control passed: this comparison cannot tell models apart"; fail=1; fi
exit $fail
