#include "dataplane/control/report_text.hh"

#include <algorithm>
#include <utility>
#include <vector>

namespace jakiro {

namespace {

// Every leaf under `node`, by its keys joined with '.'.
void leaves(const report_node& node, const std::string& prefix,
            std::vector<std::pair<std::string, const report_node*>>& out) {
    for (const auto& [key, child] : node.children()) {
        const std::string name = prefix.empty() ? key : prefix + "." + key;
        if (child->type() == report_node::kind::object) {
            leaves(*child, name, out);
        } else if (child->type() != report_node::kind::array) {
            out.emplace_back(name, child.get());
        }
    }
}

std::string padded(std::string_view text, std::size_t width, bool right) {
    const std::string gap(text.size() < width ? width - text.size() : 0, ' ');
    return right ? gap + std::string(text) : std::string(text) + gap;
}

}  // namespace

std::string leaf_text(const report_node& leaf) {
    switch (leaf.type()) {
        case report_node::kind::number:
            return report_number(leaf.number());
        case report_node::kind::text:
            return leaf.text().empty() ? "-" : leaf.text();
        case report_node::kind::flag:
            return leaf.number() != 0 ? "yes" : "no";
        case report_node::kind::strings: {
            std::string out;
            for (const auto& s : leaf.strings()) {
                out += (out.empty() ? "" : ",") + s;
            }
            return out.empty() ? "-" : out;
        }
        default:
            return "-";
    }
}

void write_list(std::ostringstream& text, std::string_view name, const report_node& section,
                const std::function<bool(std::string_view, double, std::string&)>& note) {
    std::vector<std::pair<std::string, const report_node*>> rows;
    leaves(section, "", rows);
    std::size_t width = 0;
    for (const auto& [key, leaf] : rows) {
        width = std::max(width, key.size());
    }
    text << name << "\n";
    for (const auto& [key, leaf] : rows) {
        std::string extra;
        if (note && !note(key, leaf->number(), extra)) {
            continue;
        }
        // "  key value": two words, whatever the padding (scripts split the line).
        text << "  " << padded(key, width, false) << " " << leaf_text(*leaf) << extra << "\n";
    }
}

void write_columns(
    std::ostringstream& text, std::string_view title, const report_node& section,
    const std::function<std::string(std::string_view, const report_node&)>& heading) {
    std::vector<std::string> keys;  // every counter any row has, in the order first met
    std::vector<std::string> heads;
    std::vector<std::vector<std::pair<std::string, const report_node*>>> columns;
    for (const auto& [key, row] : section.children()) {
        heads.push_back(heading ? heading(key, *row) : key);
        columns.emplace_back();
        leaves(*row, "", columns.back());
        for (const auto& [name, leaf] : columns.back()) {
            if (std::find(keys.begin(), keys.end(), name) == keys.end()) {
                keys.push_back(name);
            }
        }
    }
    std::size_t first = title.size();
    for (const auto& key : keys) {
        first = std::max(first, key.size() + 2);
    }
    std::vector<std::vector<std::string>> cells(columns.size());
    std::vector<std::size_t> widths(columns.size());
    for (std::size_t c = 0; c < columns.size(); ++c) {
        widths[c] = heads[c].size();
        for (const auto& key : keys) {
            std::string cell = "-";
            for (const auto& [name, leaf] : columns[c]) {
                if (name == key) {
                    cell = leaf_text(*leaf);
                }
            }
            widths[c] = std::max(widths[c], cell.size());
            cells[c].push_back(std::move(cell));
        }
    }
    text << padded(title, first, false);
    for (std::size_t c = 0; c < columns.size(); ++c) {
        text << "  " << padded(heads[c], widths[c], true);
    }
    text << "\n";
    for (std::size_t k = 0; k < keys.size(); ++k) {
        text << padded("  " + keys[k], first, false);
        for (std::size_t c = 0; c < columns.size(); ++c) {
            text << "  " << padded(cells[c][k], widths[c], true);
        }
        text << "\n";
    }
}

}  // namespace jakiro
