#include "remote/controller/launch_report.hpp"

#include "remote/job/report.hpp"

namespace rig::remote {

void LaunchReport::started() {
  if (!started_.exchange(true)) write_report_line(fd_, owner_, "started");
}

void LaunchReport::failed(const std::string& cause) {
  if (!ended_.exchange(true)) write_report_line(fd_, owner_, "failed " + cause);
}

void LaunchReport::closed() {
  if (!ended_.exchange(true)) write_report_line(fd_, owner_, "closed");
}

}  // namespace rig::remote
