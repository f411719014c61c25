// A palette image that can be drawn on, and a PNG encoder for it that needs no zlib.
//
// The encoder writes one deflate block with the fixed Huffman codes of RFC 1951 and only
// distance-1 matches (runs of one palette index), which is all a plot needs to shrink from
// megabytes to tens of kilobytes: it is mostly runs of background.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rig::bench {

struct Rgb {
  std::uint8_t r, g, b;
};

// The report's colours, as palette indices.
enum Colour : std::uint8_t {
  white,
  black,
  grey,
  light_grey,
  blue,
  orange,
  green,
  red,
  purple,
  brown,
  teal,
  colour_count
};

// Owner: whoever made it. One thread at a time.
class Canvas {
 public:
  Canvas(int width, int height, Colour background = white);

  int width() const { return w_; }
  int height() const { return h_; }
  Colour at(int x, int y) const { return static_cast<Colour>(px_[idx(x, y)]); }

  // Every drawing call clips to the canvas.
  void set(int x, int y, Colour c);
  void fill(int x0, int y0, int x1, int y1, Colour c);  // inclusive corners
  // A line `thick` pixels wide; dash_px > 0 leaves gaps of that length between dashes of it.
  void line(double x0, double y0, double x1, double y1, Colour c, int thick = 1, int dash_px = 0);
  // Text in the built-in 5x7 font (descenders below), each font pixel drawn as scale x scale. (x,
  // y) is the top left; vertical text reads bottom to top with (x, y) its bottom left.
  void text(int x, int y, std::string_view s, int scale, Colour c);
  void text_up(int x, int y, std::string_view s, int scale, Colour c);
  static int text_width(std::string_view s, int scale);
  static int text_height(int scale);

  const std::vector<std::uint8_t>& pixels() const { return px_; }

 private:
  std::size_t idx(int x, int y) const {
    return static_cast<std::size_t>(y) * static_cast<std::size_t>(w_) + static_cast<std::size_t>(x);
  }
  int w_, h_;
  std::vector<std::uint8_t> px_;
};

const std::array<Rgb, colour_count>& palette();

// The PNG file for `c`: signature, IHDR, PLTE, IDAT, IEND.
std::vector<std::uint8_t> encode_png(const Canvas& c);

// Checksums PNG and zlib need (also used by the smoke test to check a file).
std::uint32_t crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);
std::uint32_t adler32(std::span<const std::uint8_t> bytes);

// The glyph of an ASCII character: 5 pixels wide, 7 above the baseline and 2 below it for
// descenders; one byte per row, bit 4 the leftmost pixel. Unknown characters get a box.
inline constexpr int glyph_rows = 9;
const std::array<std::uint8_t, glyph_rows>& glyph(char ch);

}  // namespace rig::bench
