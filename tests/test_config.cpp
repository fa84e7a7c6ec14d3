// YAML parameters, plug-in registries and command-line overrides: every bad input is a clear error.
#include <gtest/gtest.h>

#include "sim/error.h"
#include "sim/params.h"
#include "sim/registry.h"

namespace mobisim {
namespace {

ParamSchema storage_like_schema() {
  ParamSchema s;
  s.real("seq_read_gbps", std::nullopt, "read bandwidth").positive();
  s.integer("queue_depth", 32, "queue depth").at_least(1);
  s.text("kind", std::string("ufs3.1"), "standard").in({"ufs3.1", "ufs4.0"});
  s.boolean("charging_only", false, "run only while charging");
  s.real_list("sizes_kb", std::vector<double>{4, 16}, "request sizes").positive();
  return s;
}

Params parse(const std::string& yaml, const ParamSchema& s) {
  return Params(load_yaml_string(yaml, "test.yaml"), s, ConfigSource{std::make_shared<std::string>("test.yaml"), "storage"});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ReadsValuesAndDefaults) {
  auto s = storage_like_schema();
  Params p = parse("seq_read_gbps: 2.9\nkind: ufs4.0\n", s);
  EXPECT_DOUBLE_EQ(p.real("seq_read_gbps"), 2.9);
  EXPECT_EQ(p.integer("queue_depth"), 32);
  EXPECT_EQ(p.text("kind"), "ufs4.0");
  EXPECT_FALSE(p.boolean("charging_only"));
  EXPECT_EQ(p.real_list("sizes_kb"), (std::vector<double>{4, 16}));
  EXPECT_EQ(p.resolved()["queue_depth"].as<int>(), 32);
}

TEST(Config, UnknownKeyNamesFileLineAndKey) {
  auto s = storage_like_schema();
  const std::string msg = error_of([&] { parse("seq_read_gbps: 2.9\nqueue_dept: 8\n", s); });
  EXPECT_NE(msg.find("test.yaml:2:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'queue_dept'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("queue_depth"), std::string::npos) << msg;  // lists what was expected
}

TEST(Config, MissingRequiredKey) {
  auto s = storage_like_schema();
  const std::string msg = error_of([&] { parse("kind: ufs3.1\n", s); });
  EXPECT_NE(msg.find("missing required key 'storage.seq_read_gbps'"), std::string::npos) << msg;
}

TEST(Config, NegativeBandwidthIsRejected) {
  auto s = storage_like_schema();
  const std::string msg = error_of([&] { parse("seq_read_gbps: -1\n", s); });
  EXPECT_NE(msg.find("test.yaml:1:16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be > 0"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { parse("seq_read_gbps: 0\n", s); }).find("must be > 0"), std::string::npos);
}

TEST(Config, WrongTypesAndChoices) {
  auto s = storage_like_schema();
  EXPECT_NE(error_of([&] { parse("seq_read_gbps: fast\n", s); }).find("expected a number, got 'fast'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse("seq_read_gbps: 1\nqueue_depth: 2.5\n", s); }).find("expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse("seq_read_gbps: 1\nkind: emmc\n", s); }).find("not one of: ufs3.1, ufs4.0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse("seq_read_gbps: 1\ncharging_only: maybe\n", s); }).find("expected true or false"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse("seq_read_gbps: 1\nsizes_kb: [4, -2]\n", s); }).find("must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse("- 1\n- 2\n", s); }).find("expected a mapping"), std::string::npos);
}

TEST(Config, MalformedYamlReportsLine) {
  const std::string msg = error_of([] { load_yaml_string("a: 1\nb: [1, 2\nc: 3\n", "broken.yaml"); });
  EXPECT_NE(msg.find("broken.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
}

TEST(Config, OverridesSetNestedValuesAndListElements) {
  YAML::Node root = load_yaml_string("experiment:\n  policies:\n    - {impl: naive}\n    - {impl: x}\n", "o.yaml");
  apply_override(root, "experiment.pipeline.top_k=5");
  apply_override(root, "experiment.policies[1].impl=naive");
  apply_override(root, "seed=42");
  EXPECT_EQ(root["experiment"]["pipeline"]["top_k"].as<int>(), 5);
  EXPECT_EQ(root["experiment"]["policies"][1]["impl"].as<std::string>(), "naive");
  EXPECT_EQ(root["seed"].as<int>(), 42);
  EXPECT_THROW(apply_override(root, "experiment.policies[7].impl=x"), UsageError);
  EXPECT_THROW(apply_override(root, "no_equals_sign"), UsageError);
}

TEST(Config, OverridesAddressListEntriesByLabelOrImpl) {
  YAML::Node root = load_yaml_string(
      "experiment:\n  policies:\n    - {impl: naive}\n    - {impl: percache, label: tight, tau_query: 0.9}\n"
      "    - {impl: percache, label: loose}\n",
      "o.yaml");
  apply_override(root, "experiment.policies.tight.tau_query=0.95");  // by label
  apply_override(root, "experiment.policies.naive.answer_tokens=8");  // unlabelled: by impl
  EXPECT_DOUBLE_EQ(root["experiment"]["policies"][1]["tau_query"].as<double>(), 0.95);
  EXPECT_EQ(root["experiment"]["policies"][0]["answer_tokens"].as<int>(), 8);
  EXPECT_FALSE(root["experiment"]["policies"][2]["tau_query"]);
  const auto usage_error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  const std::string typo = usage_error_of([&] { apply_override(root, "experiment.policies.tigth.tau_query=1"); });
  EXPECT_NE(typo.find("no entry of the list is named 'tigth' (entries: naive, tight, loose"), std::string::npos) << typo;
  YAML::Node twins = load_yaml_string("policies:\n  - {impl: percache}\n  - {impl: percache}\n", "t.yaml");
  const std::string two = usage_error_of([&] { apply_override(twins, "policies.percache.tau_query=1"); });
  EXPECT_NE(two.find("2 entries of the list are named 'percache'"), std::string::npos) << two;
}

struct Widget {
  static constexpr const char* kRegistryKind = "test_widget";
  virtual ~Widget() = default;
  virtual double size() const = 0;
};

struct SmallWidget : Widget {
  explicit SmallWidget(const Params& p) : size_(p.real("size_mb")) {}
  static ParamSchema schema() {
    ParamSchema s;
    s.real("size_mb", 1.0, "size").positive();
    return s;
  }
  double size() const override { return size_; }
  double size_;
};
MOBISIM_REGISTER(Widget, SmallWidget, "small", "a small widget")

TEST(Config, RegistryBuildsByNameAndRejectsUnknownNames) {
  ConfigSource src{std::make_shared<std::string>("w.yaml"), "widget"};
  auto w = Registry<Widget>::instance().create(load_yaml_string("{impl: small, size_mb: 3}", "w.yaml"), src);
  EXPECT_DOUBLE_EQ(w->size(), 3.0);
  const std::string msg = error_of([&] {
    Registry<Widget>::instance().create(load_yaml_string("{impl: tiny}", "w.yaml"), src);
  });
  EXPECT_NE(msg.find("unknown test_widget 'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("known: small"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] {
              Registry<Widget>::instance().create(load_yaml_string("{impl: small, colour: red}", "w.yaml"), src);
            }).find("unknown key 'colour'"),
            std::string::npos);
  // The catalogue used by `mobisim list` sees the registry.
  EXPECT_TRUE(RegistryCatalog::instance().kinds().count("test_widget"));
}

}  // namespace
}  // namespace mobisim
