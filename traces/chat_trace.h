#pragma once
// Chat-session traces (format `mobisim-chat-trace`, layout in traces/SCHEMA.md,
// section "Chat-session traces"): multi-turn conversations for prefix caching.
//
// A session's prompt is one token stream (`prompt_token_ids`); its turns are
// consecutive spans of that stream, in order (sum of the turns' tokens = the
// stream's length). Every `user` turn is a request whose prompt is the stream
// up to the end of that turn: so the prompt of a session's k-th request extends
// the (k-1)-th, and the leading `system` turns are the cacheable system prompt.
//
// Writing is atomic (temp file + rename) and deterministic. Reading checks the
// format tag, the version (newer is refused), every dataset's shape, token-id
// ranges, roles and that arrivals are non-decreasing; any problem is an
// InputError naming the file and the object. This layer knows nothing about
// the generator (policies/kvcache/chat_workload.h converts to and from it).
#include <cstdint>
#include <string>
#include <vector>

namespace mobisim::traces {

inline constexpr std::int64_t kChatSchemaVersion = 1;

struct ChatTurn {
  std::string role;                // "system", "context", "history", "user" or "assistant"
  std::string text;                // "" when not available (synthetic traces)
  std::int32_t tokens = 0;         // length of the turn's span in the prompt stream
  double arrival_s = 0;            // user: request arrival; assistant: generation start; others: when the span joined
  std::int32_t prefix_tokens = 0;  // user turns: tokens of this request's prompt shared with the previous request's
};

struct ChatSessionTrace {
  std::string session_id;
  std::string user_id;
  // System prompt variant: 0 .. system_prompts-1, or -1 for a one-off (custom) prompt.
  std::int64_t system_prompt_variant = -1;
  std::vector<ChatTurn> turns;
  std::vector<std::int32_t> prompt_token_ids;  // the whole token stream; turns are consecutive spans of it

  // Tokens of the leading `system` turns (the shared, cacheable system prompt).
  std::int64_t system_tokens() const;
};

struct ChatTrace {
  std::int64_t schema_version = kChatSchemaVersion;
  std::string source;           // "generator", ...
  std::string tokenizer;        // e.g. "synthetic:uniform-ids"
  std::int64_t vocab = 0;       // token ids lie in [0, vocab)
  std::int64_t system_prompts = 0;  // number of system prompt variants
  std::string params_yaml;      // the producer's resolved parameters as YAML
  std::vector<ChatSessionTrace> sessions;  // in order of their first turn's arrival
};

// Throws mobisim::Error (a producer bug) when the in-memory trace is inconsistent.
void validate_chat_trace(const ChatTrace& trace, const std::string& what);

void write_chat_trace(const std::string& path, const ChatTrace& trace);
ChatTrace read_chat_trace(const std::string& path);

}  // namespace mobisim::traces
