#pragma once
// What the fuzz targets share: an input handed to a loader that reads a path (an in-memory file), and a small
// vocabulary in llama2.c's tokenizer format (byte pieces, specials and a few words).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace illm::fuzz {

/// Pieces of the small vocabulary: <unk>, <s>, </s>, the 256 byte pieces <0x00>..<0xFF>, then some words.
inline constexpr int small_vocab_size = 300;

/// The small vocabulary as a tokenizer.bin image.
std::vector<uint8_t> small_vocab_image();

/// An in-memory file (memfd) holding `size` bytes of `data` from now on; its path (/proc/self/fd/N) stays the
/// same for the process, so one file serves every input of a run.
const std::string& as_file(const uint8_t* data, size_t size);

}  // namespace illm::fuzz
