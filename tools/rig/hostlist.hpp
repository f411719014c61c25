// Slurm's hostlist syntax (SLURM_JOB_NODELIST, `scontrol show hostnames`): "gpu[01-03,07],login"
// is gpu01, gpu02, gpu03, gpu07 and login. A pure function of its text; no state.
//
// A list is names separated by commas outside brackets. A name is text with bracketed groups,
// each a comma-separated set of numbers and ranges (LOW-HIGH); a name with several groups stands
// for every combination, the first group varying slowest ("r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2).
// A number keeps the width of the text its range starts with: [08-10] is 08 09 10, [8-10] is
// 8 9 10.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "rig/result.hpp"

namespace rig::cli {

// The most names one list may stand for: a cluster's allocation is far smaller, and a typo such as
// "n[0-99999999]" must be refused, not expanded until memory runs out.
inline constexpr std::size_t hostlist_names_max = 65'536;
// The most text one list may have.
inline constexpr std::size_t hostlist_bytes_max = 64 * 1024;

// The names `list` stands for, in its order (a name given twice is kept twice). Error: "hostlist
// 'TEXT': WHY at offset N" for a list that is empty, has an empty name, an unclosed, stray or
// nested bracket, an empty or non-numeric range, a range that runs backwards, or stands for more
// than hostlist_names_max names; TEXT is escaped where it is not printable.
Result<std::vector<std::string>> expand_hostlist(std::string_view list);

}  // namespace rig::cli
