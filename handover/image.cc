#include "handover/image.hh"

#include <unistd.h>

#include <cstdint>

namespace jakiro::handover {

namespace {

constexpr char magic[8] = {'J', 'A', 'K', 'I', 'R', 'O', 'S', 'I'};
constexpr uint32_t format = 1;
constexpr uint32_t byte_order_probe = 0x01020304;
// A section: kind u16, version u16, length u64 (of the fields that follow).
constexpr std::size_t section_header = 2 + 2 + 8;

struct known {
    const char* name;
    uint16_t number;
    uint16_t version;
    bool required;
};
constexpr known sections[] = {
#define JAKIRO_SECTION(name, number, version, required) {#name, number, version, required},
#include "handover/sections.def"
#undef JAKIRO_SECTION
};

const known* find(uint16_t number) {
    for (const auto& k : sections) {
        if (k.number == number) {
            return &k;
        }
    }
    return nullptr;
}

}  // namespace

const char* section_name(section_kind kind) {
    const known* k = find(static_cast<uint16_t>(kind));
    return k != nullptr ? k->name : "unknown";
}

uint16_t written_version(section_kind kind) {
    const known* k = find(static_cast<uint16_t>(kind));
    return k != nullptr ? k->version : 0;
}

bool is_required(section_kind kind) {
    const known* k = find(static_cast<uint16_t>(kind));
    return k != nullptr && k->required;
}

section_versions readable_sections() {
    section_versions out;
    for (const auto& k : sections) {
        out[k.number] = k.version;
    }
    return out;
}

std::string incompatibility(const section_versions& reader, const section_versions& written,
                            const std::map<uint16_t, bool>& required) {
    for (const auto& [kind, version] : written) {
        const auto it = reader.find(kind);
        const known* k = find(kind);
        const std::string name = k != nullptr ? k->name : "#" + std::to_string(kind);
        const auto req = required.find(kind);
        const bool needed = req != required.end() && req->second;
        if (it == reader.end()) {
            if (needed) {
                return "state section '" + name + "' (version " + std::to_string(version) +
                       ") is unknown to the new binary";
            }
            continue;
        }
        if (it->second < version) {
            return "state section '" + name + "' is version " + std::to_string(version) +
                   "; the new binary reads up to version " + std::to_string(it->second);
        }
    }
    return "";
}

image_writer::image_writer(std::string_view writer) {
    raw(magic, sizeof magic);
    u32(format);
    u32(byte_order_probe);
    u8(static_cast<uint8_t>(sizeof(void*)));
    string(writer);
}

void image_writer::raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    _data.insert(_data.end(), b, b + n);
}

void image_writer::begin(section_kind kind) {
    const auto number = static_cast<uint16_t>(kind);
    const uint16_t version = written_version(kind);
    u16(number);
    u16(version);
    _open = _data.size();
    u64(0);  // the length, once known
    _written[number] = version;
    _required[number] = is_required(kind);
}

void image_writer::end() {
    const uint64_t length = _data.size() - _open - sizeof(uint64_t);
    std::memcpy(_data.data() + _open, &length, sizeof length);
    _open = 0;
}

void image_writer::string(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
}

void image_writer::bytes(std::span<const std::byte> b) {
    u64(b.size());
    raw(b.data(), b.size());
}

void image_writer::fd(int fd) {
    u32(static_cast<uint32_t>(_fds.size()));
    _fds.push_back(fd);
}

bool section_reader::take(void* out, std::size_t n) {
    if (!_image->ok() || _end - _at < n) {
        fail(std::string("state section '") + section_name(_kind) + "' ends early");
        std::memset(out, 0, n);
        return false;
    }
    std::memcpy(out, _image->_data.data() + _at, n);
    _at += n;
    return true;
}

std::string section_reader::string() {
    const uint32_t n = u32();
    if (!ok() || _end - _at < n) {
        fail(std::string("state section '") + section_name(_kind) + "': string ends early");
        return {};
    }
    std::string s(reinterpret_cast<const char*>(_image->_data.data() + _at), n);
    _at += n;
    return s;
}

std::vector<std::byte> section_reader::bytes() {
    const uint64_t n = u64();
    if (!ok() || _end - _at < n) {
        fail(std::string("state section '") + section_name(_kind) + "': bytes end early");
        return {};
    }
    std::vector<std::byte> b(_image->_data.begin() + static_cast<std::ptrdiff_t>(_at),
                             _image->_data.begin() + static_cast<std::ptrdiff_t>(_at + n));
    _at += n;
    return b;
}

int section_reader::fd() {
    const uint32_t index = u32();
    if (!ok()) {
        return -1;
    }
    if (index >= _image->_fds.size() || _image->_fds[index] < 0) {
        fail(std::string("state section '") + section_name(_kind) + "' names descriptor " +
             std::to_string(index) + ", which was not sent or is taken");
        return -1;
    }
    const int fd = _image->_fds[index];
    _image->_fds[index] = -1;
    return fd;
}

uint32_t section_reader::count(uint32_t limit) {
    const uint32_t n = u32();
    if (n > limit) {
        fail(std::string("state section '") + section_name(_kind) + "': " + std::to_string(n) +
             " entries, more than " + std::to_string(limit));
        return 0;
    }
    return n;
}

void section_reader::fail(const std::string& why) {
    _image->fail(why);
}

bool section_reader::ok() const {
    return _image->ok();
}

image_reader::image_reader(std::vector<std::byte> data, std::vector<int> fds)
    : _data(std::move(data)), _fds(std::move(fds)) {}

image_reader::~image_reader() {
    for (const int fd : _fds) {
        if (fd >= 0) {
            close(fd);
        }
    }
}

bool image_reader::open() {
    // The header, read through a reader of a pseudo-section spanning the whole image.
    section_reader header(this, section_kind::daemon, 0, 0, _data.size());
    char m[sizeof magic];
    for (char& c : m) {
        c = static_cast<char>(header.u8());
    }
    if (!ok() || std::memcmp(m, magic, sizeof magic) != 0) {
        _error = "not a jakirod state image";
        return false;
    }
    const uint32_t f = header.u32();
    if (f != format) {
        fail("state image format " + std::to_string(f) + "; this binary reads format " +
             std::to_string(format));
        return false;
    }
    if (header.u32() != byte_order_probe || header.u8() != sizeof(void*)) {
        fail("state image written on another byte order or word size");
        return false;
    }
    _writer = header.string();
    std::size_t at = header._at;
    while (ok() && at < _data.size()) {
        if (_data.size() - at < section_header) {
            fail("state image ends inside a section header");
            break;
        }
        uint16_t kind = 0, version = 0;
        uint64_t length = 0;
        std::memcpy(&kind, _data.data() + at, 2);
        std::memcpy(&version, _data.data() + at + 2, 2);
        std::memcpy(&length, _data.data() + at + 4, 8);
        at += section_header;
        if (length > _data.size() - at) {
            fail("state image ends inside section #" + std::to_string(kind));
            break;
        }
        _sections.try_emplace(kind, entry{version, at, at + length});
        at += length;
    }
    return ok();
}

bool image_reader::has(section_kind kind) const {
    return _sections.contains(static_cast<uint16_t>(kind));
}

section_reader image_reader::section(section_kind kind) {
    const auto it = _sections.find(static_cast<uint16_t>(kind));
    if (it == _sections.end()) {
        fail(std::string("state image has no section '") + section_name(kind) + "'");
        return section_reader(this, kind, 0, 0, 0);
    }
    if (it->second.version > written_version(kind)) {
        fail(std::string("state section '") + section_name(kind) + "' is version " +
             std::to_string(it->second.version) + "; this binary reads up to version " +
             std::to_string(written_version(kind)));
        return section_reader(this, kind, 0, 0, 0);
    }
    return section_reader(this, kind, it->second.version, it->second.begin, it->second.end);
}

}  // namespace jakiro::handover
