// Facts fixed at build time: version, git revision, compile flags, and the embedded default spec
// and contract (generated from sweeps/default.json and contract/contract.json).
#pragma once

namespace bitcheck {
const char* version_string();
const char* git_revision();
const char* compile_flags();
}  // namespace bitcheck
