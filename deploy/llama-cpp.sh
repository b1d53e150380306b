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
