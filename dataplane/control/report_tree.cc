#include "dataplane/control/report_tree.hh"

#include <cmath>
#include <cstdio>

namespace jakiro {

report_node& report_node::child(std::string_view key, kind k) {
    for (auto& [name, node] : _children) {
        if (name == key) {
            return *node;
        }
    }
    _children.emplace_back(std::string(key), std::make_unique<report_node>(k));
    return *_children.back().second;
}

report_node& report_node::at(std::string_view key) {
    return child(key, kind::object);
}

report_node& report_node::row(std::string_view id) {
    _kind = kind::array;
    return child(id, kind::object);
}

report_node& report_node::as_array() {
    _kind = kind::array;
    return *this;
}

report_node& report_node::set(std::string_view key, double number) {
    report_node& leaf = child(key, kind::number);
    leaf._kind = kind::number;
    leaf._number = number;
    return *this;
}

report_node& report_node::add(double number) {
    _kind = kind::number;
    _number += number;
    return *this;
}

report_node& report_node::set(std::string_view key, std::string_view text) {
    report_node& leaf = child(key, kind::text);
    leaf._kind = kind::text;
    leaf._text = std::string(text);
    return *this;
}

report_node& report_node::set_flag(std::string_view key, bool flag) {
    report_node& leaf = child(key, kind::flag);
    leaf._kind = kind::flag;
    leaf._number = flag ? 1 : 0;
    return *this;
}

report_node& report_node::set_strings(std::string_view key, std::vector<std::string> strings) {
    report_node& leaf = child(key, kind::strings);
    leaf._kind = kind::strings;
    leaf._strings = std::move(strings);
    return *this;
}

const report_node* report_node::find(std::string_view key) const {
    for (const auto& [name, node] : _children) {
        if (name == key) {
            return node.get();
        }
    }
    return nullptr;
}

std::string report_number(double value) {
    // 2^53: the integers a double holds exactly (a byte counter reaches it after 9 PB).
    constexpr double exact_integers = 9007199254740992.0;
    if (value >= 0 && value < exact_integers && std::floor(value) == value) {
        return std::to_string(static_cast<uint64_t>(value));
    }
    char text[32];
    std::snprintf(text, sizeof(text), "%.15g", value);
    return text;
}

void report_node::write_json(json_writer& out, std::string_view key) const {
    switch (_kind) {
        case kind::number:
            out.raw(key, report_number(_number));
            return;
        case kind::text:
            out.value(key, _text);
            return;
        case kind::flag:
            out.value(key, _number != 0);
            return;
        case kind::strings:
            out.begin_array(key);
            for (const auto& s : _strings) {
                out.value({}, s);
            }
            out.end_array();
            return;
        case kind::object:
            out.begin_object(key);
            for (const auto& [name, node] : _children) {
                node->write_json(out, name);
            }
            out.end_object();
            return;
        case kind::array:
            out.begin_array(key);
            for (const auto& [id, node] : _children) {
                node->write_json(out);
            }
            out.end_array();
            return;
    }
}

std::string report_node::json() const {
    json_writer out;
    write_json(out);
    return out.str() + "\n";
}

}  // namespace jakiro
