#!/usr/bin/env bash
# Sourced by the scripts that compare illm with llama.cpp: llama.cpp's source from the npm package node-llama-cpp
# (its git bundle), built once into $llama with the tools they run. Needs $work (a scratch folder) and a prefix for
# messages in $who.
package=node-llama-cpp@3.21.1
cache="${ILLM_CACHE:-$HOME/.cache/illm}"
llama="$cache/llama.cpp-node-llama-cpp-3.21.1"
llama_tools=(llama-server llama-bench llama-batched-bench llama-convert-llama2c-to-ggml llama-quantize llama-perplexity)

build_llama() {
  local bin="$llama/build/bin" missing=()
  for t in "${llama_tools[@]}"; do [ -x "$bin/$t" ] || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] && return
  if [ ! -d "$llama/src" ]; then
    echo "$who: fetching $package (npm pack) and building llama.cpp into $llama (once; ~15 min on 2 cores)"
    rm -rf "$llama" && mkdir -p "$llama"
    (cd "$work" && npm pack --silent "$package" >/dev/null && tar -xzf node-llama-cpp-3.21.1.tgz package/llama)
    git clone -q "$work/package/llama/gitRelease.bundle" "$llama/src"
    cp "$work/package/llama/llama.cpp.info.json" "$llama/"
    cmake -S "$llama/src" -B "$llama/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF >"$work/cmake.log"
  else
    echo "$who: building llama.cpp's ${missing[*]} (once)"
  fi
  cmake --build "$llama/build" -j"$(nproc)" --target "${missing[@]}" >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; exit 1; }
}

# Runs a llama.cpp tool with its shared libraries.
llama_run() {
  local tool=$1
  shift
  LD_LIBRARY_PATH="$llama/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$llama/build/bin/$tool" "$@"
}

# stories15M (from $model_dir) as an F32 GGUF in $gguf, converted once.
convert_model() {
  gguf="$llama/stories15M-f32.gguf"
  [ -s "$gguf" ] && return
  python3 - "$model_dir/tokenizer.bin" "$work/tokenizer-unique.bin" <<'EOF'
# llama2.c's tokenizer.bin: int32 max piece length, then per piece float32 score, int32 length, bytes. A piece
# that repeats an earlier one gets "#k" appended.
import struct, sys
data = open(sys.argv[1], "rb").read()
at, seen, out = 4, set(), [data[:4]]
while at < len(data):
    score, n = struct.unpack_from("<fi", data, at)
    piece, at = data[at + 8:at + 8 + n], at + 8 + n
    k = 0
    while piece + (b"#%d" % k if k else b"") in seen:
        k += 1
    piece += b"#%d" % k if k else b""
    seen.add(piece)
    out.append(struct.pack("<fi", score, len(piece)) + piece)
open(sys.argv[2], "wb").write(b"".join(out))
EOF
  "$llama/build/bin/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$work/tokenizer-unique.bin" \
    --llama2c-model "$model_dir/stories15M.bin" --llama2c-output-model "$gguf.part" >"$work/convert.log" 2>&1 ||
    { tail -20 "$work/convert.log" >&2; exit 1; }
  # The converter writes a context length of 128 whatever the model's; stories15M was trained on 256 (its
  # llama2.c header's seq_len, which illm uses): set llama.context_length (a uint32) to that.
  python3 - "$gguf.part" "$model_dir/stories15M.bin" <<'EOF'
import struct, sys
seq_len = struct.unpack_from("<7i", open(sys.argv[2], "rb").read(28))[6]
with open(sys.argv[1], "r+b") as f:
    head = f.read(1 << 20)
    key = b"llama.context_length"
    found = head.find(struct.pack("<Q", len(key)) + key)
    at = found + 8 + len(key)
    kind, value = struct.unpack_from("<II", head, at) if found >= 0 else (0, 0)
    if kind != 4:
        sys.exit("no uint32 llama.context_length in the converted GGUF")
    f.seek(at + 4)
    f.write(struct.pack("<I", seq_len))
print(f"llama.context_length {value} -> {seq_len}")
EOF
  mv "$gguf.part" "$gguf"
}
