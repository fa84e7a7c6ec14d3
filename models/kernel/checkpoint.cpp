#include "models/kernel/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "sim/error.h"
#include "sim/rng.h"

namespace mobisim::kernel {

namespace {

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open model file", path));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::streamoff>(in.tellg());
  if (size < 0) throw InputError(fmt::format("{}: cannot determine file size", path));
  in.seekg(0);
  std::vector<std::uint8_t> buf(static_cast<std::size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(buf.data()), size))
    throw InputError(fmt::format("{}: read failed", path));
  return buf;
}

void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot create file", path));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error(fmt::format("{}: write failed", path));
}

template <class T>
void put(std::vector<std::uint8_t>& b, T v) {
  std::uint8_t raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  b.insert(b.end(), raw, raw + sizeof(T));
}
void put_floats(std::vector<std::uint8_t>& b, const float* p, std::int64_t n) {
  const auto* raw = reinterpret_cast<const std::uint8_t*>(p);
  b.insert(b.end(), raw, raw + n * static_cast<std::int64_t>(sizeof(float)));
}

}  // namespace

// ---------------------------------------------------------------------------
// llama2.c
// ---------------------------------------------------------------------------
Model load_llama2c(const std::string& path) {
  const auto buf = read_file(path);
  constexpr std::size_t kHeader = 7 * sizeof(std::int32_t);
  if (buf.size() < kHeader)
    throw InputError(fmt::format("{}: {} bytes is shorter than the 28-byte llama2.c header", path, buf.size()));
  std::int32_t h[7];
  std::memcpy(h, buf.data(), kHeader);
  Config c;
  c.arch = "llama";
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.tied_classifier = h[5] > 0;
  // Negating INT_MIN is undefined; such a vocabulary size is rejected by validate() anyway.
  c.vocab_size = h[5] == std::numeric_limits<std::int32_t>::min() ? 0 : std::abs(h[5]);
  c.seq_len = h[6];
  c.rope = RopeLayout::kAdjacentPairs;
  if (c.n_heads > 0 && c.dim > 0) {
    if (c.dim % c.n_heads != 0)
      throw InputError(fmt::format("{}: dim {} is not a multiple of n_heads {}", path, c.dim, c.n_heads));
    c.head_dim = c.dim / c.n_heads;
  }
  c.validate(path);
  const std::int64_t rope_tables = static_cast<std::int64_t>(c.seq_len) * c.head_dim;  // two of seq_len*hd/2
  const std::int64_t before_cls = c.n_params() - (c.tied_classifier ? 0 : std::int64_t{c.vocab_size} * c.dim);
  const std::int64_t floats = c.n_params() + rope_tables;
  const std::int64_t expected = static_cast<std::int64_t>(kHeader) + floats * 4;
  if (static_cast<std::int64_t>(buf.size()) != expected)
    throw InputError(fmt::format(
        "{}: file is {} bytes but its header (dim={}, hidden_dim={}, n_layers={}, n_heads={}, n_kv_heads={}, "
        "vocab_size={}, seq_len={}) needs exactly {} bytes{}",
        path, buf.size(), h[0], h[1], h[2], h[3], h[4], h[5], h[6], expected,
        static_cast<std::int64_t>(buf.size()) < expected ? " (truncated?)" : ""));
  auto storage = std::make_shared<std::vector<float>>(static_cast<std::size_t>(c.n_params()));
  const std::uint8_t* src = buf.data() + kHeader;
  std::memcpy(storage->data(), src, static_cast<std::size_t>(before_cls) * 4);
  if (!c.tied_classifier)
    std::memcpy(storage->data() + before_cls, src + (before_cls + rope_tables) * 4,
                static_cast<std::size_t>(c.n_params() - before_cls) * 4);
  return make_model(c, std::move(storage), path);
}

void write_llama2c(const std::string& path, const Model& m) {
  const Config& c = m.config;
  if (c.qkv_bias) throw UsageError(fmt::format("{}: llama2.c checkpoints cannot hold Q/K/V biases", path));
  if (c.rope != RopeLayout::kAdjacentPairs || c.head_dim * c.n_heads != c.dim)
    throw UsageError(fmt::format("{}: llama2.c checkpoints imply adjacent-pair RoPE and head_dim = dim/n_heads", path));
  std::vector<std::uint8_t> b;
  for (int v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                c.tied_classifier ? c.vocab_size : -c.vocab_size, c.seq_len})
    put<std::int32_t>(b, v);
  const std::int64_t cls = c.tied_classifier ? 0 : std::int64_t{c.vocab_size} * c.dim;
  const float* w = m.storage->data();
  put_floats(b, w, c.n_params() - cls);
  // The RoPE tables llama2.c's export writes (unused by run.c and by this kernel).
  std::vector<float> re, im;
  for (int p = 0; p < c.seq_len; ++p)
    for (int i = 0; i < c.head_dim / 2; ++i) {
      const double f = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.head_dim);
      re.push_back(static_cast<float>(std::cos(p * f)));
      im.push_back(static_cast<float>(std::sin(p * f)));
    }
  put_floats(b, re.data(), static_cast<std::int64_t>(re.size()));
  put_floats(b, im.data(), static_cast<std::int64_t>(im.size()));
  if (cls) put_floats(b, m.weights.wcls, cls);
  write_file(path, b);
}

// ---------------------------------------------------------------------------
// Half precision
// ---------------------------------------------------------------------------
std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // round to nearest even; may carry into the exponent
  return static_cast<std::uint16_t>(sign | h);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      x = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// ---------------------------------------------------------------------------
// GGUF
// ---------------------------------------------------------------------------
namespace {

enum GgufValue : std::uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64
};

// A bounds-checked cursor over the file bytes.
class Reader {
 public:
  Reader(const std::vector<std::uint8_t>& b, const std::string& path) : b_(b), path_(path) {}
  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return b_.size() - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("{}: malformed GGUF at byte {}: {}", path_, pos_, what));
  }
  void need(std::uint64_t n, const char* what) const {
    if (n > remaining()) fail(fmt::format("{} needs {} bytes, only {} left (truncated?)", what, n, remaining()));
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const auto n = get<std::uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  void skip(std::uint64_t n, const char* what) {
    need(n, what);
    pos_ += static_cast<std::size_t>(n);
  }

 private:
  const std::vector<std::uint8_t>& b_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

std::size_t scalar_size(std::uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}


void read_value(Reader& r, std::uint32_t type, const std::string& key, std::map<std::string, double>& nums,
                std::map<std::string, std::string>& strs, int depth) {
  if (depth > 2) r.fail(fmt::format("metadata '{}' nests arrays too deeply", key));
  if (type == kString) {
    strs[key] = r.str("metadata string");
    return;
  }
  if (type == kArray) {
    const auto et = r.get<std::uint32_t>("array element type");
    const auto n = r.get<std::uint64_t>("array length");
    // Each element takes at least one byte: a count beyond the file is a lie, not a loop to run.
    if (n > r.remaining()) r.fail(fmt::format("array '{}' claims {} elements", key, n));
    if (et == kString || et == kArray) {
      std::map<std::string, double> ignore_n;
      std::map<std::string, std::string> ignore_s;
      for (std::uint64_t i = 0; i < n; ++i) read_value(r, et, "", ignore_n, ignore_s, depth + 1);
    } else {
      const std::size_t sz = scalar_size(et);
      if (sz == 0) r.fail(fmt::format("array '{}' has unknown element type {}", key, et));
      if (n > r.remaining() / sz) r.fail(fmt::format("array '{}' of {} elements is truncated", key, n));
      r.skip(n * sz, "array data");
    }
    return;
  }
  double v = 0;
  switch (type) {
    case kU8: v = r.get<std::uint8_t>("u8"); break;
    case kI8: v = r.get<std::int8_t>("i8"); break;
    case kBool: v = r.get<std::uint8_t>("bool"); break;
    case kU16: v = r.get<std::uint16_t>("u16"); break;
    case kI16: v = r.get<std::int16_t>("i16"); break;
    case kU32: v = r.get<std::uint32_t>("u32"); break;
    case kI32: v = r.get<std::int32_t>("i32"); break;
    case kF32: v = r.get<float>("f32"); break;
    case kU64: v = static_cast<double>(r.get<std::uint64_t>("u64")); break;
    case kI64: v = static_cast<double>(r.get<std::int64_t>("i64")); break;
    case kF64: v = r.get<double>("f64"); break;
    default: r.fail(fmt::format("metadata '{}' has unknown value type {}", key, type));
  }
  nums[key] = v;
}

const char* ggml_type_name(std::uint32_t t) {
  static const char* names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0",
                                "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

struct TensorInfo {
  std::vector<std::uint64_t> dims;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t count = 0;
};

}  // namespace

Model load_gguf(const std::string& path) {
  const auto buf = read_file(path);
  Reader r(buf, path);
  const auto magic = r.get<std::uint32_t>("magic");
  if (magic != 0x46554747u) r.fail("magic is not 'GGUF'");
  const auto version = r.get<std::uint32_t>("version");
  if (version != 2 && version != 3) r.fail(fmt::format("version {} (expected 2 or 3)", version));
  const auto n_tensors = r.get<std::uint64_t>("tensor count");
  const auto n_kv = r.get<std::uint64_t>("metadata count");
  if (n_tensors > r.remaining() || n_kv > r.remaining())
    r.fail(fmt::format("{} tensors / {} metadata entries cannot fit in the file", n_tensors, n_kv));
  std::map<std::string, double> nums;
  std::map<std::string, std::string> strs;
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = r.str("metadata key");
    const auto type = r.get<std::uint32_t>("metadata type");
    read_value(r, type, key, nums, strs, 0);
  }
  std::map<std::string, TensorInfo> tensors;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    const std::string name = r.str("tensor name");
    TensorInfo t;
    const auto nd = r.get<std::uint32_t>("tensor rank");
    if (nd < 1 || nd > 4) r.fail(fmt::format("tensor '{}' has rank {} (expected 1..4)", name, nd));
    t.count = 1;
    for (std::uint32_t d = 0; d < nd; ++d) {
      const auto n = r.get<std::uint64_t>("tensor dim");
      if (n == 0 || n > (std::uint64_t{1} << 40) || t.count > (std::uint64_t{1} << 40) / n)
        r.fail(fmt::format("tensor '{}' has an implausible dimension {}", name, n));
      t.dims.push_back(n);
      t.count *= n;
    }
    t.type = r.get<std::uint32_t>("tensor type");
    t.offset = r.get<std::uint64_t>("tensor offset");
    if (t.type != 0 && t.type != 1)
      throw InputError(fmt::format("{}: tensor '{}' has type {} ({}); only F32 and F16 tensors are supported", path,
                                   name, ggml_type_name(t.type), t.type));
    tensors[name] = std::move(t);
  }
  std::uint64_t align = 32;
  if (auto it = nums.find("general.alignment"); it != nums.end()) {
    align = static_cast<std::uint64_t>(it->second);
    if (align == 0 || align > 65536 || (align & (align - 1)) != 0) r.fail(fmt::format("alignment {}", align));
  }
  const std::uint64_t data_start = (r.pos() + align - 1) / align * align;

  auto arch_it = strs.find("general.architecture");
  if (arch_it == strs.end()) throw InputError(fmt::format("{}: GGUF has no general.architecture", path));
  const std::string arch = arch_it->second;
  if (arch != "llama" && arch != "qwen2")
    throw InputError(fmt::format("{}: GGUF architecture '{}' is not supported (expected llama or qwen2)", path, arch));
  auto meta = [&](const std::string& k, std::optional<double> def = std::nullopt) -> double {
    auto it = nums.find(arch + "." + k);
    if (it != nums.end()) return it->second;
    if (def) return *def;
    throw InputError(fmt::format("{}: GGUF metadata '{}.{}' is missing", path, arch, k));
  };
  auto as_int = [&](double v, const char* what) {
    if (!(v >= 0 && v <= 1e9)) throw InputError(fmt::format("{}: GGUF {} = {} out of range", path, what, v));
    return static_cast<int>(v);
  };
  Config c;
  c.arch = arch;
  c.dim = as_int(meta("embedding_length"), "embedding_length");
  c.n_layers = as_int(meta("block_count"), "block_count");
  c.hidden_dim = as_int(meta("feed_forward_length"), "feed_forward_length");
  c.n_heads = as_int(meta("attention.head_count"), "head_count");
  c.n_kv_heads = as_int(meta("attention.head_count_kv", c.n_heads), "head_count_kv");
  c.head_dim = as_int(meta("attention.key_length", c.n_heads > 0 ? c.dim / c.n_heads : 0), "key_length");
  c.seq_len = as_int(meta("context_length"), "context_length");
  c.rope_theta = static_cast<float>(meta("rope.freq_base", 10000.0));
  c.norm_eps = static_cast<float>(meta("attention.layer_norm_rms_epsilon", 1e-5));
  c.rope = arch == "qwen2" ? RopeLayout::kHalfSplit : RopeLayout::kAdjacentPairs;
  auto emb = tensors.find("token_embd.weight");
  if (emb == tensors.end() || emb->second.dims.size() != 2)
    throw InputError(fmt::format("{}: GGUF tensor 'token_embd.weight' is missing or not 2-D", path));
  c.vocab_size = as_int(static_cast<double>(emb->second.dims[1]), "vocab");
  c.tied_classifier = tensors.find("output.weight") == tensors.end();
  c.qkv_bias = tensors.find("blk.0.attn_q.bias") != tensors.end();
  c.validate(path);

  auto storage = std::make_shared<std::vector<float>>(static_cast<std::size_t>(layout_floats(c)));
  float* dst = storage->data();
  // Copies one tensor into the llama2.c-order layout after checking its shape and extent.
  auto copy = [&](const std::string& name, std::vector<std::uint64_t> shape) {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw InputError(fmt::format("{}: GGUF tensor '{}' is missing", path, name));
    const TensorInfo& t = it->second;
    if (t.dims != shape)
      throw InputError(fmt::format("{}: GGUF tensor '{}' has shape [{}], expected [{}]", path, name,
                                   fmt::join(t.dims, ", "), fmt::join(shape, ", ")));
    const std::uint64_t esize = t.type == 0 ? 4 : 2, bytes = t.count * esize;
    if (t.offset % align != 0 || t.offset > buf.size() || data_start > buf.size() - t.offset ||
        bytes > buf.size() - data_start - t.offset)
      throw InputError(fmt::format("{}: GGUF tensor '{}' ({} bytes at offset {}) extends past the end of the file "
                                   "({} bytes)", path, name, bytes, data_start + t.offset, buf.size()));
    const std::uint8_t* src = buf.data() + data_start + t.offset;
    if (t.type == 0) {
      std::memcpy(dst, src, bytes);
    } else {
      for (std::uint64_t i = 0; i < t.count; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = half_to_float(h);
      }
    }
    dst += t.count;
  };
  const std::uint64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  auto blk = [](int l, const char* what) { return fmt::format("blk.{}.{}", l, what); };
  copy("token_embd.weight", {d, V});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "attn_norm.weight"), {d});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "attn_q.weight"), {d, q});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "attn_k.weight"), {d, kv});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "attn_v.weight"), {d, kv});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "attn_output.weight"), {q, d});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "ffn_norm.weight"), {d});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "ffn_gate.weight"), {d, h});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "ffn_down.weight"), {h, d});
  for (int l = 0; l < c.n_layers; ++l) copy(blk(l, "ffn_up.weight"), {d, h});
  copy("output_norm.weight", {d});
  if (!c.tied_classifier) copy("output.weight", {d, V});
  if (c.qkv_bias)
    for (int l = 0; l < c.n_layers; ++l) {
      copy(blk(l, "attn_q.bias"), {q});
      copy(blk(l, "attn_k.bias"), {kv});
      copy(blk(l, "attn_v.bias"), {kv});
    }
  return make_model(c, std::move(storage), path);
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  put<std::uint64_t>(kv_, key.size());
  kv_.insert(kv_.end(), key.begin(), key.end());
  put<std::uint32_t>(kv_, kString);
  put<std::uint64_t>(kv_, value.size());
  kv_.insert(kv_.end(), value.begin(), value.end());
  ++n_kv_;
}
void GgufWriter::add_u32(const std::string& key, std::uint32_t value) {
  put<std::uint64_t>(kv_, key.size());
  kv_.insert(kv_.end(), key.begin(), key.end());
  put<std::uint32_t>(kv_, kU32);
  put<std::uint32_t>(kv_, value);
  ++n_kv_;
}
void GgufWriter::add_f32(const std::string& key, float value) {
  put<std::uint64_t>(kv_, key.size());
  kv_.insert(kv_.end(), key.begin(), key.end());
  put<std::uint32_t>(kv_, kF32);
  put<float>(kv_, value);
  ++n_kv_;
}
void GgufWriter::add_tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type_id,
                            std::vector<std::uint8_t> data) {
  tensors_.push_back({name, std::move(dims), type_id, std::move(data)});
}
void GgufWriter::add_f32_tensor(const std::string& name, std::vector<std::uint64_t> dims, const float* data,
                                GgufType type) {
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<std::uint8_t> bytes;
  if (type == GgufType::kF32) {
    put_floats(bytes, data, static_cast<std::int64_t>(n));
  } else {
    for (std::uint64_t i = 0; i < n; ++i) put<std::uint16_t>(bytes, float_to_half(data[i]));
  }
  add_tensor(name, std::move(dims), static_cast<std::uint32_t>(type), std::move(bytes));
}

std::vector<std::uint8_t> GgufWriter::bytes() const {
  constexpr std::uint64_t kAlign = 32;
  std::vector<std::uint8_t> b;
  put<std::uint32_t>(b, 0x46554747u);
  put<std::uint32_t>(b, 3);
  put<std::uint64_t>(b, tensors_.size());
  put<std::uint64_t>(b, n_kv_);
  b.insert(b.end(), kv_.begin(), kv_.end());
  std::uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put<std::uint64_t>(b, t.name.size());
    b.insert(b.end(), t.name.begin(), t.name.end());
    put<std::uint32_t>(b, static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims) put<std::uint64_t>(b, d);
    put<std::uint32_t>(b, t.type);
    put<std::uint64_t>(b, offset);
    offset += (t.data.size() + kAlign - 1) / kAlign * kAlign;
  }
  b.resize((b.size() + kAlign - 1) / kAlign * kAlign, 0);
  for (const auto& t : tensors_) {
    b.insert(b.end(), t.data.begin(), t.data.end());
    b.resize((b.size() + kAlign - 1) / kAlign * kAlign, 0);
  }
  return b;
}

void GgufWriter::write(const std::string& path) const { write_file(path, bytes()); }

void write_gguf(const std::string& path, const Model& m, GgufType type) {
  const Config& c = m.config;
  const Weights& w = m.weights;
  GgufWriter g;
  const std::string a = c.arch;
  g.add_string("general.architecture", a);
  g.add_string("general.name", "mobisim-kernel");
  g.add_u32(a + ".context_length", static_cast<std::uint32_t>(c.seq_len));
  g.add_u32(a + ".embedding_length", static_cast<std::uint32_t>(c.dim));
  g.add_u32(a + ".block_count", static_cast<std::uint32_t>(c.n_layers));
  g.add_u32(a + ".feed_forward_length", static_cast<std::uint32_t>(c.hidden_dim));
  g.add_u32(a + ".attention.head_count", static_cast<std::uint32_t>(c.n_heads));
  g.add_u32(a + ".attention.head_count_kv", static_cast<std::uint32_t>(c.n_kv_heads));
  g.add_u32(a + ".attention.key_length", static_cast<std::uint32_t>(c.head_dim));
  g.add_f32(a + ".rope.freq_base", c.rope_theta);
  g.add_f32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  const std::uint64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  // Norms and biases stay F32 even in an F16 file, as llama.cpp's converter does.
  g.add_f32_tensor("token_embd.weight", {d, V}, w.token_embedding, type);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string p = fmt::format("blk.{}.", l);
    g.add_f32_tensor(p + "attn_norm.weight", {d}, lw.rms_att, GgufType::kF32);
    g.add_f32_tensor(p + "attn_q.weight", {d, q}, lw.wq, type);
    g.add_f32_tensor(p + "attn_k.weight", {d, kv}, lw.wk, type);
    g.add_f32_tensor(p + "attn_v.weight", {d, kv}, lw.wv, type);
    g.add_f32_tensor(p + "attn_output.weight", {q, d}, lw.wo, type);
    g.add_f32_tensor(p + "ffn_norm.weight", {d}, lw.rms_ffn, GgufType::kF32);
    g.add_f32_tensor(p + "ffn_gate.weight", {d, h}, lw.w1, type);
    g.add_f32_tensor(p + "ffn_down.weight", {h, d}, lw.w2, type);
    g.add_f32_tensor(p + "ffn_up.weight", {d, h}, lw.w3, type);
    if (c.qkv_bias) {
      g.add_f32_tensor(p + "attn_q.bias", {q}, lw.bq, GgufType::kF32);
      g.add_f32_tensor(p + "attn_k.bias", {kv}, lw.bk, GgufType::kF32);
      g.add_f32_tensor(p + "attn_v.bias", {kv}, lw.bv, GgufType::kF32);
    }
  }
  g.add_f32_tensor("output_norm.weight", {d}, w.rms_final, GgufType::kF32);
  if (!c.tied_classifier) g.add_f32_tensor("output.weight", {d, V}, w.wcls, type);
  g.write(path);
}

Model load_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open model file", path));
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf(path);
  return load_llama2c(path);
}

// ---------------------------------------------------------------------------
// Synthetic models
// ---------------------------------------------------------------------------
Config tiny_config() {
  Config c;
  c.dim = 64;
  c.hidden_dim = 172;
  c.n_layers = 5;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.vocab_size = 512;
  c.seq_len = 512;
  return c;
}

Model make_synthetic(const Config& c, std::uint64_t seed) {
  c.validate("synthetic model");
  auto storage = std::make_shared<std::vector<float>>(static_cast<std::size_t>(layout_floats(c)));
  sim::Rng rng(seed, 0, "kernel/synthetic", "weights");
  Model shell = make_model(c, storage, "synthetic");  // only to find where each tensor lives
  float* base = storage->data();
  auto fill = [&](const float* p, std::int64_t n, double mean, double sd) {
    float* w = base + (p - base);
    for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(rng.normal(mean, sd));
  };
  const std::int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim();
  fill(shell.weights.token_embedding, c.vocab_size * d, 0.0, 1.0);
  for (const auto& l : shell.weights.layers) {
    fill(l.rms_att, d, 1.0, 0.1);
    fill(l.wq, q * d, 0.0, 1.0 / std::sqrt(double(d)));
    fill(l.wk, kv * d, 0.0, 1.0 / std::sqrt(double(d)));
    fill(l.wv, kv * d, 0.0, 1.0 / std::sqrt(double(d)));
    fill(l.wo, d * q, 0.0, 1.0 / std::sqrt(double(q)));
    fill(l.rms_ffn, d, 1.0, 0.1);
    fill(l.w1, h * d, 0.0, 1.0 / std::sqrt(double(d)));
    fill(l.w2, d * h, 0.0, 1.0 / std::sqrt(double(h)));
    fill(l.w3, h * d, 0.0, 1.0 / std::sqrt(double(d)));
    if (c.qkv_bias) {
      fill(l.bq, q, 0.0, 0.1);
      fill(l.bk, kv, 0.0, 0.1);
      fill(l.bv, kv, 0.0, 0.1);
    }
  }
  fill(shell.weights.rms_final, d, 1.0, 0.1);
  if (!c.tied_classifier) fill(shell.weights.wcls, c.vocab_size * d, 0.0, 1.0 / std::sqrt(double(d)));
  return make_model(c, std::move(storage), fmt::format("synthetic(seed={})", seed));
}

}  // namespace mobisim::kernel
