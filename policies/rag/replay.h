#pragma once
// The request loop of one RAG user: between queries the policy may work in the idle time
// (`idle`), then it serves the query; a query that arrives while the previous one is still being
// answered waits (one user, one assistant). Used by the rag app of the phone experiment (several
// apps on one phone). The rag_qa experiment no longer replays with it: its policies serve on their
// pipeline stages (issue 34; the loop's `serve_on: loop` is removed).
#include <vector>

#include "policies/rag/rag_policy.h"
#include "sim/simulator.h"

namespace mobisim::policies {

// Replays pipe.user()'s queries under `policy`; appends one record per query to `out`.
// Energy of a record is the device's whole energy over the query (see QueryRecord::energy_j);
// on a phone shared with other apps, active_energy_j is the query's own share.
sim::Task<void> replay_user(RagPolicy& policy, RagPipeline& pipe, std::vector<QueryRecord>& out);

}  // namespace mobisim::policies
