#include "tests/fuzz/fuzz_support.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace illm::fuzz {

namespace {

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

void put_piece(std::vector<uint8_t>& out, const std::string& piece, float score) {
  const int32_t length = int32_t(piece.size());
  put(out, &score, sizeof score);
  put(out, &length, sizeof length);
  put(out, piece.data(), piece.size());
}

}  // namespace

std::vector<uint8_t> small_vocab_image() {
  std::vector<uint8_t> out;
  const int32_t max_length = 16;
  put(out, &max_length, sizeof max_length);
  put_piece(out, "<unk>", 0);
  put_piece(out, "<s>", 0);
  put_piece(out, "</s>", 0);
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    put_piece(out, piece, 0);
  }
  const char* words[] = {" ", "e", "t", "a", "o", "n", " the", " a", " to", " and", "he", "in", "er", "on", " was",
                         "ed", " of", " it", "re", "is", " Once", " upon", " time", " there", "ll", " little", "ing",
                         " girl", " boy", " day", " big", " she", " he", "!", ".", ",", "?", "\n", "{", "}", "\""};
  int id = 259;
  for (const char* w : words) put_piece(out, w, -float(id++));
  while (id < small_vocab_size) put_piece(out, "w" + std::to_string(id++), -1000.0f);
  return out;
}

const std::string& as_file(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("illm-fuzz-input", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != ssize_t(size))) {
    std::perror("illm fuzz: in-memory file");
    std::abort();
  }
  return path;
}

}  // namespace illm::fuzz
