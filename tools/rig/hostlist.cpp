#include "hostlist.hpp"

#include <cstdint>
#include <optional>

#include "remote/wire/printable.hpp"

namespace rig::cli {

namespace {

// A range's bounds have at most this many digits, so that every value fits in 64 bits.
constexpr std::size_t number_digits_max = 18;

// One piece of a name: the texts it may stand for (a literal has one).
using Piece = std::vector<std::string>;

// Collects the first error with its place; the parse stops there.
struct Parse {
  std::string_view list;
  std::optional<Error> error;

  void fail(const std::string& why, std::size_t offset) {
    if (error) return;
    error = Error("hostlist '" + remote::printable_once(list) + "': " + why + " at offset " +
                  std::to_string(offset));
  }
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// A name's character: printable ASCII, no space, none of the list's own punctuation.
bool is_name_char(char c) {
  return c > ' ' && c < 0x7f && c != '[' && c != ']' && c != ',';
}

// The number `digits` holds (at most number_digits_max digits, all of them digits).
std::uint64_t value_of(std::string_view digits) {
  std::uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  return v;
}

// `v` in at least `width` digits, zeros in front.
std::string padded(std::uint64_t v, std::size_t width) {
  std::string text = std::to_string(v);
  if (text.size() < width) text.insert(0, width - text.size(), '0');
  return text;
}

// The numbers of the group `body` (the text between a name's brackets, starting at `offset` in
// the list), adding to `count` as it goes; nothing once p has failed.
Piece expand_group(std::string_view body, std::size_t offset, std::size_t& count, Parse& p) {
  Piece out;
  if (body.empty()) {
    p.fail("empty brackets", offset - 1);
    return out;
  }
  std::size_t at = 0;
  while (at <= body.size()) {
    const std::size_t comma = std::min(body.find(',', at), body.size());
    const std::string_view range = body.substr(at, comma - at);
    const std::size_t dash = range.find('-');
    const std::string_view low = range.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? range : range.substr(dash + 1);
    for (std::string_view bound : {low, high}) {
      const std::size_t where = offset + static_cast<std::size_t>(bound.data() - body.data());
      if (bound.empty()) {
        p.fail(range.empty() ? "an empty range" : "a range without a bound", where);
        return out;
      }
      for (std::size_t i = 0; i < bound.size(); ++i) {
        if (!is_digit(bound[i])) {
          p.fail("'" + remote::printable_once(bound.substr(i, 1)) + "' in a range, not a digit",
                 where + i);
          return out;
        }
      }
      if (bound.size() > number_digits_max) {
        p.fail("a number of more than " + std::to_string(number_digits_max) + " digits", where);
        return out;
      }
    }
    const std::uint64_t lo = value_of(low), hi = value_of(high);
    if (lo > hi) {
      p.fail("the range " + std::string(range) + " runs backwards", offset + at);
      return out;
    }
    if (hi - lo >= hostlist_names_max - count) {
      p.fail("more than " + std::to_string(hostlist_names_max) + " names", offset + at);
      return out;
    }
    count += static_cast<std::size_t>(hi - lo + 1);
    for (std::uint64_t v = lo; v <= hi; ++v) out.push_back(padded(v, low.size()));
    at = comma + 1;
  }
  return out;
}

// The names of one name of the list (`text`, at `offset`), appended to `names`.
void expand_name(std::string_view text, std::size_t offset, std::vector<std::string>& names,
                 Parse& p) {
  if (text.empty()) {
    p.fail("an empty name", offset);
    return;
  }
  std::vector<Piece> pieces;
  std::size_t at = 0;
  while (at < text.size() && !p.error) {
    if (text[at] == '[') {
      const std::size_t close = text.find(']', at);
      // Brackets were matched when the list was split; a ']' is always found.
      const std::string_view body = text.substr(at + 1, close - at - 1);
      std::size_t count = 0;
      Piece numbers = expand_group(body, offset + at + 1, count, p);
      if (p.error) return;
      pieces.push_back(std::move(numbers));
      at = close + 1;
      continue;
    }
    const std::size_t start = at;
    while (at < text.size() && text[at] != '[') {
      if (!is_name_char(text[at])) {
        p.fail("'" + remote::printable(text.substr(at, 1)) + "' in a name", offset + at);
        return;
      }
      ++at;
    }
    pieces.push_back({std::string(text.substr(start, at - start))});
  }
  // Every combination, the first piece varying slowest; its size is checked before it is made.
  std::size_t total = 1;
  for (const Piece& piece : pieces) {
    if (piece.size() > (hostlist_names_max - names.size()) / total) {
      p.fail("more than " + std::to_string(hostlist_names_max) + " names", offset);
      return;
    }
    total *= piece.size();
  }
  std::vector<std::string> made = {""};
  for (const Piece& piece : pieces) {
    std::vector<std::string> next;
    next.reserve(made.size() * piece.size());
    for (const std::string& head : made) {
      for (const std::string& tail : piece) next.push_back(head + tail);
    }
    made = std::move(next);
  }
  names.insert(names.end(), made.begin(), made.end());
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view list) {
  Parse p{list, std::nullopt};
  if (list.size() > hostlist_bytes_max) {
    return Error("hostlist of " + std::to_string(list.size()) + " bytes: more than " +
                 std::to_string(hostlist_bytes_max));
  }
  if (list.empty()) return Error("hostlist '': no names");
  std::vector<std::string> names;
  std::size_t start = 0;
  std::size_t open = std::string_view::npos;  // where the bracket open now is, if one is
  for (std::size_t i = 0; i <= list.size() && !p.error; ++i) {
    if (i == list.size() && open != std::string_view::npos) {
      p.fail("'[' not closed", open);
      break;
    }
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (open != std::string_view::npos) p.fail("'[' inside brackets", i);
      open = i;
    } else if (c == ']') {
      if (open == std::string_view::npos) p.fail("']' without '['", i);
      open = std::string_view::npos;
    } else if (c == ',' && open == std::string_view::npos) {
      expand_name(list.substr(start, i - start), start, names, p);
      start = i + 1;
    }
  }
  if (p.error) return *p.error;
  return names;
}

}  // namespace rig::cli
