// The hostlist parser (tools/rig/hostlist.hpp): SLURM_JOB_NODELIST's syntax expanded as Slurm
// does, and every malformed list refused with the place and the reason.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rig/hostlist.hpp"

using rig::cli::expand_hostlist;
using rig::cli::hostlist_names_max;
using Names = std::vector<std::string>;

namespace {

Names names(std::string_view list) {
  auto got = expand_hostlist(list);
  REQUIRE_MESSAGE(got, (got ? "" : got.error()));
  return *got;
}

std::string error(std::string_view list) {
  auto got = expand_hostlist(list);
  REQUIRE_FALSE(got);
  return got.error();
}

}  // namespace

TEST_CASE("hostlist: plain names, ranges, sets and their widths") {
  CHECK(names("login") == Names{"login"});
  CHECK(names("a,b,c") == Names{"a", "b", "c"});
  CHECK(names("gpu[01-03,07],login") == Names{"gpu01", "gpu02", "gpu03", "gpu07", "login"});
  // The width is the lower bound's text: padding kept, and none added where none was written.
  CHECK(names("n[08-11]") == Names{"n08", "n09", "n10", "n11"});
  CHECK(names("n[8-11]") == Names{"n8", "n9", "n10", "n11"});
  CHECK(names("n[098-100]") == Names{"n098", "n099", "n100"});
  CHECK(names("n[007]") == Names{"n007"});
  CHECK(names("n[5-5]") == Names{"n5"});
  // Text after a group, and several groups: every combination, the first slowest.
  CHECK(names("r[1-2]n[1-2]") == Names{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(names("node[1-2]-ib") == Names{"node1-ib", "node2-ib"});
  CHECK(names("[1-2]") == Names{"1", "2"});
  // Order and repeats as given: the agents' order is the list's.
  CHECK(names("b,a[2,1],b") == Names{"b", "a2", "a1", "b"});
  CHECK(names("host-1.example.org,10.0.0.2") == Names{"host-1.example.org", "10.0.0.2"});
}

TEST_CASE("hostlist: a malformed list is refused with its place and its reason") {
  CHECK(error("") == "hostlist '': no names");
  CHECK(error("a,,b") == "hostlist 'a,,b': an empty name at offset 2");
  CHECK(error("a,") == "hostlist 'a,': an empty name at offset 2");
  CHECK(error(",a") == "hostlist ',a': an empty name at offset 0");
  CHECK(error("gpu[01-03") == "hostlist 'gpu[01-03': '[' not closed at offset 3");
  CHECK(error("gpu01-03]") == "hostlist 'gpu01-03]': ']' without '[' at offset 8");
  CHECK(error("gpu[0[1]]") == "hostlist 'gpu[0[1]]': '[' inside brackets at offset 5");
  CHECK(error("gpu[]") == "hostlist 'gpu[]': empty brackets at offset 3");
  CHECK(error("gpu[1,,2]") == "hostlist 'gpu[1,,2]': an empty range at offset 6");
  CHECK(error("gpu[1-]") == "hostlist 'gpu[1-]': a range without a bound at offset 6");
  CHECK(error("gpu[-3]") == "hostlist 'gpu[-3]': a range without a bound at offset 4");
  CHECK(error("gpu[a-3]") == "hostlist 'gpu[a-3]': 'a' in a range, not a digit at offset 4");
  CHECK(error("gpu[1-2-3]") == "hostlist 'gpu[1-2-3]': '-' in a range, not a digit at offset 7");
  CHECK(error("gpu[3-1]") == "hostlist 'gpu[3-1]': the range 3-1 runs backwards at offset 4");
  CHECK(error("gpu[1234567890123456789]") ==
        "hostlist 'gpu[1234567890123456789]': a number of more than 18 digits at offset 4");
  CHECK(error("a b") == "hostlist 'a b': ' ' in a name at offset 1");
  // Bytes that are not printable are escaped in the message, never printed as they are.
  CHECK(error("a\nb") == "hostlist 'a\\nb': '\\n' in a name at offset 1");
}

TEST_CASE("hostlist: a list that stands for too many names is refused before it is made") {
  CHECK(names("n[1-65536]").size() == hostlist_names_max);
  CHECK(error("n[0-99999999999]") ==
        "hostlist 'n[0-99999999999]': more than 65536 names at offset 2");
  // The product of groups, each small: still bounded.
  CHECK(error("a[1-1000]b[1-1000]") ==
        "hostlist 'a[1-1000]b[1-1000]': more than 65536 names at offset 0");
  // Across names: the bound is on the whole list.
  CHECK(error("a[1-65536],b") == "hostlist 'a[1-65536],b': more than 65536 names at offset 11");
}
