#pragma once
// The grammar classes that headers name without needing their definitions (as <iosfwd> does for streams).

namespace illm::gpu::grammar {
class constraint_cache;
}
