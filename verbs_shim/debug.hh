#pragma once
// Diagnostics for the user: with JAKIRO_VERBS_DEBUG set (to anything but "" or "0"), verbs
// that fail for a reason the errno cannot tell (why a region cannot be registered, say)
// explain it on stderr. Silent otherwise, as libibverbs is.

namespace jakiro::verbs_shim {

bool debug_enabled();

// printf-style, one line, prefixed "libjakiro_verbs: ".
void debug(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace jakiro::verbs_shim
