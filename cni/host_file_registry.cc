#include "cni/host_file_registry.hh"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "dataplane/config/config_loader.hh"
#include "tools/jakiroctl/control_client.hh"

namespace jakiro::cni {

namespace {

constexpr const char* marker = "  # jakiro-cni ";

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        lines.push_back(line);
    }
    return lines;
}

std::string text_of(const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& line : lines) {
        out += line + "\n";
    }
    return out;
}

bool blank_or_comment(const std::string& line) {
    const auto first = line.find_first_not_of(" \t");
    return first == std::string::npos || line[first] == '#';
}

bool is_list_item(const std::string& line) {
    const auto first = line.find_first_not_of(' ');
    return first != std::string::npos && line.compare(first, 2, "- ") == 0;
}

const std::regex vnics_key(R"(^vnics:\s*(\[\s*\])?\s*(#.*)?$)");

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
    for (auto pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos)) {
        text.replace(pos, from.size(), to);
        pos += to.size();
    }
    return text;
}

bool write_atomically(const std::string& path, const std::string& text, std::string& error) {
    struct stat st {};
    const mode_t mode = stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
    const auto temp = path + ".jakiro-cni.new";
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        error = "cannot write " + temp + ": " + std::strerror(errno);
        return false;
    }
    const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                         fchmod(fd, mode) == 0 && fsync(fd) == 0;
    close(fd);
    if (!written || rename(temp.c_str(), path.c_str()) != 0) {
        error = "cannot write " + path + ": " + std::strerror(errno);
        unlink(temp.c_str());
        return false;
    }
    return true;
}

class host_file_registry final : public vnic_registry {
  public:
    host_file_registry(std::string path, std::string text, host_config config, std::string socket,
                       std::string port_template)
        : _path(std::move(path)),
          _text(std::move(text)),
          _config(std::move(config)),
          _socket(std::move(socket)),
          _port(std::move(port_template)) {}

    bool vpc_vni(const std::string& vpc, uint32_t& vni, cni_error& error) override {
        return vni_in(_config, vpc, "of " + _path, vni, error);
    }
    uint32_t tenant_mtu() const override { return _config.tenant_mtu(); }
    std::string host_name() const override { return _config.name; }

    std::set<uint32_t> taken(const std::string& vpc) override {
        std::set<uint32_t> out = vnic_addresses_in(_config, vpc);
        for (const auto& p : _config.peers) {
            if (p.vpc == vpc) {
                out.insert(p.ip);
            }
        }
        return out;
    }

    bool add(const vnic_entry& entry, bool& address_taken, cni_error& error) override {
        address_taken = false;
        std::string why;
        const auto text = with_vnic_line(_text, vnic_line(entry, _port), why);
        if (!text) {
            error = {error_code::invalid_config, _path + ": " + why};
            return false;
        }
        return commit(*text, error);
    }

    bool remove(const std::string& vnic, const std::string&, uint32_t, cni_error& error) override {
        const auto text = without_vnic_line(_text, vnic);
        if (text == _text) {
            return true;
        }
        // The file is the truth a jakirod that is down now starts from: the line goes even if
        // jakirod cannot be told, and it reads the file when it starts.
        if (!commit(text, error, false)) {
            return error.code == error_code::jakirod_refused && _unreachable;
        }
        return true;
    }

    bool declared_as(const vnic_entry& entry, std::string& error) override {
        for (const auto& v : _config.vnics) {
            if (v.name != entry.name) {
                continue;
            }
            if (v.vpc != entry.vpc || format_mac(v.mac) != entry.mac || v.ip.address != entry.ip ||
                v.ip.length != entry.length) {
                error = "vNIC " + entry.name + " in " + _path + " is no longer as it was added";
                return false;
            }
            return true;
        }
        error = "vNIC " + entry.name + " is not in " + _path;
        return false;
    }

  private:
    // Validates the new text as jakirod will, writes it, applies it; on a refusal the old text
    // is written back.
    bool commit(const std::string& text, cni_error& error, bool restore_on_refusal = true) {
        _unreachable = false;
        const auto loaded = load_host_config_text(text, _path);
        if (!loaded.ok()) {
            std::string all;
            for (const auto& e : loaded.errors) {
                all += (all.empty() ? "" : "; ") + e.to_string();
            }
            error = {error_code::invalid_config, "the vNIC does not fit " + _path + ": " + all};
            return false;
        }
        std::string why;
        if (!write_atomically(_path, text, why)) {
            error = {error_code::io_failure, why};
            return false;
        }
        std::string body;
        if (const int status = ask(_socket, "apply " + _path, body, why); status != 0) {
            _unreachable = status == 2;
            error = {error_code::jakirod_refused, "jakirod did not apply " + _path + ": " + why};
            if (!restore_on_refusal) {
                _text = text;
                return false;
            }
            std::string ignored;
            if (!write_atomically(_path, _text, ignored)) {
                error.details = "and the file could not be restored: " + ignored;
            }
            return false;
        }
        _text = text;
        _config = loaded.config;
        return true;
    }

    std::string _path;
    std::string _text;
    host_config _config;
    std::string _socket;
    std::string _port;
    bool _unreachable = false;  // the last commit's jakirod could not be reached at all
};

}  // namespace

std::string vnic_line(const vnic_entry& entry, const std::string& port_template) {
    YAML::Emitter out;
    out.SetMapFormat(YAML::Flow);
    out.SetSeqFormat(YAML::Flow);
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << entry.name;
    out << YAML::Key << "vpc" << YAML::Value << entry.vpc;
    out << YAML::Key << "mac" << YAML::Value << YAML::DoubleQuoted << entry.mac;
    out << YAML::Key << "ip" << YAML::Value
        << format_ipv4(entry.ip) + "/" + std::to_string(int{entry.length});
    out << YAML::Key << "port" << YAML::Value << YAML::DoubleQuoted
        << replace_all(port_template, "{name}", entry.name);
    out << YAML::Key << "security_groups" << YAML::Value << YAML::BeginSeq;
    for (const auto& g : entry.security_groups) {
        out << g;
    }
    out << YAML::EndSeq;
    if (entry.qos.IsMap()) {
        out << YAML::Key << "qos" << YAML::Value << entry.qos;
    }
    out << YAML::EndMap;
    return std::string("  - ") + out.c_str() + marker + entry.owner;
}

std::optional<std::string> with_vnic_line(const std::string& text, const std::string& line,
                                          std::string& error) {
    auto lines = lines_of(text);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].rfind("vnics:", 0) != 0) {
            continue;
        }
        if (!std::regex_match(lines[i], vnics_key)) {
            error =
                "vnics: is a flow list; write it as a block list (one '- {...}' a line) for "
                "the CNI plugin to add to it";
            return std::nullopt;
        }
        if (lines[i].find('[') != std::string::npos) {
            lines[i] = "vnics:";
        }
        // Entries indented as the file's first entry (YAML needs one indentation per list).
        std::string entry = line;
        for (std::size_t j = i + 1; j < lines.size(); ++j) {
            if (blank_or_comment(lines[j])) {
                continue;
            }
            if (is_list_item(lines[j])) {
                entry = lines[j].substr(0, lines[j].find('-')) + line.substr(line.find('-'));
            }
            break;
        }
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i) + 1, entry);
        return text_of(lines);
    }
    lines.push_back("vnics:");
    lines.push_back(line);
    return text_of(lines);
}

std::string without_vnic_line(const std::string& text, const std::string& vnic) {
    auto lines = lines_of(text);
    const std::string head = "- {name: " + vnic + ",";
    bool changed = false;
    for (std::size_t i = 0; i < lines.size();) {
        const auto first = lines[i].find_first_not_of(' ');
        if (first != std::string::npos && lines[i].compare(first, head.size(), head) == 0 &&
            lines[i].find(marker) != std::string::npos) {
            lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
            changed = true;
        } else {
            ++i;
        }
    }
    if (!changed) {
        return text;
    }
    // A vnics: left with no entries is an empty list, not null.
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].rfind("vnics:", 0) != 0 || !std::regex_match(lines[i], vnics_key)) {
            continue;
        }
        std::size_t j = i + 1;
        while (j < lines.size() && blank_or_comment(lines[j])) {
            ++j;
        }
        if (j == lines.size() || !is_list_item(lines[j])) {
            lines[i] = "vnics: []";
        }
    }
    return text_of(lines);
}

std::unique_ptr<vnic_registry> make_host_file_registry(const std::string& path,
                                                       const std::string& text, host_config config,
                                                       const std::string& socket,
                                                       const std::string& port_template) {
    return std::make_unique<host_file_registry>(path, text, std::move(config), socket,
                                                port_template);
}

}  // namespace jakiro::cni
