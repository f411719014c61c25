// rig pack: compiles a C or C++ source once per host instruction-set level into shared objects, or
// a CUDA source into a cubin per SM architecture and PTX, and writes them as one rig.program; or
// lists the targets of one. docs/program.md and docs/cuda.md say how it works.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "files.hpp"
#include "process.hpp"
#include "program/file.hpp"
#include "program/format.hpp"
#include "rig/kernel.h"
#include "rig/program.hpp"
#include "rig_paths.hpp"

namespace rig::cli {
namespace {

constexpr const char* pack_synopsis =
    "usage: rig pack -o OUT.rig SOURCE [--levels LEVEL,...] [--cc COMPILER] [--include DIR]\n"
    "                [-- COMPILER_FLAGS...]\n"
    "       rig pack -o OUT.rig SOURCE.cu [--sm SM,...] [--nvcc NVCC] [-- NVCC_FLAGS...]\n"
    "       rig pack --list FILE.rig\n";

constexpr const char* pack_help =
    "\n"
    "Compiles SOURCE (.c, or .cc .cpp .cxx for C++) once per host instruction-set level into a\n"
    "shared object and writes them all to OUT.rig, replacing it whole.\n"
    "\n"
    "  -o OUT.rig        the program to write\n"
    "  --levels LIST     comma-separated levels to build (default: every level of this machine's\n"
    "                    architecture: x86_64,x86_64-v2,x86_64-v3,x86_64-v4 or aarch64)\n"
    "  --cc COMPILER     the compiler to run (default: cc for C, c++ for C++), a program name\n"
    "  --include DIR     where rig/kernel.h is (default: $RIG_INCLUDE, else rig's own headers)\n"
    "  --sm LIST         for a .cu source: the SM architectures to build cubins for (default:\n"
    "                    sm_80,sm_90); PTX is added for the lowest, for newer GPUs to JIT\n"
    "  --nvcc NVCC       for a .cu source: the CUDA compiler (default: nvcc in PATH, else\n"
    "                    /usr/local/cuda/bin/nvcc)\n"
    "  -- FLAGS...       more flags for every compile, after rig's own (-O2 and the like)\n"
    "  --list FILE.rig   print FILE.rig's targets: format, arch and size in bytes\n";

// A compiler's output shown with an error: enough for any real diagnostic, bounded so that a
// runaway template error cannot flood the terminal.
constexpr std::size_t compiler_output_shown_bytes_max = 64 * 1024;

// A shared object from a compiler; bounded like the program that will hold it.
constexpr std::uint64_t object_bytes_max = program::file_bytes_max;

// A host instruction-set level and the flag that makes a compiler target it. The names are the
// ones the runtime gives the host device's arch (core/arch.cpp).
struct Level {
  std::string_view name;
  std::string_view march;
};

constexpr Level levels_known[] = {
    {"x86_64", "-march=x86-64"},       {"x86_64-v2", "-march=x86-64-v2"},
    {"x86_64-v3", "-march=x86-64-v3"}, {"x86_64-v4", "-march=x86-64-v4"},
    {"aarch64", "-march=armv8-a"},
};

// Every level of the architecture this rig was built for, lowest first.
std::vector<std::string_view> default_levels() {
#if defined(__x86_64__)
  return {"x86_64", "x86_64-v2", "x86_64-v3", "x86_64-v4"};
#elif defined(__aarch64__)
  return {"aarch64"};
#else
#error "rig supports x86-64 and 64-bit Arm hosts"
#endif
}

const Level* find_level(std::string_view name) {
  for (const Level& l : levels_known) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

std::string known_level_names() {
  std::string s;
  for (const Level& l : levels_known) s += (s.empty() ? "" : ", ") + std::string(l.name);
  return s;
}

enum class Language { c, cxx, cuda };

// SM architectures a .cu source is built for when --sm is not given: Ampere and Hopper as cubins,
// and PTX for the lower one, which the driver compiles for anything newer.
constexpr const char* sm_default = "sm_80,sm_90";
// Where the CUDA toolkit puts nvcc when it is not in PATH.
constexpr const char* nvcc_fallback = "/usr/local/cuda/bin/nvcc";

// The source's language from its extension, and the extension itself.
std::optional<Language> language_of(std::string_view path, std::string_view* ext) {
  const std::size_t dot = path.rfind('.');
  const std::size_t slash = path.rfind('/');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return std::nullopt;
  }
  *ext = path.substr(dot);
  if (*ext == ".c") return Language::c;
  if (*ext == ".cc" || *ext == ".cpp" || *ext == ".cxx") return Language::cxx;
  if (*ext == ".cu") return Language::cuda;
  return std::nullopt;
}

struct Options {
  bool help = false;
  std::string list;  // --list FILE
  std::string out;
  std::string source;
  std::vector<std::string_view> levels;
  std::string cc;
  std::string include;
  std::vector<std::string> extra;
  std::vector<std::string> sms;  // for .cu sources
  std::string nvcc;
};

// The SM number of "sm_90": 90; 0 for a name that is not one.
int sm_number(std::string_view name) {
  if (!name.starts_with("sm_") || name.size() < 5 || name.size() > 7) return 0;
  int n = 0;
  for (char c : name.substr(3)) {
    if (c < '0' || c > '9') return 0;
    n = n * 10 + (c - '0');
  }
  return n;
}

// Parses the command line; Error is a usage message without the "rig pack: " prefix.
Result<Options> parse_args(std::span<char*> args) {
  Options o;
  std::string levels_text;
  bool levels_given = false;
  std::string sm_text;
  std::vector<std::string> sources;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--") {
      for (++i; i < args.size(); ++i) o.extra.emplace_back(args[i]);
      break;
    }
    if (a == "--help" || a == "-h") {
      o.help = true;
      return o;
    }
    // Options with a value: "-o X", "--cc X" or "--cc=X".
    std::string_view key = a;
    std::optional<std::string> value;
    if (a.starts_with("--") && a.find('=') != std::string_view::npos) {
      key = a.substr(0, a.find('='));
      value = std::string(a.substr(a.find('=') + 1));
    }
    std::string* slot = nullptr;
    if (key == "-o") slot = &o.out;
    if (key == "--cc") slot = &o.cc;
    if (key == "--include") slot = &o.include;
    if (key == "--list") slot = &o.list;
    if (key == "--sm") slot = &sm_text;
    if (key == "--nvcc") slot = &o.nvcc;
    if (key == "--levels") {
      slot = &levels_text;
      levels_given = true;
    }
    if (slot != nullptr) {
      if (!value) {
        if (i + 1 >= args.size()) return Error(std::string(key) + " needs a value");
        value = args[++i];
      }
      if (value->empty()) return Error(std::string(key) + " needs a non-empty value");
      *slot = *value;
      continue;
    }
    if (a.starts_with("-") && a != "-") return Error("unknown option " + std::string(a));
    sources.emplace_back(a);
  }

  if (!o.list.empty()) {
    if (!o.out.empty() || !sources.empty() || levels_given || !o.cc.empty() || !o.include.empty() ||
        !o.extra.empty() || !sm_text.empty() || !o.nvcc.empty()) {
      return Error("--list takes only the file to list");
    }
    return o;
  }
  if (o.out.empty()) return Error("no output: give -o OUT.rig");
  if (sources.empty()) return Error("no source file");
  if (sources.size() > 1)
    return Error("one source file at a time, not " + std::to_string(sources.size()));
  o.source = sources.front();
  std::string_view ext;
  const auto lang = language_of(o.source, &ext);
  if (!lang) {
    return Error(o.source +
                 ": not a source rig pack builds (C: .c; C++: .cc, .cpp, .cxx; CUDA: .cu)");
  }
  if (*lang == Language::cuda) {
    if (levels_given || !o.cc.empty()) return Error("--levels and --cc are for host sources");
    std::string_view rest = sm_text.empty() ? std::string_view(sm_default) : sm_text;
    while (true) {
      const std::size_t comma = rest.find(',');
      const std::string name(rest.substr(0, comma));
      if (sm_number(name) == 0) {
        return Error("'" + name + "' is not an SM architecture (such as sm_90)");
      }
      if (std::find(o.sms.begin(), o.sms.end(), name) != o.sms.end()) {
        return Error("SM architecture " + name + " given twice");
      }
      o.sms.push_back(name);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    return o;
  }
  if (!sm_text.empty() || !o.nvcc.empty()) return Error("--sm and --nvcc are for .cu sources");
  if (!levels_given) {
    o.levels = default_levels();
    return o;
  }
  // The views kept are into levels_known, which lives as long as the program.
  std::string_view rest = levels_text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    const Level* l = find_level(name);
    if (l == nullptr) {
      return Error("unknown level '" + std::string(name) + "' (levels: " + known_level_names() +
                   ")");
    }
    if (std::find(o.levels.begin(), o.levels.end(), l->name) != o.levels.end()) {
      return Error("level " + std::string(name) + " given twice");
    }
    o.levels.push_back(l->name);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return o;
}

bool has_kernel_header(const std::string& dir) {
  struct stat st;
  return ::stat((dir + "/rig/kernel.h").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string executable_dir() {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= buf.size()) return {};
  buf.resize(static_cast<std::size_t>(n));
  const std::size_t slash = buf.rfind('/');
  return slash == std::string::npos ? std::string() : buf.substr(0, slash);
}

// Where rig/kernel.h is: what the user named (flag, then RIG_INCLUDE), used as given or refused,
// never silently replaced; else this rig's own headers: the source tree's for a rig run from its
// build directory, the installed ones (beside the executable, or where it was configured to go)
// otherwise.
Result<std::string> find_include(const Options& o) {
  auto named = [](const std::string& dir, const char* how) -> Result<std::string> {
    if (has_kernel_header(dir)) return dir;
    return Error(std::string(how) + " " + dir + " has no rig/kernel.h");
  };
  if (!o.include.empty()) return named(o.include, "--include");
  if (const char* env = std::getenv("RIG_INCLUDE"); env != nullptr && *env != '\0') {
    return named(env, "RIG_INCLUDE");
  }
  const std::string exe_dir = executable_dir();
  std::vector<std::string> candidates;
  char* real_exe = exe_dir.empty() ? nullptr : ::realpath(exe_dir.c_str(), nullptr);
  char* real_build = ::realpath(paths::build_tools_dir, nullptr);
  const bool in_build_tree =
      real_exe != nullptr && real_build != nullptr && std::strcmp(real_exe, real_build) == 0;
  std::free(real_exe);
  std::free(real_build);
  if (in_build_tree) candidates.emplace_back(paths::source_include_dir);
  if (!exe_dir.empty()) candidates.push_back(exe_dir + "/../include");
  candidates.emplace_back(paths::install_include_dir);
  for (const std::string& dir : candidates) {
    if (has_kernel_header(dir)) return dir;
  }
  std::string tried;
  for (const std::string& dir : candidates) tried += (tried.empty() ? "" : ", ") + dir;
  return Error("cannot find rig/kernel.h (looked in " + tried +
               "); set RIG_INCLUDE or pass --include DIR");
}

// The one definition every packed object gets: the kernel ABI symbol, from the header the source
// sees, checked against the ABI this rig loads. Valid C and C++, so that it compiles in the
// source's own language with the user's flags.
std::string abi_source() {
  const std::string abi = std::to_string(RIG_KERNEL_ABI);
  return "/* Written by rig pack: the kernel ABI this object was built for. */\n"
         "#include \"rig/kernel.h\"\n"
         "#if RIG_KERNEL_ABI != " +
         abi +
         "\n"
         "#error \"rig/kernel.h in the include path is for another kernel ABI than this rig pack "
         "(" +
         abi +
         ")\"\n"
         "#endif\n"
         "RIG_DEFINE_KERNEL_ABI;\n";
}

// One target to build: the compiler run that makes it and where its object lands.
struct BuildStep {
  TargetFormat format;
  std::string arch;
  Job job;
  std::string object;
};

// The compiler runs for host code: one shared object per level. The CUDA backend adds its own
// steps (cubin per SM architecture, PTX) for .cu sources beside these.
std::vector<BuildStep> plan_host(const Options& o, Language lang, const std::string& include,
                                 const std::string& abi_file, const TempDir& tmp) {
  const std::string cc = !o.cc.empty() ? o.cc : lang == Language::c ? "cc" : "c++";
  std::vector<BuildStep> steps;
  for (std::string_view level_name : o.levels) {
    const Level& level = *find_level(level_name);
    BuildStep s{TargetFormat::host_elf, std::string(level.name), {}, {}};
    s.object = tmp.path() + "/" + s.arch + ".so";
    s.job.log_path = tmp.path() + "/" + s.arch + ".log";
    s.job.argv = {cc, "-O2", "-shared", "-fPIC",
                  // Entries are exported by RIG_ENTRY; everything else stays inside the object.
                  "-fvisibility=hidden",
                  // Every level computes the same floating-point results: no level may fuse a
                  // multiply and an add that the others round twice.
                  "-ffp-contract=off",
                  // An undefined symbol is an error now, not when the program is loaded.
                  "-Wl,-z,defs", std::string(level.march), "-I", include};
    s.job.argv.insert(s.job.argv.end(), o.extra.begin(), o.extra.end());
    s.job.argv.insert(s.job.argv.end(), {"-o", s.object, o.source, abi_file});
    steps.push_back(std::move(s));
  }
  return steps;
}

// nvcc: the one named, else the first in PATH, else the toolkit's usual place. Error when there is
// none: CUDA targets cannot be built here, while host sources still can.
Result<std::string> find_nvcc(const Options& o) {
  if (!o.nvcc.empty()) return o.nvcc;
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (true) {
      const std::size_t colon = rest.find(':');
      std::string dir(rest.substr(0, colon));
      if (dir.empty()) dir = ".";
      const std::string candidate = dir + "/nvcc";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      if (colon == std::string_view::npos) break;
      rest = rest.substr(colon + 1);
    }
  }
  if (::access(nvcc_fallback, X_OK) == 0) return std::string(nvcc_fallback);
  return Error(std::string("CUDA targets need nvcc, which is not in PATH nor at ") + nvcc_fallback +
               " (install the CUDA toolkit, or pass --nvcc)");
}

// The compiler runs for a .cu source: a cubin per SM architecture, and PTX for the lowest one.
// Kernels keep their names only if declared extern "C"; rig looks them up by the plain name.
std::vector<BuildStep> plan_cuda(const Options& o, const std::string& nvcc,
                                 const std::string& include, const TempDir& tmp) {
  std::vector<BuildStep> steps;
  auto step = [&](TargetFormat format, const std::string& arch, const std::string& what,
                  const std::string& arch_flag, const std::string& ext) {
    BuildStep s{format, arch, {}, {}};
    s.object = tmp.path() + "/" + arch + ext;
    s.job.log_path = tmp.path() + "/" + arch + ext + ".log";
    s.job.argv = {nvcc, what, "-O3", arch_flag, "-I", include};
    s.job.argv.insert(s.job.argv.end(), o.extra.begin(), o.extra.end());
    s.job.argv.insert(s.job.argv.end(), {"-o", s.object, o.source});
    steps.push_back(std::move(s));
  };
  std::string lowest = o.sms.front();
  for (const std::string& sm : o.sms) {
    step(TargetFormat::cuda_cubin, sm, "-cubin", "-arch=" + sm, ".cubin");
    if (sm_number(sm) < sm_number(lowest)) lowest = sm;
  }
  step(TargetFormat::cuda_ptx, lowest, "-ptx", "-arch=compute_" + lowest.substr(3), ".ptx");
  return steps;
}

// The compiler's output from `log`, bounded.
std::string compiler_output(const std::string& log) {
  auto bytes = program::read_file(log, object_bytes_max);
  if (!bytes) return "(its output could not be read: " + bytes.error() + ")\n";
  std::string text(reinterpret_cast<const char*>(bytes->data()),
                   std::min(bytes->size(), compiler_output_shown_bytes_max));
  if (bytes->size() > compiler_output_shown_bytes_max) {
    text += "\n[... " + std::to_string(bytes->size() - compiler_output_shown_bytes_max) +
            " more bytes of compiler output]";
  }
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

int list(const std::string& path) {
  auto program = Program::read(path);
  if (!program) {
    std::fprintf(stderr, "rig pack: %s\n", program.error().c_str());
    return exit_failure;
  }
  std::printf("%s: rig.program version %u, %zu targets, %zu bytes\n", path.c_str(),
              program::format_version, program->targets().size(), program->bytes().size());
  for (const Target& t : program->targets()) {
    const std::string_view f = format_name(t.format);
    std::printf("  %-10.*s %-23s %zu bytes\n", static_cast<int>(f.size()), f.data(), t.arch.c_str(),
                t.payload.size());
  }
  return exit_ok;
}

int pack(const Options& o, Interrupts& interrupts) {
  const std::string& src = o.source;
  std::string_view ext;
  const Language lang = *language_of(src, &ext);
  if (::access(src.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "rig pack: %s: cannot read: %s\n", src.c_str(), std::strerror(errno));
    return exit_failure;
  }
  auto include = find_include(o);
  if (!include) {
    std::fprintf(stderr, "rig pack: %s\n", include.error().c_str());
    return exit_failure;
  }
  auto tmp = TempDir::make("rig-pack");
  if (!tmp) {
    std::fprintf(stderr, "rig pack: %s\n", tmp.error().c_str());
    return exit_failure;
  }
  std::vector<BuildStep> steps;
  if (lang == Language::cuda) {
    auto nvcc = find_nvcc(o);
    if (!nvcc) {
      std::fprintf(stderr, "rig pack: %s: %s\n", src.c_str(), nvcc.error().c_str());
      return exit_failure;
    }
    steps = plan_cuda(o, *nvcc, *include, *tmp);
  } else {
    // Named like the source so that the compiler treats it in the same language.
    const std::string abi_file = tmp->path() + "/rig_kernel_abi" + std::string(ext);
    const std::string abi = abi_source();
    if (auto w = write_file_atomically(
            abi_file, std::as_bytes(std::span<const char>(abi.data(), abi.size())));
        !w) {
      std::fprintf(stderr, "rig pack: %s\n", w.error().c_str());
      return exit_failure;
    }
    steps = plan_host(o, lang, *include, abi_file, *tmp);
  }
  std::vector<Job> jobs;
  for (const BuildStep& s : steps) jobs.push_back(s.job);
  const std::size_t parallel = std::max(1u, std::thread::hardware_concurrency());
  const std::vector<JobEnd> ends = run_jobs(jobs, parallel, interrupts);
  if (interrupts.taken() != 0) {
    std::fprintf(stderr, "rig pack: %s: interrupted by signal %d\n", src.c_str(),
                 interrupts.taken());
    return exit_failure;
  }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (ends[i].succeeded()) continue;
    if (!ends[i].started && ends[i].start_error.empty()) continue;  // not run after a failure
    if (!ends[i].started) {
      std::fprintf(stderr, "rig pack: %s: %s\n", src.c_str(), ends[i].start_error.c_str());
      return exit_failure;
    }
    std::fprintf(stderr, "rig pack: %s: compiling for %s failed (%s %s):\n%s", src.c_str(),
                 steps[i].arch.c_str(), steps[i].job.argv[0].c_str(), ends[i].describe().c_str(),
                 compiler_output(steps[i].job.log_path).c_str());
    return exit_failure;
  }

  // Warnings are worth seeing once, not once per level.
  std::vector<std::string> shown;
  for (const BuildStep& s : steps) {
    std::string text = compiler_output(s.job.log_path);
    if (text.empty() || std::find(shown.begin(), shown.end(), text) != shown.end()) continue;
    std::fprintf(stderr, "rig pack: %s: compiler output for %s:\n%s", src.c_str(), s.arch.c_str(),
                 text.c_str());
    shown.push_back(std::move(text));
  }

  std::vector<TargetSpec> targets;
  for (const BuildStep& s : steps) {
    auto object = program::read_file(s.object, object_bytes_max);
    if (!object) {
      std::fprintf(stderr, "rig pack: %s: %s\n", src.c_str(), object.error().c_str());
      return exit_failure;
    }
    targets.push_back(TargetSpec{s.format, s.arch, std::move(*object)});
  }
  std::vector<std::byte> file;
  try {
    file = write_program(targets);
  } catch (const std::invalid_argument& e) {
    // Only an empty or oversized object gets here: the levels were checked before.
    std::fprintf(stderr, "rig pack: %s: %s\n", src.c_str(), e.what());
    return exit_failure;
  }
  if (auto w = write_file_atomically(o.out, file); !w) {
    std::fprintf(stderr, "rig pack: %s\n", w.error().c_str());
    return exit_failure;
  }
  return exit_ok;
}

}  // namespace
}  // namespace rig::cli

int cmd_pack(std::span<char*> args) {
  using namespace rig::cli;
  auto options = parse_args(args);
  if (!options) {
    std::fprintf(stderr, "rig pack: %s\n%s`rig pack --help` says more.\n", options.error().c_str(),
                 pack_synopsis);
    return exit_usage;
  }
  if (options->help) {
    std::fputs(pack_synopsis, stdout);
    std::fputs(pack_help, stdout);
    return exit_ok;
  }
  if (!options->list.empty()) return list(options->list);
  // Declared before anything pack makes, so that on a signal every clean-up runs first.
  Interrupts interrupts;
  return pack(*options, interrupts);
}
