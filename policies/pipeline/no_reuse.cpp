#include "policies/pipeline/no_reuse.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

MOBISIM_REGISTER(KvReuse, NoReuse, "none", "No K/V reuse: every prompt is prefilled from its first token.")

}  // namespace mobisim::policies::pipeline
