#include "traces/qmsum.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <thread>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/params.h"
#include "traces/text.h"

namespace mobisim::traces {

namespace {


const json::Value& member(const std::string& name, const json::Value& obj, const std::string& key,
                          json::Value::Type type, const std::string& where) {
  if (!obj.is_object()) json::fail_at(name, obj, fmt::format("{}: expected an object, got {}", where, type_name(obj.type())));
  const json::Value* v = obj.find(key);
  if (!v) json::fail_at(name, obj, fmt::format("{}: missing key \"{}\"", where, key));
  if (v->type() != type)
    json::fail_at(name, *v, fmt::format("{}.{}: expected {}, got {}", where, key, type_name(type), type_name(v->type())));
  return *v;
}

long span_index(const std::string& name, const json::Value& v, const std::string& where) {
  // QMSum writes turn indices as strings ("12"); accept numbers too.
  if (v.is_number() && v.as_number() >= 0 && v.as_number() == static_cast<double>(static_cast<long>(v.as_number())))
    return static_cast<long>(v.as_number());
  if (v.is_string()) {
    const std::string& s = v.as_string();
    if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::stol(s);
  }
  json::fail_at(name, v, fmt::format("{}: expected a turn index (digits), got {}", where, type_name(v.type())));
}

}  // namespace

UserTrace qmsum_meeting(const json::Value& doc, const std::string& name, const std::string& user_id,
                        const QmsumOptions& opt) {
  using T = json::Value::Type;
  if (!doc.is_object()) json::fail_at(name, doc, "expected a QMSum meeting object at the top level");
  UserTrace u;
  u.user_id = user_id;

  const auto& turns = member(name, doc, "meeting_transcripts", T::kArray, "meeting").as_array();
  std::vector<std::string> units;
  units.reserve(turns.size());
  bool any_words = false;
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const std::string where = fmt::format("meeting_transcripts[{}]", i);
    const auto& speaker = member(name, turns[i], "speaker", T::kString, where).as_string();
    const auto& content = member(name, turns[i], "content", T::kString, where).as_string();
    any_words = any_words || has_words(content);
    units.push_back(speaker + ": " + content);
  }
  if (turns.empty()) json::fail_at(name, doc, "meeting_transcripts is empty: a meeting needs at least one turn");
  if (!any_words) json::fail_at(name, doc, "meeting_transcripts has no words in any turn's content");
  std::vector<WordChunk> chunks = chunk_by_words(units, opt.chunk_words);
  for (auto& c : chunks) u.chunks.push_back(Chunk{std::move(c.text), 0, {}});

  if (const json::Value* tl = doc.find("topic_list")) {
    if (!tl->is_array()) json::fail_at(name, *tl, "topic_list: expected an array");
    for (std::size_t i = 0; i < tl->as_array().size(); ++i)
      u.topics.push_back(
          member(name, tl->as_array()[i], "topic", T::kString, fmt::format("topic_list[{}]", i)).as_string());
  }

  auto read_list = [&](const char* key, const char* kind) {
    std::vector<Query> out;
    const auto& list = member(name, doc, key, T::kArray, "meeting").as_array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string where = fmt::format("{}[{}]", key, i);
      const auto& qv = member(name, list[i], "query", T::kString, where);
      if (!has_words(qv.as_string())) json::fail_at(name, qv, where + ".query: the query has no text");
      Query q;
      q.text = qv.as_string();
      q.answer_text = member(name, list[i], "answer", T::kString, where).as_string();
      q.kind = kind;
      if (const json::Value* spans = list[i].find("relevant_text_span")) {
        if (!spans->is_array()) json::fail_at(name, *spans, where + ".relevant_text_span: expected an array");
        for (const auto& sp : spans->as_array()) {
          if (!sp.is_array() || sp.as_array().size() != 2)
            json::fail_at(name, sp, where + ".relevant_text_span: expected [first_turn, last_turn] pairs");
          const long a = span_index(name, sp.as_array()[0], where + ".relevant_text_span");
          const long b = span_index(name, sp.as_array()[1], where + ".relevant_text_span");
          for (std::size_t c = 0; c < chunks.size(); ++c)
            if (static_cast<long>(chunks[c].first_unit) <= b && static_cast<long>(chunks[c].last_unit) >= a)
              q.relevant.push_back(static_cast<std::int32_t>(c));
        }
        std::sort(q.relevant.begin(), q.relevant.end());
        q.relevant.erase(std::unique(q.relevant.begin(), q.relevant.end()), q.relevant.end());
      }
      out.push_back(std::move(q));
    }
    return out;
  };
  auto general = read_list("general_query_list", "general");
  auto specific = read_list("specific_query_list", "specific");
  if (opt.order == "general-first") {
    u.queries = std::move(general);
    for (auto& q : specific) u.queries.push_back(std::move(q));
  } else if (opt.order == "interleaved") {
    for (std::size_t i = 0; i < std::max(general.size(), specific.size()); ++i) {
      if (i < general.size()) u.queries.push_back(std::move(general[i]));
      if (i < specific.size()) u.queries.push_back(std::move(specific[i]));
    }
  } else {
    throw ConfigError(fmt::format("qmsum query order '{}' is not one of general-first, interleaved", opt.order));
  }

  sim::Rng rng(opt.seed, 0, "traces/arrival/" + user_id, "gaps");
  const auto arrivals = sample_arrivals(u.queries.size(), opt.arrival, rng);
  for (std::size_t i = 0; i < u.queries.size(); ++i) u.queries[i].arrival_s = arrivals[i];
  u.idle_windows = idle_windows(arrivals, opt.arrival);
  return u;
}

RagTrace import_qmsum(const QmsumOptions& opt) {
  namespace fs = std::filesystem;
  std::vector<std::string> splits;
  if (opt.split == "all") {
    for (const char* s : {"train", "val", "test"})
      if (is_dir((fs::path(opt.dir) / s).string())) splits.push_back(s);
  } else if (opt.split == "train" || opt.split == "val" || opt.split == "test") {
    splits.push_back(opt.split);
  } else {
    throw UsageError(fmt::format("--split '{}' is not one of train, val, test, all", opt.split));
  }
  std::vector<std::pair<std::string, fs::path>> files;
  for (const auto& s : splits) {
    const fs::path d = fs::path(opt.dir) / s;
    if (!is_dir(d.string())) throw InputError(fmt::format("{}: no such QMSum split directory", d.string()));
    std::vector<fs::path> names;
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_regular_file() && e.path().extension() == ".json") names.push_back(e.path());
    std::sort(names.begin(), names.end());
    for (auto& p : names) files.emplace_back(s + "/" + p.stem().string(), p);
  }
  if (files.empty()) throw InputError(fmt::format("{}: no QMSum *.json meetings for split '{}'", opt.dir, opt.split));
  if (opt.max_meetings > 0 && files.size() > opt.max_meetings) files.resize(opt.max_meetings);

  auto tok = make_tokenizer(opt.tokenizer_path);
  EnrichOptions eo;
  eo.tokenizer = tok.get();
  eo.embed = opt.embed;
  eo.embedder = opt.embedder;
  eo.retrieval = opt.retrieval;
  eo.retrieve_k = opt.retrieve_k;

  RagTrace t;
  t.meta.source = "qmsum:" + opt.split;
  t.meta.chunker = "words";
  t.meta.chunk_words = static_cast<std::int32_t>(opt.chunk_words);
  t.meta.arrival_model = fmt::format("{}; seed={}", opt.arrival.describe(), opt.seed);
  describe_enrichment(t.meta, eo);
  YAML::Node p;
  p["importer"] = "qmsum";
  p["dir"] = opt.dir;
  p["split"] = opt.split;
  p["chunk_words"] = opt.chunk_words;
  p["order"] = opt.order;
  p["seed"] = opt.seed;
  p["tokenizer"] = opt.tokenizer_path;
  p["retrieve_k"] = opt.retrieve_k;
  t.meta.params_yaml = yaml_to_string(p);

  // Meetings are independent: import them on all cores. Each result lands in
  // its own slot, so the trace is identical to a serial import; the error of
  // the first failing meeting (in file order) is the one reported.
  std::vector<UserTrace> users(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < files.size(); i = next++) {
      try {
        const std::string text = read_file(files[i].second.string());
        const json::Value doc = json::parse(text, files[i].second.string());
        users[i] = qmsum_meeting(doc, files[i].second.string(), files[i].first, opt);
        enrich_user(users[i], eo);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const std::size_t n_threads =
      std::max<std::size_t>(1, std::min<std::size_t>(files.size(), std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (std::size_t i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  t.users = std::move(users);
  return t;
}

}  // namespace mobisim::traces
