#include "verbs_shim/proc_maps.hh"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

namespace jakiro::verbs_shim {

namespace {

// Parses a hexadecimal field up to `stop`, advancing `text` past the separator.
template <typename T>
bool hex_field(std::string_view& text, char stop, T& out) {
    const auto end = text.find(stop);
    if (end == std::string_view::npos || end == 0) {
        return false;
    }
    const auto r = std::from_chars(text.data(), text.data() + end, out, 16);
    if (r.ec != std::errc() || r.ptr != text.data() + end) {
        return false;
    }
    text.remove_prefix(end + 1);
    return true;
}

}  // namespace

bool vma::anonymous_private() const {
    if (shared || inode != 0) {
        return false;
    }
    // Named anonymous memory (prctl PR_SET_VMA_ANON_NAME) is "[anon:name]"; shared anonymous
    // memory is "[anon_shmem:name]" or "/dev/zero (deleted)" and already excluded above.
    return path.empty() || path == "[heap]" || path.starts_with("[anon:");
}

bool vma::private_file_copy() const {
    return !shared && write && inode != 0 && !path.empty() && path[0] == '/' &&
           !path.starts_with("/anon_hugepage") && !path.starts_with("/SYSV");
}

bool parse_maps_line(std::string_view line, vma& out) {
    std::string_view path;
    if (!parse_maps_line(line, out, path)) {
        return false;
    }
    out.path.assign(path);
    return true;
}

bool parse_maps_line(std::string_view line, vma& out, std::string_view& path) {
    // 7f1c2c000000-7f1c2c021000 rw-p 00000000 00:00 0                  [heap]
    out.start = out.end = 0;
    out.read = out.write = out.exec = out.shared = false;
    out.offset = 0;
    out.dev_major = out.dev_minor = 0;
    out.inode = 0;
    path = {};
    if (!hex_field(line, '-', out.start) || !hex_field(line, ' ', out.end) ||
        out.end <= out.start) {
        return false;
    }
    if (line.size() < 5 || line[4] != ' ') {
        return false;
    }
    out.read = line[0] == 'r';
    out.write = line[1] == 'w';
    out.exec = line[2] == 'x';
    out.shared = line[3] == 's';
    line.remove_prefix(5);
    if (!hex_field(line, ' ', out.offset) || !hex_field(line, ':', out.dev_major) ||
        !hex_field(line, ' ', out.dev_minor)) {
        return false;
    }
    const auto inode_end = line.find(' ');
    const auto r = std::from_chars(
        line.data(), line.data() + (inode_end == std::string_view::npos ? line.size() : inode_end),
        out.inode, 10);
    if (r.ec != std::errc()) {
        return false;
    }
    if (inode_end != std::string_view::npos) {
        line.remove_prefix(inode_end);
        const auto path_start = line.find_first_not_of(' ');
        if (path_start != std::string_view::npos) {
            path = line.substr(path_start);
        }
    }
    return true;
}

namespace {

bool read_whole(const char* path, std::string& text) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    char chunk[16384];
    for (;;) {
        const ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            const int error = errno;
            close(fd);
            errno = error;
            return false;
        }
        if (n == 0) {
            break;
        }
        text.append(chunk, static_cast<std::size_t>(n));
    }
    close(fd);
    return true;
}

// smaps: each mapping's maps line, then "Key: value" lines, "VmFlags: rd wr sh ... dc dd".
void parse_vm_flags(std::string_view line, vma& v) {
    constexpr std::string_view key = "VmFlags:";
    if (!line.starts_with(key)) {
        return;
    }
    line.remove_prefix(key.size());
    while (!line.empty()) {
        const auto start = line.find_first_not_of(' ');
        if (start == std::string_view::npos) {
            break;
        }
        line.remove_prefix(start);
        const auto end = line.find(' ');
        const std::string_view flag = line.substr(0, end);
        v.dont_fork |= flag == "dc";
        v.dont_dump |= flag == "dd";
        line.remove_prefix(end == std::string_view::npos ? line.size() : end);
    }
}

bool read_mappings(const char* path, std::vector<vma>& out) {
    out.clear();
    std::string text;
    if (!read_whole(path, text)) {
        return false;
    }
    std::string_view rest(text);
    while (!rest.empty()) {
        const auto eol = rest.find('\n');
        const std::string_view line = rest.substr(0, eol);
        rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
        vma v;
        if (parse_maps_line(line, v)) {
            out.push_back(std::move(v));
        } else if (!out.empty()) {
            parse_vm_flags(line, out.back());
        }
    }
    return true;
}

}  // namespace

bool read_maps(std::vector<vma>& out) {
    return read_mappings("/proc/self/maps", out);
}

bool read_smaps(std::vector<vma>& out) {
    return read_mappings("/proc/self/smaps", out);
}

}  // namespace jakiro::verbs_shim
