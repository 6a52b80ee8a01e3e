#pragma once
// System calls without libc, for code that runs in a forked child before its memory is its
// own (memory_backing.cc): there, a call through a PLT slot can fault, because the slot may
// sit on a registered page the child has not copied yet. These reach the kernel directly and
// touch nothing but registers and their arguments. Result: >= 0, or -errno.

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace jakiro::verbs_shim {

inline long raw_syscall(long number, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0,
                        long a5 = 0, long a6 = 0) {
#if defined(__x86_64__)
    long result;
    register long r10 asm("r10") = a4;
    register long r8 asm("r8") = a5;
    register long r9 asm("r9") = a6;
    asm volatile("syscall"
                 : "=a"(result)
                 : "a"(number), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                 : "rcx", "r11", "memory");
    return result;
#else
    // Elsewhere the backing refuses to register at all (4096-byte pages, x86-64 layout).
    const long result = syscall(number, a1, a2, a3, a4, a5, a6);
    return result == -1 ? -errno : result;
#endif
}

}  // namespace jakiro::verbs_shim
