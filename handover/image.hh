#pragma once
// A state image: what a running jakirod hands to the one that takes over from it
// (docs/restart.md). A header, then sections, each one subsystem's state in fields the
// subsystem writes and reads itself; descriptors travel beside the bytes (SCM_RIGHTS) and a
// field names them by index.
//
// Versioned per section: each kind has the version its writer produces, and a reader states the
// newest version of each kind it understands (section_versions). The old process checks those
// before it stops anything (transfer.hh), so a binary that cannot read a section refuses the
// take-over while the old one keeps serving. A section whose kind the reader does not know is
// skipped when the writer marked it optional, refused when required.
//
// Fields are native-endian and fixed-width: an image never leaves the host, and the header
// carries a byte-order and word-size probe so that a foreign one is refused, not misread.
// Reading is bounds-checked: past the end, or a wrong descriptor index, the reader fails with a
// message and every later read returns zeros, so a truncated or corrupt image is refused whole.
//
// Thread-safety: none; one writer or reader per thread.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace jakiro::handover {

// Every kind of section any jakirod writes; numbers are never reused.
enum class section_kind : uint16_t {
#define JAKIRO_SECTION(name, number, version, required) name = number,
#include "handover/sections.def"
#undef JAKIRO_SECTION
};

const char* section_name(section_kind kind);
// The version this binary writes of `kind` (0: unknown to it).
uint16_t written_version(section_kind kind);
bool is_required(section_kind kind);

// For each kind, the newest version a reader understands.
using section_versions = std::map<uint16_t, uint16_t>;
// What this binary reads: every kind of sections.def at its written version.
section_versions readable_sections();
// Why a reader that understands `reader` cannot take the sections `written` (kind → version,
// with the required ones marked by `required`), or "" if it can.
std::string incompatibility(const section_versions& reader, const section_versions& written,
                            const std::map<uint16_t, bool>& required);

class image_writer {
  public:
    // `writer`: this binary's version and commit, shown by the reader (and in a refusal).
    explicit image_writer(std::string_view writer);

    // Sections do not nest: begin, write the fields, end.
    void begin(section_kind kind);
    void end();

    void u8(uint8_t v) { raw(&v, sizeof v); }
    void u16(uint16_t v) { raw(&v, sizeof v); }
    void u32(uint32_t v) { raw(&v, sizeof v); }
    void u64(uint64_t v) { raw(&v, sizeof v); }
    void i64(int64_t v) { raw(&v, sizeof v); }
    void boolean(bool v) { u8(v ? 1 : 0); }
    void string(std::string_view s);
    void bytes(std::span<const std::byte> b);
    // A trivially copyable struct, byte for byte (same binary layout only: bump the section's
    // version when the struct changes).
    template <class T>
    void pod(const T& v) {
        static_assert(std::is_trivially_copyable_v<T>);
        raw(&v, sizeof v);
    }
    // Sends `fd` along (the writer does not own it; it must stay open until sent) and writes
    // its index.
    void fd(int fd);

    // The finished image (no section open) and the descriptors it names, in index order.
    const std::vector<std::byte>& data() const { return _data; }
    const std::vector<int>& fds() const { return _fds; }
    // Kind → version of every section written, and which of them are required.
    const section_versions& written() const { return _written; }
    const std::map<uint16_t, bool>& required() const { return _required; }

  private:
    void raw(const void* p, std::size_t n);

    std::vector<std::byte> _data;
    std::vector<int> _fds;
    std::size_t _open = 0;  // offset of the open section's length field, 0: none
    section_versions _written;
    std::map<uint16_t, bool> _required;
};

class image_reader;

// The bytes of a field of a struct that section_reader::pod() filled: pod() copies bytes, and
// in a corrupt image a bool or an enum may hold a byte that is none of its type's values, which
// must not be read as that type. Check them as bytes first (raw_field(attr, offsetof(...))).
template <class Field, class T>
Field raw_field(const T& v, std::size_t offset) {
    static_assert(std::is_trivially_copyable_v<T> && std::is_unsigned_v<Field>);
    Field f{};
    if (offset + sizeof f <= sizeof v) {
        std::memcpy(&f, reinterpret_cast<const unsigned char*>(&v) + offset, sizeof f);
    }
    return f;
}

// One section's fields, read in the order they were written.
class section_reader {
  public:
    section_kind kind() const { return _kind; }
    uint16_t version() const { return _version; }

    uint8_t u8() { return get<uint8_t>(); }
    uint16_t u16() { return get<uint16_t>(); }
    uint32_t u32() { return get<uint32_t>(); }
    uint64_t u64() { return get<uint64_t>(); }
    int64_t i64() { return get<int64_t>(); }
    bool boolean() { return u8() != 0; }
    std::string string();
    std::vector<std::byte> bytes();
    template <class T>
    T pod() {
        static_assert(std::is_trivially_copyable_v<T>);
        T v{};
        if (take(&v, sizeof v)) {
            return v;
        }
        return T{};
    }
    // Takes the descriptor written by image_writer::fd: the caller owns it from here; -1 (and
    // the reader fails) when the index is bad or already taken.
    int fd();
    // A count that bounds what follows (a number of entries): fails when it exceeds `limit`.
    uint32_t count(uint32_t limit);

    // Marks the image bad with `why` (a reader that finds a value it cannot use).
    void fail(const std::string& why);
    bool ok() const;
    // Unread bytes at the end of the section (a newer writer's fields are not skipped
    // silently by a reader of the same version: it checks done()).
    bool done() const { return _at == _end; }

  private:
    friend class image_reader;
    section_reader(image_reader* image, section_kind kind, uint16_t version, std::size_t begin,
                   std::size_t end)
        : _image(image), _kind(kind), _version(version), _at(begin), _end(end) {}
    bool take(void* out, std::size_t n);
    template <class T>
    T get() {
        T v{};
        take(&v, sizeof v);
        return v;
    }

    image_reader* _image;
    section_kind _kind;
    uint16_t _version;
    std::size_t _at;
    std::size_t _end;
};

class image_reader {
  public:
    // Takes ownership of `fds` (closed at destruction unless taken by a section's fd()).
    image_reader(std::vector<std::byte> data, std::vector<int> fds);
    ~image_reader();
    image_reader(const image_reader&) = delete;
    image_reader& operator=(const image_reader&) = delete;

    // The header checked and the sections indexed; false with error() set.
    bool open();
    // The section of `kind`, if the image has one (sections of one kind: the first).
    bool has(section_kind kind) const;
    section_reader section(section_kind kind);

    bool ok() const { return _error.empty(); }
    const std::string& error() const { return _error; }
    // The writer's version string (its jakirod version and commit).
    const std::string& writer() const { return _writer; }

  private:
    friend class section_reader;
    struct entry {
        uint16_t version;
        std::size_t begin, end;
    };
    void fail(const std::string& why) {
        if (_error.empty()) {
            _error = why;
        }
    }

    std::vector<std::byte> _data;
    std::vector<int> _fds;
    std::string _error;
    std::string _writer;
    std::map<uint16_t, entry> _sections;
};

}  // namespace jakiro::handover
