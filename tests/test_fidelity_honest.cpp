// Issue 38: the honest fidelity accounting. A validation point reading a fitted value must be marked
// derived (and then counts in no median); a statement group counts once; a range scores against its
// midpoint in the medians; the headline median is per document. Every expected number is worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "experiments/fidelity/fidelity.h"
#include "experiments/fidelity/registry.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim {
namespace {

using namespace experiments::fidelity;
using testing::TempDir;
using testing::write_text;

const std::string kRegistry = std::string(MOBISIM_SOURCE_DIR) + "/experiments/published";

std::string header() { return std::string("document: test\nset: t\npoints:\n"); }

std::string calibration_point() {
  return std::string(
      "  - {id: t.cal, source: x, quantity: q, unit: s, role: calibration, published: 1, fitted: [device.x],\n"
      "     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n");
}

std::string reading_point(const std::string& extra) {
  std::string s("  - {id: t.same, source: x, quantity: q, unit: s, role: validation, published: 2,");
  s.append(extra);
  s.append("\n     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n");
  return s;
}

TEST(FidelityHonest, AValidationPointReadingAFittedColumnIsRefusedUnlessDerived) {
  TempDir dir("fidelity-honest");
  std::string body = header();
  body.append(calibration_point()).append(reading_point(""));
  write_text(dir.file("t.yaml"), body);
  try {
    load_registry(dir.path().string());
    ADD_FAILURE() << "an unmarked validation point reading a fitted value was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("t.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("t.same"), std::string::npos) << what;
    EXPECT_NE(what.find("t.cal"), std::string::npos) << what;
    EXPECT_NE(what.find("derived_from"), std::string::npos) << what;
  }
  EXPECT_THROW(load_registry_file(dir.file("t.yaml")), ConfigError);  // the file alone too
  // Marked: accepted, classed derived.
  body = header();
  body.append(calibration_point()).append(reading_point(" derived_from: [t.cal],"));
  write_text(dir.file("t.yaml"), body);
  const auto points = load_registry(dir.path().string());
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].point_class(), "calibration");
  EXPECT_EQ(points[1].point_class(), "derived");
  // derived_from must name a calibration point of the registry.
  body = header();
  body.append(calibration_point()).append(reading_point(" derived_from: [t.nothing],"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);
}

TEST(FidelityHonest, StatementGroupsNeedExactlyOneRepresentative) {
  TempDir dir("fidelity-honest-groups");
  auto point = [](const std::string& id, const std::string& extra) {
    std::string s("  - {id: ");
    s.append(id).append(", source: x, quantity: q, unit: s, role: validation, published: 2, ").append(extra);
    s.append(" experiment: e.yaml, extract: {dataset: /summary, where: {device: ").append(id).append("}, column: c}}\n");
    return s;
  };
  std::string body = header();
  body.append(point("t.a", "statement: g,")).append(point("t.b", "statement: g,"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);  // none
  body = header();
  body.append(point("t.a", "statement: g, representative: true,")).append(point("t.b", "statement: g, representative: true,"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);  // two
  body = header();
  body.append(point("t.a", "representative: true,"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);  // a representative without its statement
  body = header();
  body.append(point("t.a", "statement: g, representative: true,")).append(point("t.b", "statement: g,"));
  write_text(dir.file("t.yaml"), body);
  const auto points = load_registry(dir.path().string());
  EXPECT_TRUE(points[0].counted());
  EXPECT_FALSE(points[1].counted());
}

// A range's midpoint error, worked by hand: [650, 900] has midpoint 775.
TEST(FidelityHonest, MidpointErrorOfARange) {
  Point r;
  r.kind = PublishedKind::kRange;
  r.lo = 650;
  r.hi = 900;
  EXPECT_EQ(relative_error(r, 700), 0.0);                       // inside: no distance
  EXPECT_NEAR(midpoint_error(r, 700), (700.0 - 775.0) / 775.0, 1e-12);  // -9.677%
  EXPECT_NEAR(midpoint_error(r, 700), -0.0967741935483871, 1e-12);
  EXPECT_NEAR(midpoint_error(r, 1000), 225.0 / 775.0, 1e-12);
  Point v;
  v.kind = PublishedKind::kValue;
  v.published = 4.2;
  EXPECT_NEAR(midpoint_error(v, 3.5), relative_error(v, 3.5), 1e-15);  // a value: the same error
  Point over;                                                         // "over 10": no middle
  over.kind = PublishedKind::kRange;
  over.lo = 10;
  over.hi = std::numeric_limits<double>::infinity();
  EXPECT_EQ(midpoint_error(over, 25), 0.0);
  EXPECT_NEAR(midpoint_error(over, 5), -0.5, 1e-12);
}

struct Tiny {
  std::vector<Point> pts;
  std::vector<Evaluation> ev;
  void add(const std::string& id, const std::string& set, const std::string& role, double mid_error) {
    Point p;
    p.id = id;
    p.set_name = set;
    p.kind = PublishedKind::kValue;
    p.published = 1;
    p.role = role;
    if (role == "calibration") p.fitted = {"device.x"};
    pts.push_back(p);
    Evaluation e;
    e.rel_error = mid_error;
    e.mid_error = mid_error;
    ev.push_back(e);
  }
  std::vector<Evaluation>& bind() {
    for (std::size_t i = 0; i < ev.size(); ++i) ev[i].point = &pts[i];
    return ev;
  }
};

// Derived and interpolated points, and a statement group's other members, are in no median.
TEST(FidelityHonest, DerivedPointIsNotInTheMedianAndAGroupCountsOnce) {
  Tiny t;
  t.add("a.v1", "a", "validation", 0.02);
  t.add("a.v2", "a", "validation", -0.08);
  t.add("a.v3", "a", "validation", 0.30);
  t.add("a.derived", "a", "validation", 0.001);  // would pull the median down
  t.pts.back().derived_from = {"a.cal"};
  t.add("a.interp", "a", "validation", 0.003);
  t.pts.back().interpolated_between = {"a.cal", "a.cal2"};
  t.add("a.cal", "a", "calibration", 0.0);
  t.add("a.rep", "a", "validation", 0.50);   // one statement on two phones: counts once
  t.pts.back().statement = "g";
  t.pts.back().representative = true;
  t.add("a.other", "a", "validation", 0.004);
  t.pts.back().statement = "g";
  const HonestSummary h = honest_summary(t.bind());
  // Counted: |0.02|, |-0.08|, 0.30, 0.50 -> median (0.08 + 0.30) / 2 = 0.19.
  EXPECT_EQ(h.seed.n, 4u);
  EXPECT_NEAR(h.seed.median, 0.19, 1e-12);
  EXPECT_EQ(h.seed.within_10, 2u);
  EXPECT_EQ(h.derived.n, 1u);
  EXPECT_EQ(h.interpolated.n, 1u);
  EXPECT_EQ(h.sensitivity.n, 1u);
  EXPECT_NEAR(h.sensitivity.median, 0.004, 1e-12);
  // Without the rules the median of the seven validation-role points would be 0.02.
  EXPECT_EQ(h.external.n, 0u);
}

// The headline median per document and overall, and the external set apart from the seeds.
TEST(FidelityHonest, HeadlineMedianPerDocument) {
  Tiny t;
  t.add("a.h1", "a", "validation", 0.10);
  t.pts.back().headline = true;
  t.add("a.h2", "a", "validation", -0.30);
  t.pts.back().headline = true;
  t.add("a.x", "a", "validation", 0.90);
  t.add("b.h1", "b", "validation", 0.04);
  t.pts.back().headline = true;
  t.add("b.h2", "b", "validation", 0.06);
  t.pts.back().headline = true;
  t.add("b.h3", "b", "validation", -0.50);
  t.pts.back().headline = true;
  t.add("b.hcal", "b", "calibration", 0.0);  // a fitted headline number: in no median
  t.pts.back().headline = true;
  t.add("ext.1", "ext", "validation", 0.07);
  t.pts.back().external = true;
  t.add("ext.2", "ext", "validation", 0.21);
  t.pts.back().external = true;
  const HonestSummary h = honest_summary(t.bind());
  ASSERT_EQ(h.documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(h.headline.at("a").n, 2u);
  EXPECT_NEAR(h.headline.at("a").median, 0.20, 1e-12);   // |0.10|, |-0.30|
  EXPECT_EQ(h.headline.at("b").n, 3u);
  EXPECT_NEAR(h.headline.at("b").median, 0.06, 1e-12);   // 0.04, 0.06, 0.50
  EXPECT_EQ(h.headline_all.n, 5u);
  EXPECT_NEAR(h.headline_all.median, 0.10, 1e-12);       // 0.04 0.06 0.10 0.30 0.50
  EXPECT_EQ(h.headline_tagged, 6u);
  EXPECT_EQ(h.headline_not_counted, 1u);
  EXPECT_EQ(h.seed.n, 6u);
  EXPECT_NEAR(h.seed.median, (0.10 + 0.30) / 2, 1e-12);  // 0.04 0.06 0.10 0.30 0.50 0.90
  EXPECT_EQ(h.external.n, 2u);
  EXPECT_NEAR(h.external.median, 0.14, 1e-12);
  const auto lines = h.lines();
  bool found = false;
  for (const auto& l : lines) found = found || l.find("headline b: median 6.0% over 3") != std::string::npos;
  EXPECT_TRUE(found);
}

// The registry itself: the points issue 38 names are classed as it says.
TEST(FidelityHonest, RegistryClassesTheNamedPoints) {
  const auto points = load_registry(kRegistry);
  auto find = [&](const std::string& id) -> const Point& {
    for (const auto& p : points)
      if (p.id == id) return p;
    throw Error("no point " + id);
  };
  for (const char* id : {"prefix.iphone.uncached_ttft_ms", "prefix.iphone.speedup", "percache.table1.prefill_share_pct",
                         "percache.table1.decode_share_pct"})
    EXPECT_EQ(find(id).point_class(), "derived") << id;
  for (const char* id : {"dynakv.table6.qwen_m_2k_ms", "dynakv.table6.qwen_m_4k_ms", "dynakv.table6.qwen_m_8k_ms",
                         "dynakv.table2.llama_s.within_2", "dynakv.table2.llama_s.within_4",
                         "dynakv.table2.llama_s.within_8"})
    EXPECT_EQ(find(id).point_class(), "interpolated") << id;
  EXPECT_FALSE(find("prefix.android.partial_recovery").counted());
  EXPECT_FALSE(find("percache.fig16.kv_hit_gain_pp").counted());  // 11.63 pp calibrates (its group's representative)
  EXPECT_FALSE(find("ondevice.pixel7.mllm.llama-3.2-3b.cpu.prefill").counted());
  EXPECT_TRUE(find("ondevice.pixel7.mllm.llama-3.2-3b.cpu.prefill").external);
  EXPECT_DOUBLE_EQ(find("coordgen.synth.fig10.speedup_vs_npu_eagle").hi, 1.80);
  std::size_t headline = 0;
  for (const auto& p : points) headline += p.headline ? 1 : 0;
  EXPECT_GE(headline, 10u);
}

}  // namespace
}  // namespace mobisim
