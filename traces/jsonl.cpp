#include "traces/jsonl.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/time.h"
#include "traces/json.h"
#include "traces/text.h"

namespace mobisim::traces {

namespace {

struct Pending {
  UserTrace user;
  std::vector<std::string> documents_done;
  std::size_t with_arrival = 0;
  std::vector<std::vector<std::int64_t>> relevant;  // per query, checked once all chunks are known
};


}  // namespace

RagTrace import_jsonl_text(const std::string& text, const std::string& name, const JsonlOptions& opt) {
  std::vector<std::string> order;
  std::map<std::string, Pending> users;
  auto user = [&](const std::string& id) -> Pending& {
    auto it = users.find(id);
    if (it == users.end()) {
      order.push_back(id);
      it = users.emplace(id, Pending{}).first;
      it->second.user.user_id = id;
    }
    return it->second;
  };

  int line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    ++line_no;
    pos = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      if (nl == text.size()) break;
      continue;
    }
    json::Value v = json::parse(line, name, line_no);
    if (!v.is_object()) json::fail_at(name, v, fmt::format("line {}: expected a JSON object", line_no));
    auto str = [&](const char* key, bool required) -> std::string {
      const json::Value* f = v.find(key);
      if (!f) {
        if (required) json::fail_at(name, v, fmt::format("line {}: missing key \"{}\"", line_no, key));
        return "";
      }
      if (!f->is_string())
        json::fail_at(name, *f, fmt::format("\"{}\": expected a string, got {}", key, type_name(f->type())));
      return f->as_string();
    };
    const std::string type = str("type", true);
    std::set<std::string> allowed;
    if (type == "user") allowed = {"type", "user_id", "topics"};
    else if (type == "document" || type == "chunk") allowed = {"type", "user_id", "text"};
    else if (type == "query") allowed = {"type", "user_id", "text", "answer", "arrival_s", "kind", "relevant_chunks"};
    else json::fail_at(name, *v.find("type"), fmt::format("unknown type \"{}\" (expected user, document, chunk or query)", type));
    for (const auto& [k, val] : v.as_object())
      if (!allowed.count(k)) json::fail_at(name, val, fmt::format("unknown key \"{}\" for a {} line", k, type));
    const std::string uid = str("user_id", true);
    if (uid.empty()) json::fail_at(name, *v.find("user_id"), "user_id is empty");
    Pending& p = user(uid);
    if (type == "user") {
      if (const json::Value* tl = v.find("topics")) {
        if (!tl->is_array()) json::fail_at(name, *tl, "\"topics\": expected an array of strings");
        for (const auto& t : tl->as_array()) {
          if (!t.is_string()) json::fail_at(name, t, "\"topics\": expected an array of strings");
          p.user.topics.push_back(t.as_string());
        }
      }
    } else if (type == "document" || type == "chunk") {
      const std::string body = str("text", true);
      if (!has_words(body)) json::fail_at(name, *v.find("text"), fmt::format("the {} has no text", type));
      if (type == "chunk") {
        p.user.chunks.push_back(Chunk{body, 0, {}});
      } else {
        for (auto& c : chunk_by_words({body}, opt.chunk_words)) p.user.chunks.push_back(Chunk{std::move(c.text), 0, {}});
      }
    } else {
      Query q;
      q.text = str("text", true);
      if (!has_words(q.text)) json::fail_at(name, *v.find("text"), "the query has no text");
      q.answer_text = str("answer", false);
      q.kind = v.find("kind") ? str("kind", false) : "query";
      if (const json::Value* a = v.find("arrival_s")) {
        if (!a->is_number() || !(a->as_number() >= 0 && a->as_number() <= sim::kMaxArrival_s))
          json::fail_at(name, *a, fmt::format("\"arrival_s\": expected a number of seconds in [0, {:g}]", sim::kMaxArrival_s));
        q.arrival_s = a->as_number();
        if (!p.user.queries.empty() && p.with_arrival > 0 && q.arrival_s < p.user.queries.back().arrival_s)
          json::fail_at(name, *a, fmt::format("arrival_s {} is earlier than user {}'s previous query ({}); list queries in "
                                    "arrival order", q.arrival_s, uid, p.user.queries.back().arrival_s));
        ++p.with_arrival;
      }
      if (p.with_arrival != 0 && p.with_arrival != p.user.queries.size() + 1)
        json::fail_at(name, v, fmt::format("user {}: either every query or none has arrival_s", uid));
      std::vector<std::int64_t> rel;
      const json::Value* rv = v.find("relevant_chunks");
      if (rv) {
        if (!rv->is_array()) json::fail_at(name, *rv, "\"relevant_chunks\": expected an array of chunk ids");
        for (const auto& x : rv->as_array()) {
          if (!x.is_number() || x.as_number() < 0 || x.as_number() != static_cast<double>(static_cast<std::int64_t>(x.as_number())))
            json::fail_at(name, x, "\"relevant_chunks\": expected non-negative integers");
          rel.push_back(static_cast<std::int64_t>(x.as_number()));
        }
      }
      p.relevant.push_back(std::move(rel));
      p.user.queries.push_back(std::move(q));
    }
    if (nl == text.size()) break;
  }
  if (order.empty()) throw InputError(fmt::format("{}: no records (expected JSON lines with \"type\")", name));

  auto tok = make_tokenizer(opt.tokenizer_path);
  EnrichOptions eo;
  eo.tokenizer = tok.get();
  eo.embed = opt.embed;
  eo.embedder = opt.embedder;
  eo.retrieval = opt.retrieval;
  eo.retrieve_k = opt.retrieve_k;

  RagTrace t;
  t.meta.source = "jsonl:" + name;
  t.meta.chunker = "words";
  t.meta.chunk_words = static_cast<std::int32_t>(opt.chunk_words);
  t.meta.arrival_model = fmt::format("from file where given, else {}; seed={}", opt.arrival.describe(), opt.seed);
  describe_enrichment(t.meta, eo);
  t.meta.params_yaml = fmt::format("importer: jsonl\nfile: \"{}\"\nchunk_words: {}\nseed: {}\nretrieve_k: {}\n", name,
                                   opt.chunk_words, opt.seed, opt.retrieve_k);
  for (const auto& id : order) {
    Pending& p = users[id];
    UserTrace& u = p.user;
    if (u.chunks.empty() && !u.queries.empty())
      throw InputError(fmt::format("{}: user {} has queries but no document or chunk lines", name, id));
    for (std::size_t i = 0; i < u.queries.size(); ++i) {
      for (std::int64_t c : p.relevant[i]) {
        if (c >= static_cast<std::int64_t>(u.chunks.size()))
          throw InputError(fmt::format("{}: user {} query {}: relevant chunk {} does not exist ({} chunks)", name, id,
                                       i, c, u.chunks.size()));
        u.queries[i].relevant.push_back(static_cast<std::int32_t>(c));
      }
    }
    std::vector<double> arrivals;
    if (p.with_arrival == 0) {
      sim::Rng rng(opt.seed, 0, "traces/arrival/" + id, "gaps");
      arrivals = sample_arrivals(u.queries.size(), opt.arrival, rng);
      for (std::size_t i = 0; i < u.queries.size(); ++i) u.queries[i].arrival_s = arrivals[i];
    } else {
      for (const auto& q : u.queries) arrivals.push_back(q.arrival_s);
    }
    u.idle_windows = idle_windows(arrivals, opt.arrival);
    enrich_user(u, eo);
    t.users.push_back(std::move(u));
  }
  return t;
}

RagTrace import_jsonl(const std::string& path, const JsonlOptions& opt) {
  return import_jsonl_text(read_file(path), path, opt);
}

}  // namespace mobisim::traces
