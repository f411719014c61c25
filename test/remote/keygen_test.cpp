// `rig keygen FILE`: the new file's mode and size, and each refusal with its exit code and text.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "keygen.hpp"
#include "rig/remote.hpp"
#include "support.hpp"

using rig::remote::test::ScratchDir;

namespace {

struct Run {
  int code;
  std::string out;
  std::string err;
};

Run keygen(std::vector<std::string> words) {
  std::vector<char*> args;
  for (auto& w : words) args.push_back(w.data());
  std::ostringstream out, err;
  const int code = rig::tools::keygen_main(args, out, err);
  return {code, out.str(), err.str()};
}

std::string contents(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

const std::string usage =
    "usage: rig keygen FILE\n"
    "Writes a new random 32-byte job key to FILE, readable by this user only (mode 0600).\n"
    "FILE must not exist: a key is never overwritten. Name a FILE that starts with '-' as "
    "./-FILE.\n";

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("keygen writes 32 random bytes with mode 0600 that read_key accepts") {
    ScratchDir dir;
    // A umask that would take the owner's read bit must not leave an unreadable key.
    const mode_t old_mask = ::umask(0477);
    const auto r = keygen({dir.file("a")});
    ::umask(old_mask);
    CHECK(r.code == 0);
    CHECK(r.out.empty());
    CHECK(r.err.empty());

    struct stat st {};
    REQUIRE(::stat(dir.file("a").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(st.st_size == 32);
    CHECK(rig::remote::read_key(dir.file("a")).ok());

    REQUIRE(keygen({dir.file("b")}).code == 0);
    CHECK(contents(dir.file("a")) != contents(dir.file("b")));
  }

  TEST_CASE("keygen never overwrites a file, nor writes through a symbolic link") {
    ScratchDir dir;
    const auto path = dir.file("key");
    REQUIRE(keygen({path}).code == 0);
    const auto before = contents(path);
    const auto again = keygen({path});
    CHECK(again.code == 1);
    CHECK(again.err ==
          "rig keygen: key file " + path + ": already exists; a key is never overwritten\n");
    CHECK(contents(path) == before);

    const auto link = dir.file("link");
    REQUIRE(::symlink(dir.file("elsewhere").c_str(), link.c_str()) == 0);
    CHECK(keygen({link}).err ==
          "rig keygen: key file " + link + ": already exists; a key is never overwritten\n");
    CHECK(::access(dir.file("elsewhere").c_str(), F_OK) != 0);
  }

  TEST_CASE("keygen reports a file it cannot create") {
    ScratchDir dir;
    const auto path = dir.file("no/such/dir/key");
    const auto r = keygen({path});
    CHECK(r.code == 1);
    CHECK(r.err == "rig keygen: key file " + path + ": cannot create: No such file or directory\n");
  }

  TEST_CASE("keygen's usage: exit 2 with the usage on stderr, --help on stdout") {
    for (const auto& words :
         std::vector<std::vector<std::string>>{{}, {"a", "b"}, {"-f"}, {"--force", "key"}}) {
      CAPTURE(words.size());
      const auto r = keygen(words);
      CHECK(r.code == 2);
      CHECK(r.err == usage);
      CHECK(r.out.empty());
    }
    const auto help = keygen({"--help"});
    CHECK(help.code == 0);
    CHECK(help.out == usage);
    CHECK(help.err.empty());
  }
}
