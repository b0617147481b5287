// The nightly page's style and script, embedded at build time from lib/report/page.css and
// lib/report/page.js.
#pragma once

namespace bitcheck {
const char* page_css();
const char* page_script();
}  // namespace bitcheck
