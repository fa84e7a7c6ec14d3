#include "policies/apps/app.h"

namespace mobisim::policies {

void add_app_params(ParamSchema& s) {
  s.text("priority", std::string("foreground"),
         "foreground (its work goes first on a shared unit) or background (waits for foreground work)")
      .in({"foreground", "background"});
  s.real("start_s", 0.0, "when the app starts issuing requests").non_negative().with_unit("s");
}

int app_priority(const std::string& name) { return name == "background" ? 1 : 0; }

App::App(const Params& p) : priority_(app_priority(p.text("priority"))), start_s_(p.real("start_s")) {}

}  // namespace mobisim::policies
