#pragma once
// An enum field of a libibverbs struct exactly as the program stored it. Programs leave fields
// uninitialised and hostile ones write any number; loading a value outside the enum's range as
// the enum type is undefined behaviour (UBSan's -fsanitize=enum reports it), so such a field is
// read as the integer it holds until it has been checked.

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace jakiro::verbs_proto {

template <class Enum>
uint32_t stored_value(const Enum& field) {
    static_assert(std::is_enum_v<Enum> && sizeof(Enum) == sizeof(uint32_t));
    uint32_t raw;
    std::memcpy(&raw, &field, sizeof(raw));
    return raw;
}

}  // namespace jakiro::verbs_proto
