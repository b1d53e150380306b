#include "actors/placement/profile_cache.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "gpu/model_files.hpp"

namespace illm::actors::placement {

namespace fs = std::filesystem;

namespace {

/// $ILLM_CACHE/profiles, else $HOME/.cache/illm/profiles.
fs::path cache_dir() {
  if (const char* dir = std::getenv("ILLM_CACHE"); dir && *dir) return fs::path(dir) / "profiles";
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : ".") / ".cache/illm/profiles";
}

/// Sizes and modification times of the model's files: the file itself, or every file of its folder (a name
/// is looked up where named models live).
std::string files_stamp(const std::string& model) {
  std::error_code ec;
  fs::path path = model;
  if (!fs::exists(path, ec)) path = fs::path(gpu::models_dir()) / model;
  std::string stamp = fs::absolute(path, ec).string();
  auto add = [&](const fs::path& file) {
    const auto size = fs::file_size(file, ec);
    const auto time = fs::last_write_time(file, ec).time_since_epoch().count();
    stamp += fmt::format("|{}:{}:{}", file.filename().string(), ec ? 0 : size, ec ? 0 : time);
  };
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file(ec)) add(entry.path());
  } else {
    add(path);
  }
  return stamp;
}

/// FNV-1a, 64 bits: stable across runs and builds (std::hash need not be).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string profile_cache_path(const profile_key& key) {
  const std::string all = fmt::format("{}\n{}\n{}\n{}\n{}", files_stamp(key.model_path), key.weights, key.kv_type,
                                      key.device, key.threads);
  return (cache_dir() / fmt::format("{:016x}.json", fnv1a(all))).string();
}

std::optional<profile> cached_profile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  auto loaded = profile_from_file(path);
  if (!loaded.is_ok()) return std::nullopt;
  return loaded.value();
}

bool store_profile(const std::string& path, const profile& p) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial);
    out << to_json(p) << "\n";
    if (!out) return false;
  }
  return std::rename(partial.c_str(), path.c_str()) == 0;
}

}  // namespace illm::actors::placement
