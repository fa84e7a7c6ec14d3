#include "traces/cag_requests.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "traces/json.h"

namespace mobisim::traces {

namespace {

// Hostile-input bounds: nothing a real request needs comes near them.
constexpr std::size_t kMaxTokensPerList = std::size_t{1} << 22;
constexpr std::size_t kMaxTopN = 1024;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

enum class Encoding { kJsonl, kHdf5 };
Encoding encoding_of(const std::string& path) {
  if (ends_with(path, ".jsonl")) return Encoding::kJsonl;
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return Encoding::kHdf5;
  throw InputError(fmt::format("{}: CAG request files end in .jsonl or .h5 (the extension picks the encoding)", path));
}

// --- JSONL ------------------------------------------------------------------------------------
// (json::fail_at, traces/json.h, raises the errors that name a value's line and column.)

std::vector<int> int_list(const json::Value& v, const std::string& name, const std::string& key) {
  if (!v.is_array()) json::fail_at(name, v, fmt::format("'{}' must be an array of token ids", key));
  if (v.as_array().size() > kMaxTokensPerList)
    json::fail_at(name, v, fmt::format("'{}' has {} entries (limit {})", key, v.as_array().size(), kMaxTokensPerList));
  std::vector<int> out;
  out.reserve(v.as_array().size());
  for (const auto& e : v.as_array()) {
    const double d = e.is_number() ? e.as_number() : -1.0;
    if (!e.is_number() || d != std::floor(d) || d < 0 || d > std::numeric_limits<int>::max())
      json::fail_at(name, e, fmt::format("'{}' entries must be non-negative integer token ids", key));
    out.push_back(static_cast<int>(d));
  }
  return out;
}

std::vector<float> prob_list(const json::Value& v, const std::string& name, const std::string& key) {
  if (!v.is_array()) json::fail_at(name, v, fmt::format("'{}' rows must be arrays of probabilities", key));
  std::vector<float> out;
  for (const auto& e : v.as_array()) {
    if (!e.is_number()) json::fail_at(name, e, fmt::format("'{}' entries must be numbers", key));
    out.push_back(static_cast<float>(e.as_number()));
  }
  return out;
}

template <class Row, class F>
std::vector<Row> rows_of(const json::Value& v, const std::string& name, const std::string& key, F row) {
  if (!v.is_array()) json::fail_at(name, v, fmt::format("'{}' must be an array with one row per prompt position", key));
  if (v.as_array().size() > kMaxTokensPerList)
    json::fail_at(name, v, fmt::format("'{}' has {} rows (limit {})", key, v.as_array().size(), kMaxTokensPerList));
  std::vector<Row> out;
  for (const auto& r : v.as_array()) out.push_back(row(r, name, key));
  return out;
}

std::string json_ints(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s.append(std::to_string(v[i]));
  }
  return s + "]";
}

std::string json_floats(const std::vector<float>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += fmt::format("{}", v[i]);  // shortest text that reads back as the same float
  }
  return s + "]";
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      o += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string request_where(const std::string& name, int line, std::size_t index, const std::string& user) {
  return fmt::format("{}:{}: request {} (user '{}')", name, line, index, user);
}

// --- HDF5 -------------------------------------------------------------------------------------
std::size_t checked_len(std::int64_t v, const std::string& path, const std::string& what, std::size_t i) {
  if (v < 0 || static_cast<std::uint64_t>(v) > kMaxTokensPerList)
    throw InputError(fmt::format("{}: {} of request {} is {} (expected 0..{})", path, what, i, v, kMaxTokensPerList));
  return static_cast<std::size_t>(v);
}

CagRequestFile read_h5(const std::string& path) {
  h5::Reader r(path);
  if (!r.has_attr("/", "format") || r.attr_string("/", "format") != kCagRequestsFormat)
    throw InputError(fmt::format("{}: not a CAG request file (root attribute format != '{}')", path, kCagRequestsFormat));
  const std::int64_t version = r.has_attr("/", "schema_version") ? r.attr_int("/", "schema_version") : 0;
  if (version < 1 || version > kCagRequestsSchemaVersion)
    throw InputError(fmt::format("{}: CAG request schema version {} (this mobisim reads 1..{})", path, version,
                                 kCagRequestsSchemaVersion));
  CagRequestFile f;
  f.source = r.has_attr("/", "source") ? r.attr_string("/", "source") : "";
  f.vocab = r.has_attr("/", "vocab") ? r.attr_int("/", "vocab") : 0;
  const auto users = r.strings("requests/user");
  const std::size_t n = users.size();
  const auto tasks = r.strings("requests/task", n);
  const auto ctx = r.ints("requests/context_len", n), ins = r.ints("requests/instruction_len", n),
             out = r.ints("requests/output_len", n), topn = r.ints("requests/top_n", n);
  const auto tokens = r.ints("tokens");
  const auto top_ids = r.ints("top_ids");
  const auto top_probs = r.floats("top_probs", top_ids.size());
  std::size_t tok_at = 0, top_at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    CagRequestRecord q;
    q.user_id = users[i];
    q.task = tasks[i];
    const std::size_t c = checked_len(ctx[i], path, "requests/context_len", i),
                      in = checked_len(ins[i], path, "requests/instruction_len", i),
                      o = checked_len(out[i], path, "requests/output_len", i);
    if (topn[i] < 0 || static_cast<std::uint64_t>(topn[i]) > kMaxTopN)
      throw InputError(fmt::format("{}: requests/top_n of request {} is {} (expected 0..{})", path, i, topn[i], kMaxTopN));
    const auto tn = static_cast<std::size_t>(topn[i]);
    if (tokens.size() - tok_at < c + in + o)
      throw InputError(fmt::format("{}: /tokens ends inside request {} (needs {} more ids, {} left)", path, i,
                                   c + in + o, tokens.size() - tok_at));
    auto take = [&](std::size_t k) {
      std::vector<int> v;
      for (std::size_t j = 0; j < k; ++j) {
        const std::int64_t t = tokens[tok_at++];
        if (t < 0 || t > std::numeric_limits<int>::max())
          throw InputError(fmt::format("{}: /tokens holds {} in request {} (token ids are >= 0)", path, t, i));
        v.push_back(static_cast<int>(t));
      }
      return v;
    };
    q.context = take(c);
    q.instruction = take(in);
    q.output = take(o);
    if (tn > 0) {
      const std::size_t rows = c + in;
      if (top_ids.size() - top_at < rows * tn)
        throw InputError(fmt::format("{}: /top_ids ends inside request {} (its prompt of {} positions x top_n {} "
                                     "needs {} entries, {} left): predictions must cover every prompt position",
                                     path, i, rows, tn, rows * tn, top_ids.size() - top_at));
      for (std::size_t p = 0; p < rows; ++p) {
        std::vector<int> ids;
        std::vector<float> probs;
        for (std::size_t k = 0; k < tn; ++k, ++top_at) {
          const std::int64_t t = top_ids[top_at];
          if (t < 0 || t > std::numeric_limits<int>::max())
            throw InputError(fmt::format("{}: /top_ids holds {} in request {} (token ids are >= 0)", path, t, i));
          ids.push_back(static_cast<int>(t));
          probs.push_back(top_probs[top_at]);
        }
        q.top_ids.push_back(std::move(ids));
        q.top_probs.push_back(std::move(probs));
      }
    }
    validate_cag_request(q, f.vocab, fmt::format("{}: request {} (user '{}')", path, i, q.user_id));
    f.requests.push_back(std::move(q));
  }
  if (tok_at != tokens.size())
    throw InputError(fmt::format("{}: /tokens has {} ids but the requests' lengths add up to {}", path, tokens.size(), tok_at));
  if (top_at != top_ids.size())
    throw InputError(fmt::format("{}: /top_ids has {} entries but the requests' prompts x top_n add up to {}", path,
                                 top_ids.size(), top_at));
  return f;
}

void write_h5(const std::string& path, const CagRequestFile& f) {
  std::vector<std::string> users, tasks;
  std::vector<std::int64_t> ctx, ins, out, topn, tokens, top_ids;
  std::vector<float> top_probs;
  for (const auto& q : f.requests) {
    users.push_back(q.user_id);
    tasks.push_back(q.task);
    ctx.push_back(static_cast<std::int64_t>(q.context.size()));
    ins.push_back(static_cast<std::int64_t>(q.instruction.size()));
    out.push_back(static_cast<std::int64_t>(q.output.size()));
    topn.push_back(q.has_predictions() ? static_cast<std::int64_t>(q.top_ids[0].size()) : 0);
    for (const auto* part : {&q.context, &q.instruction, &q.output}) tokens.insert(tokens.end(), part->begin(), part->end());
    for (std::size_t p = 0; p < q.top_ids.size(); ++p) {
      top_ids.insert(top_ids.end(), q.top_ids[p].begin(), q.top_ids[p].end());
      top_probs.insert(top_probs.end(), q.top_probs[p].begin(), q.top_probs[p].end());
    }
  }
  h5::Writer w(path);
  H5::Group root = w.root();
  h5::write_attr(root, "format", kCagRequestsFormat);
  h5::write_attr(root, "schema_version", kCagRequestsSchemaVersion);
  h5::write_attr(root, "source", f.source);
  h5::write_attr(root, "vocab", f.vocab);
  H5::Group rq = h5::make_group(root, "requests");
  h5::write_dataset(rq, "user", users);
  h5::write_dataset(rq, "task", tasks);
  h5::write_dataset(rq, "context_len", ctx, "tokens");
  h5::write_dataset(rq, "instruction_len", ins, "tokens");
  h5::write_dataset(rq, "output_len", out, "tokens");
  h5::write_dataset(rq, "top_n", topn, "count");
  h5::write_dataset(root, "tokens", tokens);
  h5::write_dataset(root, "top_ids", top_ids);
  h5::write_dataset(root, "top_probs", top_probs);
  w.commit();
}

}  // namespace

void validate_cag_request(const CagRequestRecord& r, std::int64_t vocab, const std::string& where) {
  if (r.user_id.empty()) throw InputError(fmt::format("{}: empty user id", where));
  if (r.prompt_size() == 0) throw InputError(fmt::format("{}: empty prompt (no context and no instruction tokens)", where));
  if (r.output.empty()) throw InputError(fmt::format("{}: empty output (nothing to decode)", where));
  if (vocab > 0)
    for (const auto* part : {&r.context, &r.instruction, &r.output})
      for (int t : *part)
        if (t >= vocab) throw InputError(fmt::format("{}: token id {} is outside the vocabulary of {}", where, t, vocab));
  if (r.top_ids.size() != r.top_probs.size())
    throw InputError(fmt::format("{}: top_ids has {} rows but top_probs {}", where, r.top_ids.size(), r.top_probs.size()));
  if (!r.has_predictions()) return;
  if (r.top_ids.size() != r.prompt_size())
    throw InputError(fmt::format("{}: top_ids/top_probs have {} rows but the prompt has {} positions (context {} + "
                                 "instruction {}): the prefill predictions must cover every prompt position",
                                 where, r.top_ids.size(), r.prompt_size(), r.context.size(), r.instruction.size()));
  const std::size_t n = r.top_ids[0].size();
  if (n == 0 || n > kMaxTopN) throw InputError(fmt::format("{}: top-n rows must hold 1..{} entries (got {})", where, kMaxTopN, n));
  for (std::size_t p = 0; p < r.top_ids.size(); ++p) {
    if (r.top_ids[p].size() != n || r.top_probs[p].size() != n)
      throw InputError(fmt::format("{}: prompt position {} has {} ids and {} probabilities (every row: {})", where, p,
                                   r.top_ids[p].size(), r.top_probs[p].size(), n));
    for (std::size_t k = 0; k < n; ++k) {
      const float pr = r.top_probs[p][k];
      if (!(pr >= 0.0f && pr <= 1.0f))
        throw InputError(fmt::format("{}: probability {} at position {} rank {} is outside [0, 1]", where, pr, p, k));
      if (k > 0 && pr > r.top_probs[p][k - 1])
        throw InputError(fmt::format("{}: position {}: probabilities must be in rank order (non-increasing)", where, p));
      if (vocab > 0 && r.top_ids[p][k] >= vocab)
        throw InputError(fmt::format("{}: top id {} at position {} is outside the vocabulary of {}", where,
                                     r.top_ids[p][k], p, vocab));
    }
  }
}

CagRequestFile read_cag_requests_jsonl_text(const std::string& text, const std::string& name) {
  CagRequestFile f;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  bool header_seen = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json::Value v = json::parse(line, name, line_no);
    if (!v.is_object()) json::fail_at(name, v, "each line must be a JSON object (a header or a request)");
    if (v.find("format")) {
      if (header_seen || !f.requests.empty()) json::fail_at(name, v, "the header object must be the first line");
      header_seen = true;
      for (const auto& [k, val] : v.as_object()) {
        if (k == "format") {
          if (!val.is_string() || val.as_string() != kCagRequestsFormat)
            json::fail_at(name, val, fmt::format("format must be \"{}\"", kCagRequestsFormat));
        } else if (k == "schema_version") {
          if (!val.is_number() || val.as_number() < 1 || val.as_number() > kCagRequestsSchemaVersion)
            json::fail_at(name, val, fmt::format("schema_version must be 1..{}", kCagRequestsSchemaVersion));
        } else if (k == "source") {
          if (!val.is_string()) json::fail_at(name, val, "source must be a string");
          f.source = val.as_string();
        } else if (k == "vocab") {
          if (!val.is_number() || val.as_number() < 0 || val.as_number() != std::floor(val.as_number()) ||
              val.as_number() > std::numeric_limits<int>::max())
            json::fail_at(name, val, "vocab must be a non-negative integer");
          f.vocab = static_cast<std::int64_t>(val.as_number());
        } else {
          json::fail_at(name, val, fmt::format("unknown header key '{}' (expected format, schema_version, source, vocab)", k));
        }
      }
      continue;
    }
    CagRequestRecord q;
    bool has_user = false, has_output = false;
    for (const auto& [k, val] : v.as_object()) {
      if (k == "user") {
        if (!val.is_string()) json::fail_at(name, val, "'user' must be a string");
        q.user_id = val.as_string();
        has_user = true;
      } else if (k == "task") {
        if (!val.is_string()) json::fail_at(name, val, "'task' must be a string");
        q.task = val.as_string();
      } else if (k == "context") {
        q.context = int_list(val, name, k);
      } else if (k == "instruction") {
        q.instruction = int_list(val, name, k);
      } else if (k == "output") {
        q.output = int_list(val, name, k);
        has_output = true;
      } else if (k == "top_ids") {
        q.top_ids = rows_of<std::vector<int>>(val, name, k, int_list);
      } else if (k == "top_probs") {
        q.top_probs = rows_of<std::vector<float>>(val, name, k, prob_list);
      } else {
        json::fail_at(name, val,
                fmt::format("unknown request key '{}' (expected user, task, context, instruction, output, top_ids, "
                            "top_probs)",
                            k));
      }
    }
    if (!has_user) json::fail_at(name, v, "a request needs \"user\"");
    if (!has_output) json::fail_at(name, v, "a request needs \"output\" (the token ids the model produced)");
    validate_cag_request(q, f.vocab, request_where(name, line_no, f.requests.size(), q.user_id));
    f.requests.push_back(std::move(q));
  }
  if (f.requests.empty()) throw InputError(fmt::format("{}: no requests", name));
  return f;
}

std::string cag_requests_to_jsonl(const CagRequestFile& f) {
  std::string s = fmt::format("{{\"format\":\"{}\",\"schema_version\":{},\"source\":{},\"vocab\":{}}}\n",
                              kCagRequestsFormat, kCagRequestsSchemaVersion, json_string(f.source), f.vocab);
  for (const auto& q : f.requests) {
    s += fmt::format("{{\"user\":{},\"task\":{},\"context\":{},\"instruction\":{},\"output\":{}", json_string(q.user_id),
                     json_string(q.task), json_ints(q.context), json_ints(q.instruction), json_ints(q.output));
    if (q.has_predictions()) {
      s += ",\"top_ids\":[";
      for (std::size_t p = 0; p < q.top_ids.size(); ++p) {
        if (p) s += ',';
        s.append(json_ints(q.top_ids[p]));
      }
      s += "],\"top_probs\":[";
      for (std::size_t p = 0; p < q.top_probs.size(); ++p) {
        if (p) s += ',';
        s.append(json_floats(q.top_probs[p]));
      }
      s += "]";
    }
    s += "}\n";
  }
  return s;
}

CagRequestFile read_cag_requests(const std::string& path) {
  if (encoding_of(path) == Encoding::kHdf5) {
    CagRequestFile f = read_h5(path);
    if (f.requests.empty()) throw InputError(fmt::format("{}: no requests", path));
    return f;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open the CAG request file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return read_cag_requests_jsonl_text(ss.str(), path);
}

void write_cag_requests(const std::string& path, const CagRequestFile& f) {
  for (std::size_t i = 0; i < f.requests.size(); ++i)
    validate_cag_request(f.requests[i], f.vocab, fmt::format("{}: request {} (user '{}')", path, i, f.requests[i].user_id));
  if (encoding_of(path) == Encoding::kHdf5)
    write_h5(path, f);
  else
    write_file_atomic(path, cag_requests_to_jsonl(f));
}

}  // namespace mobisim::traces
