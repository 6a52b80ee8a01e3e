#include "verbs_shim/debug.hh"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace jakiro::verbs_shim {

bool debug_enabled() {
    // Read every time: tests (and programs) may set it after the library loaded.
    const char* v = std::getenv("JAKIRO_VERBS_DEBUG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

void debug(const char* format, ...) {
    if (!debug_enabled()) {
        return;
    }
    char line[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(line, sizeof(line), format, args);
    va_end(args);
    std::fprintf(stderr, "libjakiro_verbs: %s\n", line);
}

}  // namespace jakiro::verbs_shim
