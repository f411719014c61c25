// rig::load: a program on a device, through the device's driver.
#include "core/device.hpp"
#include "core/signals.hpp"
#include "rig/program.hpp"

namespace rig {

Result<Image> load(const Device& d, const Program& program) {
  const detail::SignalsBlocked blocked;
  if (!d) throw std::invalid_argument("rig: load on an empty Device handle");
  d.core()->check_usable();
  auto module = d.core()->driver().load(program);
  if (!module) return Error(d.name() + ": " + module.error());
  return Image(std::make_shared<detail::ImageCore>(d, std::move(*module)));
}

}  // namespace rig
