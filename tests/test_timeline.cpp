// The Perfetto / Chrome-trace timeline: valid JSON, one track per device unit, spans that
// match the simulated busy periods.
#include <gtest/gtest.h>

#include "devices/device.h"
#include "sim/timeline.h"
#include "traces/json.h"

namespace mobisim {
namespace {

sim::Task<void> two_jobs(devices::Device& dev, const models::Work& w) {
  co_await dev.compute("cpu", w, models::DType::kF16, "job \"A\"");
  co_await dev.storage().read(1e6, "load");
  co_await dev.compute("cpu", w, models::DType::kF16, "job B");
}

TEST(Timeline, ExportsOneTrackPerUnitWithExactSpans) {
  const devices::DeviceProfile p = devices::load_device_profile("pixel7");
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  sim::Timeline tl;
  devices::Device dev(sim, p, stats, tl.process("pixel7 run", {{"policy", "naive"}}));
  models::Work w;
  w.ops.push_back(models::Op{models::OpKind::kFfnUp, 1e10, 0, 0, 0, 0, 1, 10, std::nullopt});
  sim.start(two_jobs(dev, w));
  sim.run();
  const auto doc = traces::json::parse(tl.to_json(), "timeline");
  const auto* events = doc.find("traceEvents");
  ASSERT_NE(events, nullptr);
  std::map<std::string, int> tracks;
  std::vector<std::pair<std::string, double>> spans;  // name, duration (us)
  for (const auto& e : events->as_array()) {
    if (e.find("ph")->as_string() == "M" && e.find("name")->as_string() == "thread_name")
      tracks[e.find("args")->find("name")->as_string()] = 1;
    if (e.find("ph")->as_string() == "X") spans.emplace_back(e.find("name")->as_string(), e.find("dur")->as_number());
  }
  EXPECT_TRUE(tracks.count("pixel7/cpu"));
  EXPECT_TRUE(tracks.count("pixel7/storage"));
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].first, "job \"A\"");  // quotes survive escaping
  EXPECT_NEAR(spans[0].second, p.unit("cpu", "test").seconds(w, models::DType::kF16) * 1e6, 0.01);
  EXPECT_EQ(spans[1].first, "load");
  EXPECT_NEAR(spans[1].second * 1e-6, p.storage->read_seconds(1e6), 1e-4);
}

}  // namespace
}  // namespace mobisim
