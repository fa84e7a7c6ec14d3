#include "traces/chat_trace.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>

#include "sim/error.h"
#include "sim/time.h"
#include "sim/h5.h"
#include "traces/rag_trace_io.h"  // kChatTraceFormat, kChatSessionsGroup

namespace mobisim::traces {

namespace {

std::string session_group(std::size_t i) { return fmt::format("s{:05d}", i); }

bool known_role(const std::string& r) {
  return r == "system" || r == "context" || r == "history" || r == "user" || r == "assistant";
}

// The first inconsistency of session `s` (index i), or nullopt. `where` names the object.
std::optional<std::string> check_session(const ChatSessionTrace& s, std::size_t i, std::int64_t vocab,
                                         std::int64_t system_prompts, double prev_start) {
  const std::string g = fmt::format("{}/{}", kChatSessionsGroup, session_group(i));
  if (s.system_prompt_variant < -1 || s.system_prompt_variant >= system_prompts)
    return fmt::format("{}: system_prompt_variant {} is outside [-1, system_prompts = {})", g,
                       s.system_prompt_variant, system_prompts);
  std::int64_t end = 0;
  double prev = -INFINITY;
  for (std::size_t t = 0; t < s.turns.size(); ++t) {
    const ChatTurn& x = s.turns[t];
    if (!known_role(x.role))
      return fmt::format("{}/turns/role[{}] = '{}' is not system, context, history, user or assistant", g, t, x.role);
    if (x.tokens < 0) return fmt::format("{}/turns/tokens[{}] = {} is negative", g, t, x.tokens);
    if (!std::isfinite(x.arrival_s) || x.arrival_s < 0 || x.arrival_s < prev || x.arrival_s > sim::kMaxArrival_s)
      return fmt::format("{}/turns/arrival_s[{}] = {} is not finite and non-negative, is earlier than the previous "
                         "turn, or is past {:g} s (the clock's range)", g, t, x.arrival_s, sim::kMaxArrival_s);
    if (t == 0 && x.arrival_s < prev_start)
      return fmt::format("{}/turns/arrival_s[0] = {} is earlier than the previous session's start ({})", g,
                         x.arrival_s, prev_start);
    prev = x.arrival_s;
    end += x.tokens;
    if (x.prefix_tokens < 0 || x.prefix_tokens > end)
      return fmt::format("{}/turns/prefix_tokens[{}] = {} is outside [0, {}] (the prompt up to the end of the turn)",
                         g, t, x.prefix_tokens, end);
  }
  if (static_cast<std::int64_t>(s.prompt_token_ids.size()) != end)
    return fmt::format("{}/prompt/token_ids has {} ids, the turns' tokens sum to {}", g, s.prompt_token_ids.size(),
                       end);
  for (std::size_t k = 0; k < s.prompt_token_ids.size(); ++k)
    if (s.prompt_token_ids[k] < 0 || s.prompt_token_ids[k] >= vocab)
      return fmt::format("{}/prompt/token_ids[{}] = {} is outside [0, vocab = {})", g, k, s.prompt_token_ids[k],
                         vocab);
  return std::nullopt;
}

std::optional<std::string> check_trace(const ChatTrace& t) {
  if (t.vocab < 1) return fmt::format("vocab = {} must be >= 1", t.vocab);
  if (t.system_prompts < 0) return fmt::format("system_prompts = {} is negative", t.system_prompts);
  double prev_start = 0;
  for (std::size_t i = 0; i < t.sessions.size(); ++i) {
    if (auto e = check_session(t.sessions[i], i, t.vocab, t.system_prompts, prev_start)) return e;
    if (!t.sessions[i].turns.empty()) prev_start = t.sessions[i].turns.front().arrival_s;
  }
  return std::nullopt;
}

}  // namespace

std::int64_t ChatSessionTrace::system_tokens() const {
  std::int64_t n = 0;
  for (const auto& t : turns) {
    if (t.role != "system") break;
    n += t.tokens;
  }
  return n;
}

void validate_chat_trace(const ChatTrace& t, const std::string& what) {
  if (auto e = check_trace(t)) throw Error(fmt::format("{}: inconsistent chat trace: {}", what, *e));
}

void write_chat_trace(const std::string& path, const ChatTrace& t) {
  validate_chat_trace(t, path);
  h5::Writer w(path);
  H5::Group root = w.root();
  h5::write_attr(root, "format", kChatTraceFormat);
  h5::write_attr(root, "schema_version", kChatSchemaVersion);
  h5::write_attr(root, "source", t.source);
  h5::write_attr(root, "tokenizer", t.tokenizer);
  h5::write_attr(root, "vocab", t.vocab);
  h5::write_attr(root, "system_prompts", t.system_prompts);
  h5::write_attr(root, "params_yaml", t.params_yaml);
  h5::write_attr(root, "num_sessions", static_cast<std::int64_t>(t.sessions.size()));
  H5::Group sessions = h5::make_group(root, std::string(kChatSessionsGroup).substr(1));
  for (std::size_t i = 0; i < t.sessions.size(); ++i) {
    const ChatSessionTrace& s = t.sessions[i];
    H5::Group g = h5::make_group(sessions, session_group(i));
    h5::write_attr(g, "session_id", s.session_id);
    h5::write_attr(g, "user_id", s.user_id);
    h5::write_attr(g, "system_prompt_variant", s.system_prompt_variant);
    std::vector<std::string> role, text;
    std::vector<std::int32_t> tokens, prefix;
    std::vector<double> arrival;
    for (const auto& x : s.turns) {
      role.push_back(x.role);
      text.push_back(x.text);
      tokens.push_back(x.tokens);
      arrival.push_back(x.arrival_s);
      prefix.push_back(x.prefix_tokens);
    }
    H5::Group tg = h5::make_group(g, "turns");
    h5::write_dataset(tg, "role", role);
    h5::write_dataset(tg, "text", text);
    h5::write_dataset(tg, "tokens", tokens, "tokens");
    h5::write_dataset(tg, "arrival_s", arrival, "s");
    h5::write_dataset(tg, "prefix_tokens", prefix, "tokens");
    H5::Group pg = h5::make_group(g, "prompt");
    h5::write_dataset(pg, "token_ids", s.prompt_token_ids);
  }
  w.commit();
}

ChatTrace read_chat_trace(const std::string& path) {
  h5::Reader r(path);
  if (!r.has_attr("/", "format") || r.attr_string("/", "format") != kChatTraceFormat)
    throw InputError(fmt::format("{}: not a mobisim chat trace (root attribute format != '{}')", path,
                                 kChatTraceFormat));
  if (!r.has_attr("/", "schema_version"))
    throw InputError(fmt::format("{}: missing root attribute schema_version", path));
  const std::int64_t version = r.attr_int("/", "schema_version");
  if (version > kChatSchemaVersion)
    throw InputError(fmt::format("{}: chat trace schema version {} is newer than this mobisim supports ({}); "
                                 "upgrade mobisim or re-create the trace",
                                 path, version, kChatSchemaVersion));
  if (version < 1)
    throw InputError(fmt::format("{}: chat trace schema version {} is a draft (0) or invalid; re-create the trace",
                                 path, version));
  ChatTrace t;
  t.schema_version = version;
  auto opt_str = [&](const char* name) { return r.has_attr("/", name) ? r.attr_string("/", name) : std::string(); };
  t.source = opt_str("source");
  t.tokenizer = opt_str("tokenizer");
  t.params_yaml = opt_str("params_yaml");
  t.vocab = r.attr_int("/", "vocab");
  if (t.vocab < 1 || t.vocab > std::numeric_limits<std::int32_t>::max() + std::int64_t{1})
    throw InputError(fmt::format("{}: root attribute vocab = {} is outside [1, 2^31]", path, t.vocab));
  t.system_prompts = r.attr_int("/", "system_prompts");
  if (t.system_prompts < 0)
    throw InputError(fmt::format("{}: root attribute system_prompts = {} is negative", path, t.system_prompts));
  const std::int64_t n = r.attr_int("/", "num_sessions");
  if (n < 0) throw InputError(fmt::format("{}: root attribute num_sessions = {} is negative", path, n));
  const auto present = r.children(kChatSessionsGroup);
  if (present.size() != static_cast<std::size_t>(n))
    throw InputError(fmt::format("{}: {} has {} groups, num_sessions says {}", path, kChatSessionsGroup,
                                 present.size(), n));
  auto int32_of = [&](std::int64_t v, const std::string& obj, std::size_t k) {
    if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
      throw InputError(fmt::format("{}: {}[{}] = {} does not fit int32", path, obj, k, v));
    return static_cast<std::int32_t>(v);
  };
  t.sessions.resize(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < t.sessions.size(); ++i) {
    ChatSessionTrace& s = t.sessions[i];
    const std::string g = fmt::format("{}/{}", kChatSessionsGroup, session_group(i));
    r.group(g);  // InputError naming it when missing (e.g. a gap in the numbering)
    s.session_id = r.attr_string(g, "session_id");
    s.user_id = r.attr_string(g, "user_id");
    s.system_prompt_variant = r.attr_int(g, "system_prompt_variant");
    const std::string tg = g + "/turns";
    const auto role = r.strings(tg + "/role");
    const std::size_t nt = role.size();
    const auto text = r.strings(tg + "/text", nt);
    const auto tokens = r.ints(tg + "/tokens", nt);
    const auto arrival = r.doubles(tg + "/arrival_s", nt);
    const auto prefix = r.ints(tg + "/prefix_tokens", nt);
    s.turns.resize(nt);
    for (std::size_t k = 0; k < nt; ++k) {
      ChatTurn& x = s.turns[k];
      x.role = role[k];
      x.text = text[k];
      x.tokens = int32_of(tokens[k], tg + "/tokens", k);
      x.arrival_s = arrival[k];
      x.prefix_tokens = int32_of(prefix[k], tg + "/prefix_tokens", k);
    }
    const auto ids = r.ints(g + "/prompt/token_ids");
    s.prompt_token_ids.reserve(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0 || ids[k] >= t.vocab)
        throw InputError(fmt::format("{}: {}/prompt/token_ids[{}] = {} is outside [0, vocab = {})", path, g, k,
                                     ids[k], t.vocab));
      s.prompt_token_ids.push_back(static_cast<std::int32_t>(ids[k]));
    }
  }
  if (auto e = check_trace(t)) throw InputError(fmt::format("{}: {}", path, *e));
  return t;
}

}  // namespace mobisim::traces
