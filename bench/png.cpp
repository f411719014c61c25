#include "png.hpp"

#include <algorithm>
#include <cmath>

namespace rig::bench {

namespace {

// Font metrics in font pixels: a glyph is 5 wide and each character advances 6 (one blank column).
constexpr int glyph_w = 5;
constexpr int glyph_h = glyph_rows;
constexpr int advance = 6;

// Deflate allows matches of 3 to 258 bytes.
constexpr std::size_t match_min = 3;
constexpr std::size_t match_max = 258;

// LSB-first bit writer for deflate.
class Bits {
 public:
  void put(std::uint32_t value, int count) {
    for (int i = 0; i < count; ++i) {
      acc_ |= ((value >> i) & 1u) << n_;
      if (++n_ == 8) flush_byte();
    }
  }
  // Huffman codes go most significant bit first.
  void put_code(std::uint32_t code, int length) {
    for (int i = length - 1; i >= 0; --i) put((code >> i) & 1u, 1);
  }
  std::vector<std::uint8_t> finish() {
    if (n_ > 0) flush_byte();
    return std::move(out_);
  }

 private:
  void flush_byte() {
    out_.push_back(static_cast<std::uint8_t>(acc_));
    acc_ = 0;
    n_ = 0;
  }
  std::vector<std::uint8_t> out_;
  std::uint32_t acc_ = 0;
  int n_ = 0;
};

// The fixed literal/length code of RFC 1951 section 3.2.6.
void put_symbol(Bits& b, unsigned sym) {
  if (sym <= 143) {
    b.put_code(0x30 + sym, 8);
  } else if (sym <= 255) {
    b.put_code(0x190 + (sym - 144), 9);
  } else if (sym <= 279) {
    b.put_code(sym - 256, 7);
  } else {
    b.put_code(0xC0 + (sym - 280), 8);
  }
}

void put_length(Bits& b, std::size_t len) {
  static constexpr unsigned base[29] = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
                                        15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
                                        67, 83, 99, 115, 131, 163, 195, 227, 258};
  static constexpr int extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                    2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
  int code = 28;
  while (base[code] > len) --code;
  put_symbol(b, 257 + static_cast<unsigned>(code));
  b.put(static_cast<std::uint32_t>(len - base[code]), extra[code]);
}

// One final fixed-Huffman block: literals, and runs of the previous byte as distance-1 matches.
std::vector<std::uint8_t> deflate_runs(std::span<const std::uint8_t> data) {
  Bits b;
  b.put(1, 1);  // BFINAL
  b.put(1, 2);  // BTYPE 01: fixed Huffman codes
  std::size_t i = 0;
  while (i < data.size()) {
    std::size_t run = 0;
    if (i > 0) {
      while (i + run < data.size() && run < match_max && data[i + run] == data[i - 1]) ++run;
    }
    if (run >= match_min) {
      put_length(b, run);
      b.put_code(0, 5);  // distance code 0: distance 1, no extra bits
      i += run;
    } else {
      put_symbol(b, data[i]);
      ++i;
    }
  }
  put_symbol(b, 256);  // end of block
  return b.finish();
}

void put_be32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}

void put_chunk(std::vector<std::uint8_t>& out, const char (&type)[5],
               std::span<const std::uint8_t> body) {
  put_be32(out, static_cast<std::uint32_t>(body.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), body.begin(), body.end());
  put_be32(out, crc32(std::span<const std::uint8_t>(out).subspan(start)));
}

}  // namespace

std::uint32_t crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (std::uint8_t byte : bytes) crc = table[(crc ^ byte) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t adler32(std::span<const std::uint8_t> bytes) {
  constexpr std::uint32_t mod = 65521;
  std::uint32_t a = 1, b = 0;
  for (std::uint8_t byte : bytes) {
    a = (a + byte) % mod;
    b = (b + a) % mod;
  }
  return (b << 16) | a;
}

const std::array<Rgb, colour_count>& palette() {
  static const std::array<Rgb, colour_count> p = {{
      {255, 255, 255},  // white
      {0, 0, 0},        // black
      {110, 110, 110},  // grey
      {225, 225, 225},  // light_grey
      {31, 119, 180},   // blue
      {255, 127, 14},   // orange
      {44, 160, 44},    // green
      {214, 39, 40},    // red
      {148, 103, 189},  // purple
      {140, 86, 75},    // brown
      {23, 190, 207},   // teal
  }};
  return p;
}

Canvas::Canvas(int width, int height, Colour background)
    : w_(width),
      h_(height),
      px_(static_cast<std::size_t>(width) * static_cast<std::size_t>(height), background) {}

void Canvas::set(int x, int y, Colour c) {
  if (x >= 0 && y >= 0 && x < w_ && y < h_) px_[idx(x, y)] = c;
}

void Canvas::fill(int x0, int y0, int x1, int y1, Colour c) {
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, w_ - 1);
  y1 = std::min(y1, h_ - 1);
  for (int y = y0; y <= y1; ++y) {
    for (int x = x0; x <= x1; ++x) px_[idx(x, y)] = c;
  }
}

void Canvas::line(double x0, double y0, double x1, double y1, Colour c, int thick, int dash_px) {
  const double dx = x1 - x0, dy = y1 - y0;
  const double len = std::hypot(dx, dy);
  const int steps = std::max(1, static_cast<int>(std::ceil(len * 2)));
  const int lo = -(thick - 1) / 2, hi = thick / 2;
  for (int i = 0; i <= steps; ++i) {
    const double t = static_cast<double>(i) / steps;
    if (dash_px > 0 && static_cast<int>(t * len / dash_px) % 2 == 1) continue;
    const int x = static_cast<int>(std::lround(x0 + t * dx));
    const int y = static_cast<int>(std::lround(y0 + t * dy));
    for (int oy = lo; oy <= hi; ++oy) {
      for (int ox = lo; ox <= hi; ++ox) set(x + ox, y + oy, c);
    }
  }
}

int Canvas::text_width(std::string_view s, int scale) {
  return s.empty() ? 0 : (static_cast<int>(s.size()) * advance - 1) * scale;
}

int Canvas::text_height(int scale) {
  return glyph_h * scale;
}

void Canvas::text(int x, int y, std::string_view s, int scale, Colour c) {
  for (char ch : s) {
    const auto& g = glyph(ch);
    for (int row = 0; row < glyph_h; ++row) {
      for (int col = 0; col < glyph_w; ++col) {
        if ((g[row] >> (glyph_w - 1 - col)) & 1u) {
          fill(x + col * scale, y + row * scale, x + (col + 1) * scale - 1,
               y + (row + 1) * scale - 1, c);
        }
      }
    }
    x += advance * scale;
  }
}

void Canvas::text_up(int x, int y, std::string_view s, int scale, Colour c) {
  // Turned a quarter left: a glyph's column becomes a row counted up from y.
  for (char ch : s) {
    const auto& g = glyph(ch);
    for (int row = 0; row < glyph_h; ++row) {
      for (int col = 0; col < glyph_w; ++col) {
        if ((g[row] >> (glyph_w - 1 - col)) & 1u) {
          const int px = x + row * scale;
          const int py = y - (col + 1) * scale + 1;
          fill(px, py, px + scale - 1, py + scale - 1, c);
        }
      }
    }
    y -= advance * scale;
  }
}

std::vector<std::uint8_t> encode_png(const Canvas& c) {
  std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

  std::vector<std::uint8_t> ihdr;
  put_be32(ihdr, static_cast<std::uint32_t>(c.width()));
  put_be32(ihdr, static_cast<std::uint32_t>(c.height()));
  ihdr.insert(ihdr.end(), {8, 3, 0, 0, 0});  // 8-bit palette indices, no interlace
  put_chunk(out, "IHDR", ihdr);

  std::vector<std::uint8_t> plte;
  for (const Rgb& p : palette()) plte.insert(plte.end(), {p.r, p.g, p.b});
  put_chunk(out, "PLTE", plte);

  // Each row: filter type 0 (none), then its indices.
  std::vector<std::uint8_t> raw;
  raw.reserve(c.pixels().size() + static_cast<std::size_t>(c.height()));
  for (int y = 0; y < c.height(); ++y) {
    raw.push_back(0);
    const auto row = c.pixels().begin() + static_cast<std::ptrdiff_t>(y) * c.width();
    raw.insert(raw.end(), row, row + c.width());
  }
  std::vector<std::uint8_t> z = {0x78, 0x01};  // deflate, 32 KiB window, no dictionary
  const auto body = deflate_runs(raw);
  z.insert(z.end(), body.begin(), body.end());
  put_be32(z, adler32(raw));
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", {});
  return out;
}

}  // namespace rig::bench
