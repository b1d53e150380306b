#pragma once
// A settings table (actors/settings/settings.hpp) as command-line flags: one per setting, with its range,
// its meaning and the default it has in `s`.

#include <CLI/CLI.hpp>

#include "actors/settings/settings.hpp"

namespace illm::cli {

/// Adds a flag for every setting of `table` to `cmd`, writing into `s` (which holds the defaults shown).
template <class Settings>
void add_setting_flags(CLI::App* cmd, const std::vector<actors::int_setting<Settings>>& table, Settings& s) {
  for (const auto& setting : table)
    cmd->add_option(setting.flag(), s.*setting.field, setting.help)
        ->check(CLI::Range(setting.lo, setting.hi))
        ->capture_default_str();
}

/// Copies from `given` into `to` each setting of `table` whose flag was on `cmd`'s command line (flags that
/// override a configuration file).
template <class Settings>
void copy_given_settings(const CLI::App* cmd, const std::vector<actors::int_setting<Settings>>& table,
                         const Settings& given, Settings& to) {
  for (const auto& setting : table)
    if (cmd->count(setting.flag()) > 0) to.*setting.field = given.*setting.field;
}

}  // namespace illm::cli
