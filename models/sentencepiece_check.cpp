#include "models/sentencepiece_check.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "sim/error.h"

namespace mobisim::models {

namespace {

// Protobuf wire format, only as deep as the model's specs need (no groups in sentencepiece_model.proto).
struct WireField {
  std::uint32_t number = 0;
  std::uint32_t wire_type = 0;
  std::string_view bytes;  // wire type 2 only
};

class WireReader {
 public:
  WireReader(std::string_view data, const std::string& where) : data_(data), where_(where) {}
  bool done() const { return pos_ >= data_.size(); }
  WireField next() {
    const std::uint64_t key = varint();
    WireField f;
    f.number = static_cast<std::uint32_t>(key >> 3);
    f.wire_type = static_cast<std::uint32_t>(key & 7);
    switch (f.wire_type) {
      case 0: varint(); break;
      case 1: skip(8); break;
      case 2: {
        const std::uint64_t n = varint();
        if (n > data_.size() - pos_) fail("a length-delimited field runs past its message");
        f.bytes = data_.substr(pos_, static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n);
        break;
      }
      case 5: skip(4); break;
      default: fail(fmt::format("unsupported protobuf wire type {}", f.wire_type));
    }
    return f;
  }

 private:
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) fail("truncated varint");
      const auto c = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
      if (c < 0x80) return v;
    }
    fail("varint longer than 10 bytes");
  }
  void skip(std::size_t n) {
    if (n > data_.size() - pos_) fail("truncated fixed-size field");
    pos_ += n;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("{}: not a SentencePiece model ({} at byte {})", where_, what, pos_));
  }
  std::string_view data_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

// Darts-clone's double-array unit (the layout libsentencepiece's normalizer reads).
bool has_leaf(std::uint32_t u) { return ((u >> 8) & 1) == 1; }
std::uint32_t leaf_value(std::uint32_t u) { return u & ((1U << 31) - 1); }
std::uint32_t label(std::uint32_t u) { return u & ((1U << 31) | 0xFF); }
std::uint32_t child_base(std::uint32_t u) { return (u >> 10) << ((u & (1U << 9)) >> 6); }

}  // namespace

void check_precompiled_charsmap(std::string_view blob, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("{}: corrupt precompiled character map: {}", where, what));
  };
  if (blob.empty()) return;  // no map: the identity normalizer
  if (blob.size() < 4) throw bad("shorter than its 4-byte trie size");
  std::uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[static_cast<std::size_t>(i)]);
  if (trie_bytes >= blob.size() - 4) throw bad(fmt::format("trie of {} bytes in a {}-byte map", trie_bytes, blob.size()));
  const std::size_t n = trie_bytes / 4;
  if (n == 0) throw bad("empty trie");
  std::vector<std::uint32_t> units(n);
  std::memcpy(units.data(), blob.data() + 4, n * 4);  // little-endian, as the library reads it on x86/ARM
  const std::string_view strings = blob.substr(4 + trie_bytes);

  // Every node a lookup can reach: the root, then each unit whose label matches the byte that leads
  // to it. A lookup at node p reads units[base(p) ^ c] for any byte c, and a leaf's value at base(p).
  std::vector<char> seen(n, 0);
  std::vector<std::size_t> stack{0};
  seen[0] = 1;
  while (!stack.empty()) {
    const std::size_t p = stack.back();
    stack.pop_back();
    const std::uint32_t base = static_cast<std::uint32_t>(p) ^ child_base(units[p]);
    if ((base | 0xFFu) >= n) throw bad(fmt::format("node {} has children outside the {}-unit trie", p, n));
    if (p != 0 && has_leaf(units[p])) {
      const std::uint32_t value = leaf_value(units[base]);
      if (value >= strings.size() || std::memchr(strings.data() + value, '\0', strings.size() - value) == nullptr)
        throw bad(fmt::format("node {} maps to offset {} outside the {} bytes of replacements", p, value, strings.size()));
    }
    for (std::uint32_t c = 0; c < 256; ++c) {
      const std::size_t child = base ^ c;
      if (label(units[child]) == c && !seen[child]) {
        seen[child] = 1;
        stack.push_back(child);
      }
    }
  }
}

void check_sentencepiece_model(std::string_view model_bytes, const std::string& path) {
  constexpr std::uint32_t kNormalizerSpec = 3, kDenormalizerSpec = 5, kPrecompiledCharsmap = 2;
  WireReader model(model_bytes, path);
  while (!model.done()) {
    const WireField f = model.next();
    if ((f.number != kNormalizerSpec && f.number != kDenormalizerSpec) || f.wire_type != 2) continue;
    const std::string where = fmt::format("{} ({})", path, f.number == kNormalizerSpec ? "normalizer_spec" : "denormalizer_spec");
    WireReader spec(f.bytes, where);
    while (!spec.done()) {
      const WireField g = spec.next();
      if (g.number == kPrecompiledCharsmap && g.wire_type == 2) check_precompiled_charsmap(g.bytes, where);
    }
  }
}

}  // namespace mobisim::models
