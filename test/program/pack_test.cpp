// The `rig` CLI's pack command, run as a user runs it: what it builds, what it prints, its exit
// statuses, and that it leaves nothing behind on any path.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/arch.hpp"
#include "rig/program.hpp"
#include "rig/rig.hpp"
#include "support.hpp"

namespace {

using namespace rig;
using rig::test::Outcome;
using rig::test::ScratchDir;

std::string rig_exe() {
  return rig::test::env_path("RIG_TEST_RIG_EXE");
}
std::string saxpy_c() {
  return rig::test::env_path("RIG_TEST_SAXPY_C");
}
std::string baseline() {
  return rig::test::env_path("RIG_TEST_BASELINE_LEVEL");
}

const std::string synopsis =
    "usage: rig pack -o OUT.rig SOURCE [--levels LEVEL,...] [--cc COMPILER] [--include DIR]\n"
    "                [-- COMPILER_FLAGS...]\n"
    "       rig pack -o OUT.rig SOURCE.cu [--sm SM,...] [--nvcc NVCC] [-- NVCC_FLAGS...]\n"
    "       rig pack --list FILE.rig\n";

std::vector<std::string> default_levels() {
#if defined(__x86_64__)
  return {"x86_64", "x86_64-v2", "x86_64-v3", "x86_64-v4"};
#else
  return {"aarch64"};
#endif
}

// Runs `rig ARGS...` with TMPDIR pointing into `scratch` (so the test sees every temporary file
// rig makes) and without RIG_INCLUDE, so rig finds its own headers unless a test says otherwise.
// Owner and thread: one test case. Lifetime: its scope; the scratch directory goes with it.
struct Cli {
  ScratchDir scratch;
  std::string tmpdir = scratch / "tmp";
  Cli() { std::filesystem::create_directory(tmpdir); }

  Outcome operator()(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), rig_exe());
    env.push_back("TMPDIR=" + tmpdir);
    bool include_set = false;
    for (const auto& e : env) include_set |= e.starts_with("RIG_INCLUDE");
    if (!include_set) env.push_back("RIG_INCLUDE");
    return rig::test::run(args, env, scratch);
  }
  // rig's private temporary directories: there must be none once a command has returned.
  std::size_t leftovers() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmpdir)) ++n;
    return n;
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = scratch / name;
    rig::test::write_bytes(path, rig::test::bytes_of(text));
    return path;
  }
};

std::vector<std::string> arches(const Program& p) {
  std::vector<std::string> a;
  for (const Target& t : p.targets()) {
    CHECK(t.format == TargetFormat::host_elf);
    CHECK(rig::test::text_of({t.payload.begin(), t.payload.begin() + 4}) ==
          "\x7f"
          "ELF");
    a.push_back(t.arch);
  }
  return a;
}

TEST_CASE("the build's saxpy.rig holds every level of this architecture, lowest first") {
  auto p = Program::read(rig::test::env_path("RIG_TEST_SAXPY_RIG"));
  REQUIRE(p.ok());
  CHECK(arches(*p) == default_levels());
}

TEST_CASE("rig pack builds a program, finding its own headers, and leaves nothing behind") {
  Cli rig;
  const std::string out = rig.scratch / "saxpy.rig";
  const Outcome o = rig({"pack", "-o", out, saxpy_c()});
  CHECK(o.code() == 0);
  CHECK(o.out == "");
  CHECK(o.err == "");
  auto p = Program::read(out);
  REQUIRE(p.ok());
  CHECK(arches(*p) == default_levels());
  CHECK(rig.leftovers() == 0);
  // The output directory holds the program and nothing else (the atomic write's file is gone).
  auto entries = rig.scratch.entries();
  std::sort(entries.begin(), entries.end());
  CHECK(entries == std::vector<std::string>{"saxpy.rig", "stderr", "stdout", "tmp"});
}

TEST_CASE("rig pack --levels builds just those, in that order") {
  Cli rig;
  const std::string out = rig.scratch / "p.rig";
  // The two lowest levels (or the one), highest first.
  const auto all = default_levels();
  const std::vector<std::string> levels(all.rend() - std::min<std::size_t>(all.size(), 2),
                                        all.rend());
  std::string list;
  for (const auto& l : levels) list += (list.empty() ? "" : ",") + l;
  const Outcome o = rig({"pack", "--levels=" + list, saxpy_c(), "-o", out});
  CHECK(o.code() == 0);
  auto p = Program::read(out);
  REQUIRE(p.ok());
  CHECK(arches(*p) == levels);
}

TEST_CASE("rig pack --list prints each target's format, arch and size") {
  Cli rig;
  const std::string tiny = rig::test::env_path("RIG_TEST_TINY_RIG");
  auto p = Program::read(tiny);
  REQUIRE(p.ok());
  char line[128];
  std::snprintf(line, sizeof line, "  host_elf   %-23s %zu bytes\n", baseline().c_str(),
                p->targets()[0].payload.size());
  const Outcome o = rig({"pack", "--list", tiny});
  CHECK(o.code() == 0);
  CHECK(o.out == tiny + ": rig.program version 1, 1 targets, " + std::to_string(p->bytes().size()) +
                     " bytes\n" + line);
  CHECK(o.err == "");

  auto damaged = rig::test::read_bytes(tiny);
  damaged[200] ^= std::byte{4};
  const std::string bad = rig.scratch / "bad.rig";
  rig::test::write_bytes(bad, damaged);
  const Outcome b = rig({"pack", "--list", bad});
  CHECK(b.code() == 1);
  CHECK(b.out == "");
  CHECK(b.err == "rig pack: " + bad + ": rig.program: checksum mismatch: the file is damaged\n");
}

TEST_CASE("a source that does not compile: exit 1, the compiler's errors shown, nothing written") {
  Cli rig;
  const std::string src =
      rig.write("broken.c",
                "#include \"rig/kernel.h\"\n"
                "RIG_ENTRY broken(const rig_launch* l) { l->no_such_field = 1; }\n");
  const std::string out = rig.scratch / "out.rig";
  rig::test::write_bytes(out, rig::test::bytes_of("the old file"));
  const Outcome o = rig({"pack", "-o", out, "--levels", baseline(), src});
  CHECK(o.code() == 1);
  CHECK(o.out == "");
  const std::string head =
      "rig pack: " + src + ": compiling for " + baseline() + " failed (cc exited with status 1):\n";
  CHECK(o.err.substr(0, head.size()) == head);
  CHECK(o.err.find("no_such_field") != std::string::npos);  // the compiler's own message
  CHECK(o.err.find("error") != std::string::npos);
  MESSAGE(o.err);
  // The old output is untouched and no temporary file is left anywhere.
  CHECK(rig::test::text_of(rig::test::read_bytes(out)) == "the old file");
  CHECK(rig.leftovers() == 0);
  CHECK(rig.scratch.entries().size() == 5);  // broken.c, out.rig, stdout, stderr, tmp
}

TEST_CASE("an undefined symbol is an error when packing, not when loading") {
  Cli rig;
  const std::string src =
      rig.write("undefined.c",
                "#include \"rig/kernel.h\"\n"
                "void not_defined_anywhere(void);\n"
                "RIG_ENTRY e(const rig_launch* l) { (void)l; not_defined_anywhere(); }\n");
  const Outcome o = rig({"pack", "-o", rig.scratch / "u.rig", "--levels", baseline(), src});
  CHECK(o.code() == 1);
  CHECK(o.err.find("not_defined_anywhere") != std::string::npos);
  CHECK(rig.leftovers() == 0);
}

TEST_CASE("a C++ source packs, and its entries run") {
  Cli rig;
  const std::string src =
      rig.write("scale.cpp",
                "#include <cstdint>\n"
                "#include \"rig/kernel.h\"\n"
                "template <typename T> static void scale(T* v, std::uint64_t n, T k) {\n"
                "  for (std::uint64_t i = 0; i < n; ++i) v[i] *= k;\n"
                "}\n"
                "RIG_ENTRY scale_u32(const rig_launch* l) {\n"
                "  scale(reinterpret_cast<std::uint32_t*>(l->args[0]), l->args[1],\n"
                "        static_cast<std::uint32_t>(l->args[2]));\n"
                "}\n");
  const std::string out = rig.scratch / "scale.rig";
  const Outcome o =
      rig({"pack", "-o", out, src, "--levels", baseline(), "--", "-std=c++20", "-Wall", "-Werror"});
  REQUIRE(o.code() == 0);
  CHECK(o.err == "");
  auto p = Program::read(out);
  REQUIRE(p.ok());
  auto image = load(host(), *p);
  REQUIRE(image.ok());
  std::vector<std::uint32_t> v = {1, 2, 3, 0x8000'0001u};
  Buffer b = Buffer::borrow(v.data(), v.size() * sizeof v[0]);
  submit(host(),
         Run{*image, "scale_u32", Shape{}, {Arg::inout(b), Arg::word(v.size()), Arg::word(6)}});
  b.access();
  CHECK(v == std::vector<std::uint32_t>{6, 12, 18, 0x8000'0001u * 6u});
}

TEST_CASE("compiler warnings are shown once, not once per level") {
  Cli rig;
  const std::string src =
      rig.write("warn.c",
                "#include \"rig/kernel.h\"\n"
                "RIG_ENTRY w(const rig_launch* l) { int unused_var; (void)l; }\n");
  const std::string levels = default_levels().size() > 1 ? "x86_64,x86_64-v2" : "aarch64";
  const Outcome o =
      rig({"pack", "-o", rig.scratch / "w.rig", src, "--levels", levels, "--", "-Wall"});
  CHECK(o.code() == 0);
  const std::string head =
      "rig pack: " + src + ": compiler output for " + default_levels()[0] + ":\n";
  CHECK(o.err.substr(0, head.size()) == head);
  CHECK(o.err.find("unused_var") != std::string::npos);
  CHECK(o.err.find("rig pack:", 1) == std::string::npos);
}

TEST_CASE("rig pack's usage errors exit 2 with the reason and the synopsis") {
  Cli rig;
  const std::string more = "`rig pack --help` says more.\n";
  auto usage = [&](std::vector<std::string> args, const std::string& why) {
    CAPTURE(why);
    const Outcome o = rig(std::move(args));
    CHECK(o.code() == 2);
    CHECK(o.out == "");
    CHECK(o.err == "rig pack: " + why + "\n" + synopsis + more);
  };
  usage({"pack"}, "no output: give -o OUT.rig");
  usage({"pack", "-o", "x.rig"}, "no source file");
  usage({"pack", "-o", "x.rig", "a.c", "b.c"}, "one source file at a time, not 2");
  usage({"pack", "-o", "x.rig", "k.f90"},
        "k.f90: not a source rig pack builds (C: .c; C++: .cc, .cpp, .cxx; CUDA: .cu)");
  usage({"pack", "-o", "x.rig", "noext"},
        "noext: not a source rig pack builds (C: .c; C++: .cc, .cpp, .cxx; CUDA: .cu)");
  usage({"pack", "-o", "x.rig", "k.cu", "--sm", "sm_90,compute_90"},
        "'compute_90' is not an SM architecture (such as sm_90)");
  usage({"pack", "-o", "x.rig", "k.cu", "--sm", "sm_90,sm_90"},
        "SM architecture sm_90 given twice");
  usage({"pack", "-o", "x.rig", "k.cu", "--levels", "x86_64"},
        "--levels and --cc are for host sources");
  usage({"pack", "-o", "x.rig", "a.c", "--sm", "sm_90"}, "--sm and --nvcc are for .cu sources");
  usage({"pack", "-o"}, "-o needs a value");
  usage({"pack", "--cc=", "-o", "x.rig", "a.c"}, "--cc needs a non-empty value");
  usage({"pack", "--frob", "-o", "x.rig", "a.c"}, "unknown option --frob");
  usage({"pack", "-o", "x.rig", "a.c", "--levels", "x86_64,pentium"},
        "unknown level 'pentium' (levels: x86_64, x86_64-v2, x86_64-v3, x86_64-v4, aarch64)");
  usage({"pack", "-o", "x.rig", "a.c", "--levels", "x86_64,x86_64"}, "level x86_64 given twice");
  usage({"pack", "--list", "a.rig", "-o", "x.rig"}, "--list takes only the file to list");
  CHECK(rig.leftovers() == 0);
}

TEST_CASE("rig pack builds a .cu into a cubin per SM architecture and PTX for the lowest") {
  const char* nvcc = std::getenv("RIG_TEST_NVCC");
  const char* cu = std::getenv("RIG_TEST_SAXPY_CU");
  REQUIRE(cu != nullptr);
  Cli rig;
  const std::string out = rig.scratch / "saxpy_cu.rig";
  Outcome o = rig({"pack", "-o", out, "--nvcc", "/nonexistent/nvcc", cu});
  CHECK(o.code() == 1);
  CHECK(o.err == std::string("rig pack: ") + cu +
                     ": cannot run '/nonexistent/nvcc': No such file or directory\n");
  if (nvcc == nullptr || *nvcc == '\0') {
    MESSAGE("the rest skipped: this build found no nvcc");
    return;
  }
  o = rig({"pack", "-o", out, "--nvcc", nvcc, "--sm", "sm_90,sm_80", cu});
  REQUIRE_MESSAGE(o.code() == 0, o.err);
  auto p = rig::Program::read(out);
  REQUIRE(p.ok());
  REQUIRE(p->targets().size() == 3);
  CHECK(p->targets()[0].format == rig::TargetFormat::cuda_cubin);
  CHECK(p->targets()[0].arch == "sm_90");
  CHECK(p->targets()[1].arch == "sm_80");
  CHECK(p->targets()[2].format == rig::TargetFormat::cuda_ptx);
  CHECK(p->targets()[2].arch == "sm_80");
  const auto& ptx = p->targets()[2].payload;
  const std::string text(reinterpret_cast<const char*>(ptx.data()), ptx.size());
  CHECK(text.find(".entry saxpy(") != std::string::npos);
  CHECK(rig.leftovers() == 0);
}

TEST_CASE("rig pack's runtime failures exit 1 and name the cause") {
  Cli rig;
  const std::string missing = rig.scratch / "missing.c";
  Outcome o = rig({"pack", "-o", rig.scratch / "x.rig", missing});
  CHECK(o.code() == 1);
  CHECK(o.err == "rig pack: " + missing + ": cannot read: No such file or directory\n");

  o = rig({"pack", "-o", rig.scratch / "x.rig", "--cc", "no-such-compiler-for-rig", saxpy_c()});
  CHECK(o.code() == 1);
  CHECK(o.err == "rig pack: " + saxpy_c() +
                     ": cannot run 'no-such-compiler-for-rig': No such file or directory\n");

  o = rig({"pack", "-o", rig.scratch / "x.rig", saxpy_c()}, {"RIG_INCLUDE=" + rig.scratch.path()});
  CHECK(o.code() == 1);
  CHECK(o.err == "rig pack: RIG_INCLUDE " + rig.scratch.path() + " has no rig/kernel.h\n");

  o = rig({"pack", "-o", rig.scratch / "x.rig", "--include", "/nonexistent", saxpy_c()});
  CHECK(o.code() == 1);
  CHECK(o.err == "rig pack: --include /nonexistent has no rig/kernel.h\n");

  o = rig({"pack", "-o", rig.scratch / "no-such-dir/x.rig", "--levels", baseline(), saxpy_c()});
  CHECK(o.code() == 1);
  CHECK(o.err == "rig pack: " + rig.scratch / "no-such-dir/x.rig" +
                     ": cannot make a temporary file in " + rig.scratch / "no-such-dir/" +
                     ": No such file or directory\n");

  o = rig({"pack", "--list", missing});
  CHECK(o.code() == 1);
  CHECK(o.err == "rig pack: " + missing + ": cannot open: No such file or directory\n");
  CHECK(rig.leftovers() == 0);
}

// Starts `rig pack` with a fake compiler that says it has started, then takes its time; returns
// once it has started.
pid_t start_slow_pack(Cli& rig) {
  const std::string marker = rig.scratch / "started";
  const std::string slow =
      rig.write("slow-cc", "#!/bin/sh\ntouch \"$RIG_TEST_MARKER\"\nexec sleep 60\n");
  std::filesystem::permissions(slow, std::filesystem::perms::owner_all);
  const pid_t pid =
      rig::test::start({rig_exe(), "pack", "-o", rig.scratch / "x.rig", "--cc", slow, saxpy_c()},
                       {"TMPDIR=" + rig.tmpdir, "RIG_TEST_MARKER=" + marker}, rig.scratch);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(marker) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(std::filesystem::exists(marker));
  CHECK(rig.leftovers() == 1);  // rig's temporary directory, while it compiles
  return pid;
}

TEST_CASE("Ctrl-C while compiling stops the compilers, cleans up, and ends rig by the signal") {
  Cli rig;
  const pid_t pid = start_slow_pack(rig);
  const auto sent = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  const Outcome o = rig::test::finish(pid, rig.scratch);
  // Well before the fake compiler's 60 s: rig stopped it rather than waiting.
  CHECK(std::chrono::steady_clock::now() - sent < std::chrono::seconds(30));
  CHECK(o.signal() == SIGINT);
  CHECK(o.err == "rig pack: " + saxpy_c() + ": interrupted by signal 2\n");
  CHECK(rig.leftovers() == 0);
  CHECK(!std::filesystem::exists(rig.scratch / "x.rig"));
}

TEST_CASE("a signal the user ignores (nohup's SIGHUP) does not stop rig pack") {
  Cli rig;
  // rig inherits the ignored SIGHUP, as under nohup.
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGHUP, &ignore, &before);
  const pid_t pid = start_slow_pack(rig);
  sigaction(SIGHUP, &before, nullptr);
  // Had rig held SIGHUP, it would end by it: SIGHUP is sent first, and of two pending signals
  // sigwaitinfo takes the lower number, SIGHUP's, too.
  ::kill(pid, SIGHUP);
  ::kill(pid, SIGTERM);
  const Outcome o = rig::test::finish(pid, rig.scratch);
  CHECK(o.signal() == SIGTERM);
  CHECK(o.err == "rig pack: " + saxpy_c() + ": interrupted by signal 15\n");
  CHECK(rig.leftovers() == 0);
}

TEST_CASE("the rig command: usage, help and unknown commands") {
  Cli rig;
  const std::string usage =
      "usage: rig COMMAND [ARGS...]\n"
      "       rig help [COMMAND]\n"
      "\n"
      "commands:\n"
      "  check      start a job on agents, make round trips to each, print what answered\n"
      "  keygen     write a new random job key to a file (mode 0600)\n"
      "  pack       build a rig.program from a C or C++ source, or list one's targets\n"
      "  run        start local agents and a controller program; report the job's outcome\n"
      "  status     read each rigd's /status (--metrics) and print a line per agent\n"
      "\n"
      "`rig COMMAND --help` describes one command.\n";
  Outcome o = rig({});
  CHECK(o.code() == 2);
  CHECK(o.out == "");
  CHECK(o.err == usage);

  o = rig({"frob"});
  CHECK(o.code() == 2);
  CHECK(o.err == "rig: no command 'frob'\n" + usage);

  for (const char* help : {"--help", "-h", "help"}) {
    o = rig({help});
    CHECK(o.code() == 0);
    CHECK(o.out == usage);
    CHECK(o.err == "");
  }

  o = rig({"help", "pack"});
  CHECK(o.code() == 0);
  CHECK(o.out.substr(0, synopsis.size()) == synopsis);
  CHECK(o.out.find("--levels LIST") != std::string::npos);
  const Outcome direct = rig({"pack", "--help"});
  CHECK(direct.code() == 0);
  CHECK(direct.out == o.out);

  o = rig({"help", "frob"});
  CHECK(o.code() == 2);
  CHECK(o.err == "rig: no command 'frob'\n" + usage);
}

}  // namespace
