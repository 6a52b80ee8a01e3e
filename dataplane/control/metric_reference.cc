#include "dataplane/control/metric_reference.hh"

#include <cctype>

#include "dataplane/control/metric_table.hh"

namespace jakiro {

namespace {

// scdoc's markup: '*' is bold, '_' underlines where it starts a word, '\' escapes.
std::string scdoc_text(const std::string& text) {
    std::string out;
    char last = ' ';
    for (const char c : text) {
        const bool starts_underline = c == '_' && !std::isalnum(static_cast<unsigned char>(last));
        if (c == '*' || c == '\\' || starts_underline) {
            out += '\\';
        }
        out += c;
        last = c;
    }
    return out;
}

}  // namespace

std::string metric_list_scdoc() {
    std::string out;
    for (const metric_def& def : metric_table()) {
        out += "- *" + scdoc_text(def.name) + "* (";
        out += def.type == metric_type::counter ? "counter" : "gauge";
        for (std::size_t i = 0; i < def.labels.size(); ++i) {
            out += std::string(i == 0 ? " by _" : ", _") + scdoc_text(def.labels[i]) + "_";
        }
        out += "): " + scdoc_text(def.help) + "\n";
    }
    return out;
}

std::optional<std::string> with_metric_list(const std::string& page) {
    const std::string begin = metric_list_begin, end = metric_list_end;
    const auto first = page.find(begin);
    if (first == std::string::npos) {
        return std::nullopt;
    }
    const auto body = first + begin.size();
    const auto last = page.find(end, body);
    if (last == std::string::npos) {
        return std::nullopt;
    }
    return page.substr(0, body) + metric_list_scdoc() + page.substr(last);
}

}  // namespace jakiro
