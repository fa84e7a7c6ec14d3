#include "traces/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "sim/error.h"
#include "sim/rng.h"
#include "traces/text.h"
#include "traces/workload.h"

namespace mobisim::traces {

namespace {

// Common English words (function words first, so the Zipf head is "the", "to", ...).
const std::vector<std::string>& background_words() {
  static const std::vector<std::string> w = {
      "the", "to", "and", "of", "a", "we", "that", "is", "in", "it", "i", "you", "for", "so", "on", "this", "be",
      "have", "with", "but", "not", "are", "was", "they", "just", "think", "what", "at", "about", "can", "if",
      "do", "like", "there", "would", "one", "all", "know", "from", "or", "yeah", "okay", "well", "right", "then",
      "some", "more", "which", "also", "really", "will", "get", "need", "should", "could", "make", "because",
      "were", "been", "into", "maybe", "other", "going", "good", "time", "see", "people", "now", "next", "first",
      "thing", "things", "way", "point", "work", "much", "said", "say", "mean", "look", "use", "two", "still",
      "new", "sure", "any", "kind", "sort", "part", "lot", "want", "actually", "mm", "um", "uh", "yes", "bit",
      "idea", "question", "meeting", "team", "week", "group", "case", "fact", "problem", "number", "probably",
      "different", "same", "thought", "something", "anything", "everything", "back", "here", "only", "even",
      "those", "these", "them", "their", "our", "us", "how", "when", "where", "why", "who", "very", "quite",
      "again", "already", "another", "around", "because", "before", "after", "both", "each", "few", "however",
      "later", "least", "less", "long", "main", "might", "most", "must", "never", "often", "once", "perhaps",
      "rather", "since", "such", "than", "though", "through", "under", "until", "while", "within", "without",
      "agree", "plan", "decide", "discuss", "report", "data", "result", "change", "issue", "option", "cost",
      "design", "system", "budget", "date", "email", "list", "note", "order", "price", "project", "review",
      "schedule", "start", "support", "test", "user", "value", "version"};
  return w;
}

// Question templates; "{}" is replaced by the content terms.
const std::vector<std::string>& templates() {
  static const std::vector<std::string> t = {
      "what did the team decide about {}",
      "summarize the discussion on {}",
      "why was {} brought up",
      "how does {} affect the plan",
      "when will {} take place",
      "who raised the issue of {}",
      "what was said about {}",
      "what are the main concerns with {}",
      "is there any update on {}",
      "what did they conclude regarding {}",
      "can you remind me what {} was about",
      "what options were considered for {}",
      "did anyone object to {}",
      "what is the status of {}",
      "give me the key points on {}",
      "what was agreed for {}"};
  return t;
}

std::string pseudo_word(sim::Rng& rng) {
  static const char* cons[] = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sh", "tr", "br"};
  static const char* vow[] = {"a", "e", "i", "o", "u", "ai", "ou"};
  const std::size_t syl = 2 + rng.uniform_int(3);
  std::string w;
  for (std::size_t i = 0; i < syl; ++i) {
    w += cons[rng.uniform_int(std::size(cons))];
    w += vow[rng.uniform_int(std::size(vow))];
  }
  if (rng.bernoulli(0.5)) w += cons[rng.uniform_int(12)];
  return w;
}

struct KnowledgeCfg {
  std::size_t chunks, chunk_words, topics, topic_vocab, key_terms;
  double key_fraction, topic_fraction, background_zipf, topic_zipf;
  double late_fraction = 0;
  std::size_t late_chunks() const {
    return static_cast<std::size_t>(std::llround(late_fraction * static_cast<double>(chunks)));
  }
};
struct QueryCfg {
  std::size_t per_user, key_terms, second_key_terms, topic_terms;
  std::size_t hot_chunks;
  double chunk_zipf, cold_prob, second_chunk_prob, paraphrase_prob, paraphrase_drop_prob, answer_words_mean, answer_words_sigma;
};

ParamSchema knowledge_schema() {
  ParamSchema s;
  s.integer("chunks_per_user", 100, "knowledge chunks per user (PerCache: a personal knowledge base)").range(1, 100000);
  s.integer("chunk_words", 100, "words per chunk (PerCache uses 100)").range(1, 100000);
  s.integer("topics", 8, "topics per user; chunks form contiguous topic sections").range(1, 10000);
  s.integer("topic_vocab", 60, "distinctive words per topic").range(1, 100000);
  s.integer("key_terms_per_chunk", 6, "distinctive key terms owned by each chunk").range(1, 1000);
  s.real("key_fraction", 0.12, "share of a chunk's words that are its key terms").range(0, 1);
  s.real("topic_fraction", 0.25, "share of a chunk's words drawn from its topic vocabulary").range(0, 1);
  s.real("background_zipf", 1.0, "Zipf exponent over common English words").non_negative();
  s.real("topic_zipf", 1.0, "Zipf exponent over a topic's vocabulary").non_negative();
  s.real("late_fraction", 0.0,
         "extra chunks that join the knowledge base during the trace, as a share of chunks_per_user (0: none). "
         "Each is an update of a hot chunk (same key terms, new content) appended after the initial chunks, "
         "added at a uniformly random time between the first and the last query; later queries about the "
         "updated chunk are answered from the update")
      .range(0, 10);
  return s;
}

ParamSchema query_schema() {
  ParamSchema s;
  s.integer("per_user", 20, "queries per user").range(0, 10000);
  s.integer("hot_chunks", 10, "chunks the user keeps asking about (repeated retrieval, PerCache fig. 3)")
      .range(1, 100000);
  s.real("chunk_zipf", 0.5, "Zipf exponent of popularity within the hot chunks").non_negative();
  s.real("cold_prob", 0.1, "probability that a target chunk is drawn uniformly from all chunks instead")
      .range(0, 1);
  s.real("second_chunk_prob", 0.8, "probability that a query also asks about a second chunk").range(0, 1);
  s.integer("key_terms", 2, "key terms of the primary chunk named by a query").range(1, 1000);
  s.integer("second_key_terms", 2, "key terms of the second chunk named by a query").range(1, 1000);
  s.integer("topic_terms", 1, "topic words named by a query").range(0, 1000);
  s.real("paraphrase_prob", 0.1, "probability that a query re-asks an earlier one in other words").range(0, 1);
  s.real("paraphrase_drop_prob", 0.0, "probability that a paraphrase drops one content term").range(0, 1);
  s.real("answer_words_mean", 60, "mean reference answer length").range(0, 10000).positive().with_unit("words");
  s.real("answer_words_sigma", 0.5, "log-normal sigma of the answer length").range(0, 4);
  return s;
}

ParamSchema embedder_schema() {
  ParamSchema s;
  EmbedderConfig d;
  s.integer("dim", d.dim, "embedding dimension").range(2, 65536);
  s.integer("char_ngram_min", d.char_ngram_min, "shortest character n-gram").range(1, 64);
  s.integer("char_ngram_max", d.char_ngram_max, "longest character n-gram").range(1, 64);
  s.real("word_weight", d.word_weight, "weight of word features vs character n-grams").range(0, 1);
  s.real("anisotropy", d.anisotropy, "shared-direction weight a: cos = a + (1 - a) * raw_cos").range(0, 0.99);
  return s;
}

ParamSchema retrieval_schema() {
  ParamSchema s;
  s.text("mode", "hybrid", "bm25 | dense | hybrid").in({"bm25", "dense", "hybrid"});
  s.text("fusion", "rrf", "hybrid fusion: rrf (reciprocal rank) | weighted (min-max score sum)")
      .in({"rrf", "weighted"});
  s.real("rrf_k", 60, "reciprocal rank fusion constant").positive();
  s.real("alpha", 0.5, "weighted fusion: weight of BM25").range(0, 1);
  s.integer("k", 3, "chunks retrieved per query and stored in the trace (0: none)").range(0, 10000);
  return s;
}

template <class T>
T section(const Params& p, const std::string& name, const ParamSchema& schema, T (*read)(const Params&)) {
  Params sub(p.node(name), schema, p.source_of(name));
  return read(sub);
}

KnowledgeCfg read_knowledge(const Params& p) {
  return {static_cast<std::size_t>(p.integer("chunks_per_user")), static_cast<std::size_t>(p.integer("chunk_words")),
          static_cast<std::size_t>(p.integer("topics")),          static_cast<std::size_t>(p.integer("topic_vocab")),
          static_cast<std::size_t>(p.integer("key_terms_per_chunk")), p.real("key_fraction"),
          p.real("topic_fraction"), p.real("background_zipf"), p.real("topic_zipf"), p.real("late_fraction")};
}
QueryCfg read_queries(const Params& p) {
  QueryCfg q;
  auto n = [&](const char* k) { return static_cast<std::size_t>(p.integer(k)); };
  q.per_user = n("per_user");
  q.key_terms = n("key_terms");
  q.second_key_terms = n("second_key_terms");
  q.topic_terms = n("topic_terms");
  q.hot_chunks = n("hot_chunks");
  q.chunk_zipf = p.real("chunk_zipf");
  q.cold_prob = p.real("cold_prob");
  q.second_chunk_prob = p.real("second_chunk_prob");
  q.paraphrase_prob = p.real("paraphrase_prob");
  q.paraphrase_drop_prob = p.real("paraphrase_drop_prob");
  q.answer_words_mean = p.real("answer_words_mean");
  q.answer_words_sigma = p.real("answer_words_sigma");
  return q;
}
EmbedderConfig read_embedder(const Params& p) {
  EmbedderConfig e;
  e.dim = static_cast<int>(p.integer("dim"));
  e.char_ngram_min = static_cast<int>(p.integer("char_ngram_min"));
  e.char_ngram_max = static_cast<int>(p.integer("char_ngram_max"));
  e.word_weight = p.real("word_weight");
  e.anisotropy = p.real("anisotropy");
  if (e.char_ngram_max < e.char_ngram_min) p.fail("char_ngram_max", "must be >= char_ngram_min");
  return e;
}
struct RetrievalSection {
  RetrieverConfig cfg;
  std::size_t k;
};
RetrievalSection read_retrieval(const Params& p) {
  RetrievalSection r;
  r.cfg.mode = parse_retrieval_mode(p.text("mode"));
  r.cfg.fusion = parse_fusion(p.text("fusion"));
  r.cfg.rrf_k = p.real("rrf_k");
  r.cfg.alpha = p.real("alpha");
  r.k = static_cast<std::size_t>(p.integer("k"));
  return r;
}

struct ChunkInfo {
  std::size_t topic;
  std::vector<std::string> keys;
  std::vector<std::string> words;
};

struct QueryPlan {
  std::size_t primary, template_id;
  std::vector<std::size_t> others;
  std::vector<std::string> terms;
};

std::string user_id(std::size_t index) { return fmt::format("gen{:03d}", index); }

UserTrace generate_user(std::size_t index, std::uint64_t seed, const KnowledgeCfg& kc, const QueryCfg& qc,
                        const std::vector<double>& arrivals) {
  const std::string base = fmt::format("traces/generator/user{}", index);
  sim::Rng vocab_rng(seed, 0, base, "vocab"), chunk_rng(seed, 0, base, "chunks"), query_rng(seed, 0, base, "queries");
  UserTrace u;
  u.user_id = user_id(index);

  // Vocabulary: unique pseudo-words for topics and chunk key terms.
  std::set<std::string> used(background_words().begin(), background_words().end());
  auto fresh = [&] {
    for (;;) {
      std::string w = pseudo_word(vocab_rng);
      if (used.insert(w).second) return w;
    }
  };
  std::vector<std::vector<std::string>> topic_vocab(kc.topics);
  for (auto& tv : topic_vocab)
    for (std::size_t i = 0; i < kc.topic_vocab; ++i) tv.push_back(fresh());
  for (std::size_t t = 0; t < kc.topics; ++t) u.topics.push_back(fmt::format("{} {}", topic_vocab[t][0], topic_vocab[t][1]));

  const sim::ZipfSampler bg(background_words().size(), kc.background_zipf);
  const sim::ZipfSampler tz(kc.topic_vocab, kc.topic_zipf);
  std::vector<ChunkInfo> chunks(kc.chunks);
  for (std::size_t c = 0; c < kc.chunks; ++c) {
    ChunkInfo& ci = chunks[c];
    ci.topic = c * kc.topics / kc.chunks;
    for (std::size_t i = 0; i < kc.key_terms; ++i) ci.keys.push_back(fresh());
    for (std::size_t w = 0; w < kc.chunk_words; ++w) {
      const double r = chunk_rng.uniform();
      if (r < kc.key_fraction)
        ci.words.push_back(ci.keys[chunk_rng.uniform_int(ci.keys.size())]);
      else if (r < kc.key_fraction + kc.topic_fraction)
        ci.words.push_back(topic_vocab[ci.topic][tz.sample(chunk_rng)]);
      else
        ci.words.push_back(background_words()[bg.sample(chunk_rng)]);
    }
    u.chunks.push_back(Chunk{join(ci.words, " "), 0, {}});
  }

  // Popularity: a small hot set (a random sample of chunks, so it spans topics)
  // with Zipf popularity inside, plus uniform "cold" picks over all chunks.
  std::vector<std::size_t> perm(kc.chunks);
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  query_rng.shuffle(perm);
  const sim::ZipfSampler pop(std::min(qc.hot_chunks, kc.chunks), qc.chunk_zipf);
  auto pick_chunk = [&] {
    if (query_rng.bernoulli(qc.cold_prob)) return static_cast<std::size_t>(query_rng.uniform_int(kc.chunks));
    return perm[pop.sample(query_rng)];
  };
  const std::size_t n_templates = templates().size();

  // Late chunks (knowledge.late_fraction): updates of the hot chunks, most popular first, appended
  // after the initial chunks (so initial chunk ids do not change) and added at random times between
  // the first and the last query. Own random stream: with late_fraction 0 nothing here runs and the
  // output is unchanged.
  std::vector<std::size_t> update_of;              // late chunk j updates chunk update_of[j]
  std::vector<std::vector<std::size_t>> updates(kc.chunks);  // chunk -> its late chunks (by added_s)
  if (const std::size_t n_late = kc.late_chunks(); n_late > 0) {
    sim::Rng late_rng(seed, 0, base, "late");
    const std::size_t hot = std::min(qc.hot_chunks, kc.chunks);
    std::vector<double> times;
    const double t0 = arrivals.empty() ? 0.0 : arrivals.front(), t1 = arrivals.empty() ? 0.0 : arrivals.back();
    for (std::size_t j = 0; j < n_late; ++j) times.push_back(t0 + late_rng.uniform() * (t1 - t0));
    std::sort(times.begin(), times.end());
    for (std::size_t j = 0; j < n_late; ++j) {
      const std::size_t b = perm[j % hot];
      ChunkInfo ci;
      ci.topic = chunks[b].topic;
      // Same subject (the base chunk's key terms), new content (as many new key terms).
      std::vector<std::string> fresh_keys;
      for (std::size_t i = 0; i < kc.key_terms; ++i) fresh_keys.push_back(fresh());
      ci.keys = chunks[b].keys;
      for (std::size_t w = 0; w < kc.chunk_words; ++w) {
        const double r = late_rng.uniform();
        if (r < kc.key_fraction) {
          const auto& from = late_rng.bernoulli(0.5) ? chunks[b].keys : fresh_keys;
          ci.words.push_back(from[late_rng.uniform_int(from.size())]);
        } else if (r < kc.key_fraction + kc.topic_fraction) {
          ci.words.push_back(topic_vocab[ci.topic][tz.sample(late_rng)]);
        } else {
          ci.words.push_back(background_words()[bg.sample(late_rng)]);
        }
      }
      Chunk c{join(ci.words, " "), 0, {}};
      c.added_s = std::max(times[j], 1e-3);  // strictly after the start: "0" means present from the start
      u.chunks.push_back(std::move(c));
      updates[b].push_back(chunks.size());
      chunks.push_back(std::move(ci));
      update_of.push_back(b);
    }
  }
  // The newest version of chunk c present at time t (c itself when it has no arrived update).
  auto current = [&](std::size_t c, double t) {
    std::size_t out = c;
    if (c < updates.size())
      for (std::size_t l : updates[c])
        if (u.chunks[l].added_s <= t) out = l;
    return out;
  };

  auto pick_distinct = [&](const std::vector<std::string>& from, std::size_t n) {
    std::vector<std::string> pool = from;
    query_rng.shuffle(pool);
    pool.resize(std::min(n, pool.size()));
    return pool;
  };

  std::vector<QueryPlan> plans;
  for (std::size_t i = 0; i < qc.per_user; ++i) {
    QueryPlan qp;
    Query q;
    if (i > 0 && query_rng.bernoulli(qc.paraphrase_prob)) {
      const QueryPlan& src = plans[query_rng.uniform_int(plans.size())];
      qp = src;
      // Another template, the same content reordered; optionally one term dropped.
      qp.template_id = (src.template_id + 1 + query_rng.uniform_int(n_templates - 1)) % n_templates;
      query_rng.shuffle(qp.terms);
      if (qp.terms.size() > 1 && query_rng.bernoulli(qc.paraphrase_drop_prob)) qp.terms.pop_back();
      q.kind = "paraphrase";
    } else {
      qp.primary = pick_chunk();
      qp.template_id = query_rng.uniform_int(n_templates);
      qp.terms = pick_distinct(chunks[qp.primary].keys, qc.key_terms);
      if (query_rng.bernoulli(qc.second_chunk_prob) && kc.chunks > 1) {
        std::size_t other = qp.primary;
        while (other == qp.primary) other = pick_chunk();
        qp.others.push_back(other);
        auto extra = pick_distinct(chunks[other].keys, qc.second_key_terms);
        qp.terms.insert(qp.terms.end(), extra.begin(), extra.end());
      }
      auto topical = pick_distinct(topic_vocab[chunks[qp.primary].topic], qc.topic_terms);
      qp.terms.insert(qp.terms.end(), topical.begin(), topical.end());
      query_rng.shuffle(qp.terms);
      q.kind = "generated";
    }
    std::string content;
    for (std::size_t t = 0; t < qp.terms.size(); ++t) {
      if (t) content += (t + 1 == qp.terms.size()) ? " and " : " ";
      content += qp.terms[t];
    }
    const std::string& tpl = templates()[qp.template_id];
    const auto at = tpl.find("{}");
    q.text = tpl.substr(0, at) + content + tpl.substr(at + 2) + "?";
    q.topic = static_cast<std::int32_t>(chunks[qp.primary].topic);
    const double at_s = i < arrivals.size() ? arrivals[i] : 0.0;
    q.relevant.push_back(static_cast<std::int32_t>(qp.primary));
    for (auto o : qp.others) q.relevant.push_back(static_cast<std::int32_t>(o));
    if (!update_of.empty()) {
      // Arrived updates of the targets are relevant too (they carry the newest content).
      std::vector<std::int32_t> extra;
      for (auto r : q.relevant)
        if (const std::size_t cur = current(static_cast<std::size_t>(r), at_s); cur != static_cast<std::size_t>(r))
          extra.push_back(static_cast<std::int32_t>(cur));
      q.relevant.insert(q.relevant.end(), extra.begin(), extra.end());
    }
    std::sort(q.relevant.begin(), q.relevant.end());

    // The reference answer restates a span of the primary chunk (continuing into the next ones).
    const double mu = std::log(qc.answer_words_mean) - 0.5 * qc.answer_words_sigma * qc.answer_words_sigma;
    // Capped at 100x the largest allowed mean, so a long tail cannot exhaust memory.
    const double words = std::min(query_rng.lognormal(mu, qc.answer_words_sigma), 1e6);
    const std::size_t len = std::max<std::size_t>(1, static_cast<std::size_t>(std::lround(words)));
    std::vector<std::string> ans;
    // (From the newest arrived version of the primary chunk: an update supersedes it.)
    std::size_t c = current(qp.primary, at_s), w = query_rng.uniform_int(kc.chunk_words);
    while (ans.size() < len) {
      ans.push_back(chunks[c].words[w]);
      if (++w == kc.chunk_words) {
        w = 0;
        if (c < kc.chunks) c = (c + 1) % kc.chunks;  // an update chunk wraps onto itself
      }
    }
    q.answer_text = join(ans, " ") + ".";
    plans.push_back(std::move(qp));
    u.queries.push_back(std::move(q));
  }
  return u;
}

}  // namespace

const ParamSchema& generator_schema() {
  static const ParamSchema s = [] {
    ParamSchema x;
    x.integer("seed", 1, "random seed (the --seed option overrides it)").non_negative();
    x.integer("users", 5, "number of users (PerCache evaluates 5 users per dataset)").range(1, 100000);
    x.text("tokenizer", "", "SentencePiece model for exact token counts; empty: documented estimate").input_path();
    x.node("knowledge", "knowledge base: chunks, topics, vocabulary");
    x.node("queries", "query stream: popularity, paraphrases, answers");
    x.node("arrival", "sparse arrival model and idle windows");
    x.node("embedder", "built-in hashed TF-IDF n-gram embedder");
    x.node("retrieval", "retrieval stored with each query");
    return x;
  }();
  return s;
}

// Each parameter has its own bound; their product must also fit in memory, or a config could
// exhaust it: the texts and float32 embeddings of what is held at once, every user when the
// trace is built in memory, one user when it streams to a file (`mobisim trace generate`).
void check_trace_size(const Params& p, const KnowledgeCfg& kc, const QueryCfg& qc, const EmbedderConfig& ec,
                      bool whole_trace_held) {
  constexpr double kMaxWords = 2e8, kMaxEmbeddingValues = 5e8;
  const double users = whole_trace_held ? static_cast<double>(p.integer("users")) : 1.0;
  const char* factor = whole_trace_held ? "users x " : "";
  const char* held = whole_trace_held ? "" : " (per user)";
  const double words = users * static_cast<double>(kc.chunks) * static_cast<double>(kc.chunk_words);
  if (words > kMaxWords)
    p.fail("users", fmt::format("{}knowledge.chunks_per_user x knowledge.chunk_words = {:.3g} words exceeds "
                                "the limit of {:.3g}{}",
                                factor, words, kMaxWords, held));
  const double values = users * static_cast<double>(kc.chunks + qc.per_user) * ec.dim;
  if (values > kMaxEmbeddingValues)
    p.fail("users", fmt::format("{}(chunks_per_user + queries.per_user) x embedder.dim = {:.3g} embedding "
                                "values exceeds the limit of {:.3g}{}",
                                factor, values, kMaxEmbeddingValues, held));
}

namespace {

void generate_users(const Params& p, std::uint64_t seed, const GeneratorBegin& begin, const GeneratorSink& sink,
                    bool whole_trace_held) {
  const KnowledgeCfg kc = section(p, "knowledge", knowledge_schema(), &read_knowledge);
  const QueryCfg qc = section(p, "queries", query_schema(), &read_queries);
  const ArrivalConfig ac = section(p, "arrival", arrival_schema(), &arrival_from_params);
  const EmbedderConfig ec = section(p, "embedder", embedder_schema(), &read_embedder);
  const RetrievalSection rs = section(p, "retrieval", retrieval_schema(), &read_retrieval);
  if (kc.key_fraction + kc.topic_fraction > 1.0)
    p.fail("knowledge", fmt::format("key_fraction + topic_fraction = {} exceeds 1", kc.key_fraction + kc.topic_fraction));
  check_trace_size(p, kc, qc, ec, whole_trace_held);

  auto tok = make_tokenizer(p.text("tokenizer"));
  EnrichOptions eo;
  eo.tokenizer = tok.get();
  eo.embed = true;
  eo.embedder = ec;
  eo.retrieval = rs.cfg;
  eo.retrieve_k = rs.k;

  RagTrace t;  // meta only: users go to the sink as they are made
  t.meta.source = "generator";
  t.meta.chunker = "words";
  t.meta.chunk_words = static_cast<std::int32_t>(kc.chunk_words);
  t.meta.arrival_model = fmt::format("{}; seed={}", ac.describe(), seed);
  describe_enrichment(t.meta, eo);
  YAML::Node resolved = p.resolved();
  resolved["seed"] = seed;
  for (const char* sec : {"knowledge", "queries", "arrival", "embedder", "retrieval"}) {
    static const std::map<std::string, ParamSchema> schemas = {
        {"knowledge", knowledge_schema()}, {"queries", query_schema()}, {"arrival", arrival_schema()},
        {"embedder", embedder_schema()},   {"retrieval", retrieval_schema()}};
    resolved[sec] = Params(p.node(sec), schemas.at(sec), p.source_of(sec)).resolved();
  }
  // late_fraction is recorded only when used: traces generated without late chunks keep the
  // params_yaml (and so the bytes) they had before the option existed.
  if (kc.late_fraction == 0.0) resolved["knowledge"].remove("late_fraction");
  t.meta.params_yaml = yaml_to_string(resolved);

  const std::size_t users = static_cast<std::size_t>(p.integer("users"));
  begin(t.meta, users, kc.late_chunks() > 0);
  for (std::size_t i = 0; i < users; ++i) {
    // Arrivals first (their stream depends only on the user id), so late chunks can be timed.
    sim::Rng arr(seed, 0, "traces/arrival/" + user_id(i), "gaps");
    const auto arrivals = sample_arrivals(qc.per_user, ac, arr);
    UserTrace u = generate_user(i, seed, kc, qc, arrivals);
    for (std::size_t q = 0; q < u.queries.size(); ++q) u.queries[q].arrival_s = arrivals[q];
    u.idle_windows = idle_windows(arrivals, ac);
    enrich_user(u, eo);
    if (kc.late_chunks() > 0 && rs.k > 0) {
      // enrich_user ranked all chunks; a query may only retrieve chunks already added. Re-rank with
      // the same retriever (embedder and BM25 fitted on the final knowledge base, as enrich_user's)
      // and keep the first k present ones.
      std::vector<std::string> texts;
      for (const auto& c : u.chunks) texts.push_back(c.text);
      const Retriever r(texts, {}, rs.cfg, ec);
      const std::vector<float> none;
      for (auto& q : u.queries) {
        q.retrieved.clear();
        for (const Hit& h : r.retrieve(q.text, rs.cfg.mode == RetrievalMode::kBm25 ? none : q.embedding,
                                       u.chunks.size())) {
          if (!chunk_present(u, static_cast<std::size_t>(h.chunk), q.arrival_s)) continue;
          q.retrieved.push_back(h.chunk);
          if (q.retrieved.size() == rs.k) break;
        }
      }
    }
    sink(std::move(u));
  }
}

}  // namespace

void generate_rag_trace_streaming(const Params& p, std::uint64_t seed, const GeneratorBegin& begin,
                                  const GeneratorSink& sink) {
  generate_users(p, seed, begin, sink, false);
}

RagTrace generate_rag_trace(const Params& p, std::uint64_t seed) {
  RagTrace t;
  generate_users(
      p, seed,
      [&](const RagTraceMeta& meta, std::size_t users, bool) {
        t.meta = meta;
        t.users.reserve(users);
      },
      [&](UserTrace&& u) { t.users.push_back(std::move(u)); }, true);
  return t;
}

void generate_rag_trace_streaming_from_yaml(const YAML::Node& root, const std::string& name,
                                            std::optional<std::uint64_t> seed, const GeneratorBegin& begin,
                                            const GeneratorSink& sink) {
  Params p(root, generator_schema(), ConfigSource{std::make_shared<std::string>(name), ""}, {});
  generate_rag_trace_streaming(p, seed ? *seed : static_cast<std::uint64_t>(p.integer("seed")), begin, sink);
}

RagTrace generate_rag_trace_from_yaml(const YAML::Node& root, const std::string& name,
                                      std::optional<std::uint64_t> seed) {
  Params p(root, generator_schema(), ConfigSource{std::make_shared<std::string>(name), ""}, {});
  return generate_rag_trace(p, seed ? *seed : static_cast<std::uint64_t>(p.integer("seed")));
}

}  // namespace mobisim::traces
