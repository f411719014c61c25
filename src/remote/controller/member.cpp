#include "remote/controller/member.hpp"

namespace rig::remote {

const char* expect_name(Expect::Kind kind) noexcept {
  switch (kind) {
    case Expect::Kind::reached:
      return "REACHED";
    case Expect::Kind::opened:
      return "OPENED";
    case Expect::Kind::made:
      return "MADE";
    case Expect::Kind::loaded:
      return "LOADED";
    case Expect::Kind::railed:
      return "RAILED";
  }
  return "?";
}

}  // namespace rig::remote
