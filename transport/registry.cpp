#include "transport/registry.hpp"

#include <functional>

#include <fmt/format.h>

#include "transport/faulty/faulty_plane.hpp"
#include "transport/inproc/inproc.hpp"
#include "transport/sim/sim_plane.hpp"
#include "transport/ucx/factory.hpp"

namespace illm::transport {

namespace {

result<std::shared_ptr<data_plane>> make_inproc(const plane_options& o) {
  auto fabric = std::dynamic_pointer_cast<inproc_fabric>(o.group);
  if (!fabric) return status{status_code::invalid_argument, "an inproc plane needs the group of its peers"};
  auto endpoint = fabric->connect(o.self);
  if (!endpoint.is_ok()) return endpoint.error();
  return std::shared_ptr<data_plane>(std::move(endpoint).value());
}

result<std::shared_ptr<data_plane>> make_sim(const plane_options& o) {
  return std::shared_ptr<data_plane>(std::make_shared<sim_plane>(o.self, o.timer));
}

/// One kind of plane: its name and how it is made.
struct plane_kind {
  const char* name;
  std::function<bool()> built;
  std::function<result<std::shared_ptr<data_plane>>(const plane_options&)> make;
};

const std::vector<plane_kind>& kinds() {
  static const std::vector<plane_kind> all{
      {"inproc", [] { return true; }, make_inproc},
      {"ucx", ucx_built, make_ucx_plane},
      {"sim", [] { return true; }, make_sim},
  };
  return all;
}

}  // namespace

std::shared_ptr<plane_group> make_plane_group(std::string_view kind) {
  if (kind == "inproc") return std::make_shared<inproc_fabric>();
  return nullptr;
}

namespace {

constexpr std::string_view faulty_prefix = "faulty:";

/// "faulty:KIND": a plane of KIND inside a faulty plane injecting the faults of options.faults.
result<std::shared_ptr<data_plane>> make_faulty(std::string_view inner_kind, const plane_options& options) {
  auto spec = parse_fault_spec(options.faults);
  if (!spec.is_ok()) return spec.error();
  auto inner = make_plane(inner_kind, options);
  if (!inner.is_ok()) return inner.error();
  return std::shared_ptr<data_plane>(std::make_shared<faulty_plane>(std::move(inner).value(), spec.value()));
}

}  // namespace

result<std::shared_ptr<data_plane>> make_plane(std::string_view kind, const plane_options& options) {
  if (kind.starts_with(faulty_prefix)) return make_faulty(kind.substr(faulty_prefix.size()), options);
  for (const plane_kind& k : kinds())
    if (kind == k.name) return k.make(options);
  return status{status_code::invalid_argument,
                fmt::format("no data plane \"{}\": this build has {}", kind, fmt::join(plane_kinds(), ", "))};
}

std::vector<std::string> plane_kinds() {
  std::vector<std::string> out;
  for (const plane_kind& k : kinds())
    if (k.built()) out.push_back(k.name);
  out.push_back("faulty:KIND");
  return out;
}

}  // namespace illm::transport
