// BM25, the built-in embedder, hybrid fusion and the Retriever.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "sim/error.h"
#include "traces/embedder.h"
#include "traces/rag_trace.h"
#include "traces/retrieval.h"
#include "traces/text.h"

using namespace mobisim::traces;

TEST(Bm25, MatchesHandComputedScoresForToyCorpus) {
  // Corpus (N = 4): d0 "a b c", d1 "a a d", d2 "a e", d3 "f"; lengths 3,3,2,1, avgdl = 9/4.
  // df: a = 3, every other term = 1.
  //   idf(df=1) = ln(4 - 1 + 0.5) - ln(1 + 0.5) = ln(3.5/1.5) = ln(7/3) =: L
  //   idf(a)    = ln(1.5) - ln(3.5) = -L < 0  -> floored to epsilon * average_idf
  //   average_idf = (5L - L) / 6 = 2L/3,  idf(a) = 0.25 * 2L/3 = L/6
  // len_norm(d) = k1 (1 - b + b |d|/avgdl) = 1.5 (0.25 + |d|/3): 1.875 (|d|=3), 1.375 (2), 0.875 (1)
  // Query "a b": term weight idf * tf (k1+1) / (tf + len_norm):
  //   d0: (L/6 + L) * 2.5 / 2.875            = L * (7/6) * (20/23) = 70L/69
  //   d1: (L/6) * 2 * 2.5 / (2 + 1.875)      = (L/6) * (40/31)     = 20L/93
  //   d2: (L/6) * 2.5 / (1 + 1.375)          = (L/6) * (20/19)     = 10L/57
  //   d3: 0
  const std::vector<std::vector<std::string>> docs = {{"a", "b", "c"}, {"a", "a", "d"}, {"a", "e"}, {"f"}};
  Bm25 bm(docs);
  const double L = std::log(7.0 / 3.0);
  EXPECT_NEAR(bm.avgdl(), 2.25, 1e-15);
  EXPECT_NEAR(bm.average_idf(), 2 * L / 3, 1e-12);
  EXPECT_NEAR(bm.idf("a"), L / 6, 1e-12);
  EXPECT_NEAR(bm.idf("b"), L, 1e-12);
  EXPECT_EQ(bm.idf("zzz"), 0.0);
  const auto s = bm.scores({"a", "b"});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_NEAR(s[0], 70 * L / 69, 1e-12);  // 0.8595775395232501 (rank_bm25 gives the same)
  EXPECT_NEAR(s[1], 20 * L / 93, 1e-12);  // 0.1822145936316567
  EXPECT_NEAR(s[2], 10 * L / 57, 1e-12);  // 0.1486487474363515
  EXPECT_EQ(s[3], 0.0);
  // Repeated query tokens count again (rank_bm25 loops over the query list).
  const auto s2 = bm.scores({"b", "b"});
  EXPECT_NEAR(s2[0], 2 * L * 2.5 / 2.875, 1e-12);
}

TEST(Bm25, TermInExactlyHalfTheDocumentsHasZeroIdfNotEpsilon) {
  // N = 2, df = 1: ln(1.5) - ln(1.5) = 0, which rank_bm25 keeps (only idf < 0 is floored).
  Bm25 bm({{"x", "y"}, {"x", "z"}});
  EXPECT_EQ(bm.idf("y"), 0.0);
  // "x" is in both documents: ln(0.5) - ln(2.5) = -ln 5 < 0 -> epsilon * average_idf, where
  // average_idf = (-ln 5 + 0 + 0) / 3 is itself negative, so the floor is -ln(5)/12. rank_bm25
  // behaves the same way (its floor is not clamped at zero); we keep parity with it.
  EXPECT_NEAR(bm.idf("x"), -std::log(5.0) / 12, 1e-12);
}

TEST(Bm25, TopKBreaksTiesTowardsLowerIds) {
  const auto hits = top_k({1.0, 3.0, 3.0, 0.5}, 3);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].chunk, 1);
  EXPECT_EQ(hits[1].chunk, 2);
  EXPECT_EQ(hits[2].chunk, 0);
  EXPECT_EQ(top_k({1.0}, 5).size(), 1u);
}

TEST(Bm25, HybridFusionRanksByReciprocalRanks) {
  // BM25 for "cherry": only c1 matches -> ranks c1=1, c0=2, c2=3 (tie broken by id).
  // Dense (external embeddings): q.e = 0.6, 0.8, 1.0 -> ranks c2=1, c1=2, c0=3.
  // RRF (k=60): c1 = 1/61 + 1/62 > c2 = 1/63 + 1/61 > c0 = 1/62 + 1/63.
  const std::vector<std::string> texts = {"apple banana", "cherry", "apple pie"};
  const std::vector<std::vector<float>> emb = {{1, 0}, {0, 1}, {0.6f, 0.8f}};
  const std::vector<float> q = {0.6f, 0.8f};
  auto order = [&](RetrievalMode m, Fusion f) {
    RetrieverConfig c;
    c.mode = m;
    c.fusion = f;
    Retriever r(texts, emb, c);
    std::vector<int> out;
    for (const auto& h : r.retrieve("cherry", q, 3)) out.push_back(h.chunk);
    return out;
  };
  EXPECT_EQ(order(RetrievalMode::kBm25, Fusion::kRrf), (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(order(RetrievalMode::kDense, Fusion::kRrf), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(order(RetrievalMode::kHybrid, Fusion::kRrf), (std::vector<int>{1, 2, 0}));
  // Weighted (alpha 0.5, min-max): c0 = 0, c1 = 0.5*1 + 0.5*0.5 = 0.75, c2 = 0.5*0 + 0.5*1 = 0.5.
  EXPECT_EQ(order(RetrievalMode::kHybrid, Fusion::kWeighted), (std::vector<int>{1, 2, 0}));
  RetrieverConfig c;
  Retriever r(texts, emb, c);
  const auto hits = r.retrieve("cherry", q, 1);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_NEAR(hits[0].score, 1.0 / 61 + 1.0 / 62, 1e-15);
  // External embeddings: the retriever cannot embed new text itself.
  EXPECT_THROW(r.retrieve("cherry", {}, 1), mobisim::InputError);
  EXPECT_THROW(r.retrieve("cherry", {1, 0, 0}, 1), mobisim::InputError);
}

TEST(Bm25, RetrieverWithBuiltInEmbedderFindsTheChunkAboutTheQuery) {
  const std::vector<std::string> texts = {
      "The budget for the new laptops was approved by finance on Monday.",
      "We scheduled the presentation rehearsal for Friday afternoon in room 4.",
      "The remote control design uses a rubber case and a simple battery."};
  Retriever r(texts, {});
  ASSERT_TRUE(r.owns_embedder());
  const auto hits = r.retrieve("When is the presentation rehearsal?", {}, 2);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].chunk, 1);
  EXPECT_TRUE(Retriever({}, {}).retrieve("anything", {}, 3).empty());
}

TEST(Embed, DeterministicUnitLengthAndFixedDimension) {
  HashedEmbedder a, b;
  const std::string text = "When will the presentation rehearsal take place?";
  const auto x = a.embed(text), y = b.embed(text);
  ASSERT_EQ(x.size(), 512u);
  EXPECT_EQ(x, y);  // bit-identical
  EXPECT_NEAR(dot(x, x), 1.0, 1e-6);
  const auto e = a.embed("");
  EXPECT_NEAR(dot(e, e), 1.0, 1e-6);
  // Fitting changes weights but stays deterministic and normalised.
  a.fit({"the rehearsal is on friday", "the budget is approved"});
  b.fit({"the rehearsal is on friday", "the budget is approved"});
  EXPECT_EQ(a.embed(text), b.embed(text));
  EXPECT_NEAR(dot(a.embed(text), a.embed(text)), 1.0, 1e-6);
}

TEST(Embed, AnisotropyIsTheDocumentedAffineMapOfRawCosine) {
  EmbedderConfig raw_cfg;
  raw_cfg.anisotropy = 0.0;
  EmbedderConfig cal_cfg;  // default a = 0.5
  HashedEmbedder raw(raw_cfg), cal(cal_cfg);
  const std::string p = "When will the presentation rehearsal take place?";
  const std::string q = "Is time of presentation rehearsal given?";  // PerCache's 0.815 example pair
  const std::string u = "Who approved the budget for the new laptops?";
  const double r_pq = dot(raw.embed(p), raw.embed(q)), c_pq = dot(cal.embed(p), cal.embed(q));
  EXPECT_NEAR(c_pq, HashedEmbedder::calibrated_from_raw(r_pq, 0.5), 1e-6);
  const double c_pu = dot(cal.embed(p), cal.embed(u));
  // The paraphrase pair is clearly more similar than an unrelated question, and
  // both land in the range a neural embedder gives (0.5 - 0.9).
  EXPECT_GT(c_pq, c_pu + 0.1);
  EXPECT_GT(c_pq, 0.65);
  EXPECT_LT(c_pq, 0.9);
  EXPECT_GT(c_pu, 0.45);
  EXPECT_LT(c_pu, 0.7);
  EXPECT_NEAR(dot(cal.embed(p), cal.embed(p)), 1.0, 1e-6);
}

TEST(Embed, CharacterNgramsKeepMorphologicalVariantsClose) {
  HashedEmbedder e;
  EXPECT_GT(dot(e.embed("rehearsal schedule"), e.embed("rehearse scheduling")),
            dot(e.embed("rehearsal schedule"), e.embed("budget laptops")));
}

TEST(Embed, RejectsInvalidConfig) {
  EmbedderConfig c;
  c.dim = 1;
  EXPECT_THROW(HashedEmbedder{c}, mobisim::ConfigError);
  c = {};
  c.anisotropy = 1.0;
  EXPECT_THROW(HashedEmbedder{c}, mobisim::ConfigError);
}

TEST(Embed, WordSplitLowercasesAndDropsPunctuation) {
  EXPECT_EQ(words("Hello, World! It's 2024 — ok"),
            (std::vector<std::string>{"hello", "world", "it", "s", "2024", "\xe2\x80\x94", "ok"}));
  EXPECT_FALSE(has_words("  ?!  "));
}

TEST(Bm25, RetrieverForUserReproducesStoredEmbeddingsAndRetrieval) {
  RagTrace t;
  EmbedderConfig ec;
  ec.dim = 64;
  ec.anisotropy = 0.4;
  t.meta.embedder = ec.describe();
  t.meta.embedding_dim = ec.dim;
  ASSERT_TRUE(EmbedderConfig::parse(t.meta.embedder).has_value());
  EXPECT_EQ(EmbedderConfig::parse(t.meta.embedder)->anisotropy, 0.4);
  EXPECT_FALSE(EmbedderConfig::parse("Qwen3-Embedding-0.6B").has_value());
  UserTrace u;
  for (const char* s : {"the rehearsal is on friday", "the budget was approved", "laptops arrive next week"})
    u.chunks.push_back(Chunk{s, 5, {}});
  Retriever built(std::vector<std::string>{u.chunks[0].text, u.chunks[1].text, u.chunks[2].text}, {}, {}, ec);
  for (std::size_t i = 0; i < u.chunks.size(); ++i) u.chunks[i].embedding = built.chunk_embeddings()[i];
  const Retriever again = retriever_for_user(u, t.meta);
  EXPECT_EQ(again.chunk_embeddings(), built.chunk_embeddings());
  EXPECT_EQ(again.embed("when is the rehearsal"), built.embed("when is the rehearsal"));
  EXPECT_EQ(again.retrieve("budget approval", {}, 1).front().chunk, 1);
  // External model: stored vectors, queries must bring theirs.
  t.meta.embedder = "external-model";
  const Retriever ext = retriever_for_user(u, t.meta);
  EXPECT_FALSE(ext.owns_embedder());
  EXPECT_THROW(ext.retrieve("budget", {}, 1), mobisim::InputError);
  // No embeddings: BM25 only.
  t.meta.embedding_dim = 0;
  EXPECT_EQ(retriever_for_user(u, t.meta).retrieve("laptops", {}, 1).front().chunk, 2);
}

// The embedder's fast paths (incremental n-gram hashes, radix-sorted feature lists, the flat IDF
// table, fit_embed's single feature pass) against the documented definition written out plainly
// (traces/embedder.h): every float of every embedding must be the same.
namespace reference_embedder {
std::uint64_t fnv(std::string_view s, std::uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}
std::vector<std::pair<std::uint64_t, bool>> features(std::string_view text) {
  std::vector<std::pair<std::uint64_t, bool>> out;
  const std::uint64_t basis = 0xcbf29ce484222325ULL;
  for (const std::string& w : mobisim::traces::words(text)) {
    out.emplace_back(fnv(w, fnv("w:", basis)), true);
    const std::string wrapped = "<" + w + ">";
    for (std::size_t n = 3; n <= 5 && n <= wrapped.size(); ++n)
      for (std::size_t i = 0; i + n <= wrapped.size(); ++i)
        out.emplace_back(fnv(std::string_view(wrapped).substr(i, n), fnv("c:", basis)), false);
  }
  return out;
}
std::vector<float> embed(std::string_view text, const std::map<std::uint64_t, int>& df, std::size_t n_docs) {
  auto f = features(text);
  std::sort(f.begin(), f.end());
  const std::size_t buckets = 511;
  std::vector<double> wv(buckets, 0.0), cv(buckets, 0.0);
  for (std::size_t i = 0; i < f.size();) {
    std::size_t j = i;
    while (j < f.size() && f[j] == f[i]) ++j;
    const auto it = df.find(f[i].first);
    const double idf = std::log((1.0 + n_docs) / (1.0 + (it == df.end() ? 0.0 : it->second))) + 1.0;
    const double w = (1.0 + std::log(static_cast<double>(j - i))) * idf;
    (f[i].second ? wv : cv)[(f[i].first >> 1) % buckets] += ((f[i].first & 1) ? -1.0 : 1.0) * w;
    i = j;
  }
  auto norm = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
  };
  const double nw = norm(wv), nc = norm(cv);
  std::vector<double> raw(buckets, 0.0);
  for (std::size_t i = 0; i < buckets; ++i) {
    if (nw > 0) raw[i] += std::sqrt(0.5) * wv[i] / nw;
    if (nc > 0) raw[i] += std::sqrt(0.5) * cv[i] / nc;
  }
  const double nr = norm(raw);
  std::vector<float> out(512, 0.0f);
  out[0] = static_cast<float>(std::sqrt(0.5));
  for (std::size_t i = 0; i < buckets; ++i) out[i + 1] = static_cast<float>(raw[i] * (std::sqrt(0.5) / nr));
  return out;
}
}  // namespace reference_embedder

TEST(Embed, FastPathsGiveTheDocumentedEmbeddingBitForBit) {
  // A corpus with repeated words (tf > 1), long words, digits, capitals and short words (n-grams
  // longer than the wrapped word), big enough for the radix sort and several table growths.
  std::mt19937_64 rng(12);
  const std::vector<std::string> vocab = {"rehearsal", "Rehearse", "budget", "q3", "a", "of", "interdisciplinary",
                                          "meeting", "UI", "design", "remote", "control", "x", "2024", "voice",
                                          "recognition", "battery", "lcd", "Marketing", "kinetic"};
  std::vector<std::string> corpus;
  for (int d = 0; d < 40; ++d) {
    std::string doc;
    const int n = 5 + static_cast<int>(rng() % 400);
    for (int i = 0; i < n; ++i) doc += vocab[rng() % vocab.size()] + (i % 7 == 0 ? std::to_string(rng() % 1000) : "") + " ";
    corpus.push_back(doc);
  }
  std::map<std::uint64_t, int> df;
  for (const auto& doc : corpus) {
    std::set<std::uint64_t> uniq;
    for (const auto& [h, is_word] : reference_embedder::features(doc)) uniq.insert(h);
    for (auto h : uniq) ++df[h];
  }
  mobisim::traces::HashedEmbedder fitted;
  fitted.fit(corpus);
  mobisim::traces::HashedEmbedder fit_embedded;
  const auto vectors = fit_embedded.fit_embed(corpus);
  mobisim::traces::HashedEmbedder fitted_from_words;  // each distinct word's features once per document
  fitted_from_words.fit(mobisim::traces::TextWords::of(corpus));
  EXPECT_EQ(fitted_from_words.fitted_documents(), corpus.size());
  ASSERT_EQ(vectors.size(), corpus.size());
  std::vector<std::string> queries = corpus;
  queries.push_back("an unseen Query about zebras and rehearsals?");
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const auto want = reference_embedder::embed(queries[i], df, corpus.size());
    EXPECT_EQ(fitted.embed(queries[i]), want) << "text " << i;
    EXPECT_EQ(fit_embedded.embed(queries[i]), want) << "text " << i;
    EXPECT_EQ(fitted_from_words.embed(queries[i]), want) << "text " << i;
    if (i < vectors.size()) {
      EXPECT_EQ(vectors[i], want) << "document " << i;
    }
  }
}

TEST(Embed, DotsEqualDotBitForBitIncludingUnequalLengths) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(37);
  for (auto& x : q) x = u(rng);
  std::vector<std::vector<float>> rows;
  for (std::size_t len : {37u, 37u, 20u, 40u, 37u, 0u, 37u, 36u, 37u, 37u, 1u}) {
    rows.emplace_back(len);
    for (auto& x : rows.back()) x = u(rng);
  }
  const auto got = mobisim::traces::dots(q, rows);
  ASSERT_EQ(got.size(), rows.size());
  // The same rows by pointer, in another order (a cache's answered entries).
  std::vector<const std::vector<float>*> ptrs;
  for (std::size_t r = rows.size(); r-- > 0;) ptrs.push_back(&rows[r]);
  const auto by_ptr = mobisim::traces::dots(q, ptrs);
  ASSERT_EQ(by_ptr.size(), rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const double want = mobisim::traces::dot(q, rows[r]);
    EXPECT_EQ(std::memcmp(&got[r], &want, sizeof want), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(&by_ptr[rows.size() - 1 - r], &want, sizeof want), 0) << "row " << r << " by pointer";
  }
}

TEST(Embed, BlockedRowsEqualDotBitForBitWithSparseQueriesAndNonFiniteRows) {
  // Blocked scores skip the query's zero dimensions when every stored value is finite: on sparse
  // queries (with +0.0 and -0.0 entries, rows that cancel to zero, a zero query) each score must
  // still be dot()'s to the bit; once a row holds an infinity or a NaN, every dimension is visited
  // again and the scores are dot()'s (NaN included).
  using mobisim::traces::BlockedRows;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::bernoulli_distribution sparse(0.8);
  constexpr std::size_t dim = 53, n = 37;  // rows over three blocks, the last one partial
  std::vector<std::vector<float>> rows(n, std::vector<float>(dim));
  BlockedRows blocked(dim);
  for (std::size_t r = 0; r < n; ++r) {
    for (auto& x : rows[r]) x = u(rng);
    if (r == 5) rows[r] = rows[4];  // with q = -rows[4] below: sums that cancel
    blocked.set(r, rows[r]);
  }
  auto bits_equal = [](double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  auto check = [&](const std::vector<float>& q, const char* what) {
    const auto got = blocked.dots(q, n);
    for (std::size_t r = 0; r < n; ++r)
      EXPECT_TRUE(bits_equal(got[r], mobisim::traces::dot(q, rows[r])))
          << what << ", row " << r << ": " << got[r] << " vs " << mobisim::traces::dot(q, rows[r]);
  };
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> q(dim);
    for (auto& x : q) x = sparse(rng) ? (u(rng) < 0 ? -0.0f : 0.0f) : u(rng);
    check(q, "sparse query");
  }
  std::vector<float> cancel(dim);
  for (std::size_t d = 0; d < dim; ++d) cancel[d] = -rows[4][d];
  check(cancel, "cancelling query");
  check(std::vector<float>(dim, 0.0f), "zero query");
  check(std::vector<float>(dim, -0.0f), "negative-zero query");
  rows[9][3] = std::numeric_limits<float>::infinity();
  rows[20][50] = std::numeric_limits<float>::quiet_NaN();
  blocked.set(9, rows[9]);
  blocked.set(20, rows[20]);
  std::vector<float> q(dim, 0.0f);
  q[0] = 0.5f;  // zero at the non-finite values: dot() gives NaN there, and so must the blocked scores
  const auto got = blocked.dots(q, n);
  EXPECT_TRUE(std::isnan(got[9]) && std::isnan(got[20]));
  check(q, "non-finite rows");
}

TEST(Embed, FirstWordsIsTheJoinOfTheFirstWhitespaceWords) {
  for (const std::string text : {"", "   ", "one", "  The budget,\twas\n\napproved  by finance. ", "a b c d e f"})
    for (std::size_t n : {0u, 1u, 2u, 4u, 100u}) {
      const auto ws = split_whitespace(text);
      EXPECT_EQ(first_words(text, n), join(ws, " ", 0, std::min(n, ws.size()))) << "'" << text << "' " << n;
    }
  EXPECT_EQ(first_words("  The budget,\twas\n approved", 3), "The budget, was");
}

TEST(Bm25, IndexFromTextWordsEqualsIndexFromTokenLists) {
  const std::vector<std::string> texts = {"The budget, the BUDGET and the laptops.", "", "rehearsal on Friday; budget later",
                                          "laptops laptops laptops arrive", "the the the"};
  std::vector<std::vector<std::string>> tokens;
  for (const auto& t : texts) tokens.push_back(words(t));
  const TextWords tw = TextWords::of(texts);
  ASSERT_EQ(tw.texts.size(), texts.size());
  EXPECT_EQ(tw.vocab, (std::vector<std::string>{"the", "budget", "and", "laptops", "rehearsal", "on", "friday", "later",
                                                "arrive"}));
  for (std::size_t d = 0; d < texts.size(); ++d) {
    std::vector<std::string> back;
    for (auto id : tw.texts[d]) back.push_back(tw.vocab[id]);
    EXPECT_EQ(back, tokens[d]) << "text " << d;
  }
  const Bm25 a(tokens), b(tw, Bm25::Params{});
  EXPECT_EQ(a.average_idf(), b.average_idf());
  EXPECT_EQ(a.avgdl(), b.avgdl());
  for (const char* t : {"the", "budget", "laptops", "friday", "zebra"}) EXPECT_EQ(a.idf(t), b.idf(t)) << t;
  for (const auto& q : {words("budget laptops"), words("the rehearsal the"), words("nothing known")})
    EXPECT_EQ(a.scores(q), b.scores(q));
}

TEST(Bm25, RetrieverFromStoredBuiltInEmbeddingsEqualsOneThatEmbedsTheChunks) {
  // 21 chunks: two full 8-chunk blocks of the dense scorer and a partial one.
  std::vector<std::string> texts;
  const char* topics[] = {"budget", "laptops", "rehearsal", "remote control", "battery", "marketing", "design"};
  for (int i = 0; i < 21; ++i)
    texts.push_back(std::string("notes ") + std::to_string(i) + " about the " + topics[i % 7] + " and the " +
                    topics[(i * 3) % 7] + (i % 2 ? " on Friday" : " next week"));
  const Retriever computed(texts, {});
  const TextWords tw = TextWords::of(texts);
  const Retriever stored = Retriever::with_builtin_embedder(texts, tw, computed.chunk_embeddings());
  const Retriever fitted_here = Retriever::with_builtin_embedder(texts, tw, {});
  EXPECT_EQ(fitted_here.chunk_embeddings(), computed.chunk_embeddings());
  ASSERT_TRUE(stored.owns_embedder());
  for (const char* q : {"when is the rehearsal", "battery design budget", "notes 17", ""}) {
    EXPECT_EQ(stored.embed(q), computed.embed(q)) << q;
    for (std::size_t k : {1u, 3u, 21u}) {
      const auto want = computed.retrieve(q, {}, k);
      for (const Retriever* r : {&stored, &fitted_here}) {
        const auto got = r->retrieve(q, {}, k);
        ASSERT_EQ(got.size(), want.size()) << q;
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].chunk, want[i].chunk) << q << " rank " << i;
          EXPECT_EQ(std::memcmp(&got[i].score, &want[i].score, sizeof(double)), 0) << q << " rank " << i;
        }
      }
    }
  }
  // Dense scores (a dense-only retriever returns them) equal dot() bit for bit.
  RetrieverConfig dense;
  dense.mode = RetrievalMode::kDense;
  const Retriever d = Retriever::with_builtin_embedder(texts, tw, computed.chunk_embeddings(), dense);
  const auto qe = d.embed("the budget on Friday");
  for (const auto& h : d.retrieve("", qe, texts.size())) {
    const double want = dot(qe, d.chunk_embeddings()[static_cast<std::size_t>(h.chunk)]);
    EXPECT_EQ(std::memcmp(&h.score, &want, sizeof want), 0) << "chunk " << h.chunk;
  }
}
