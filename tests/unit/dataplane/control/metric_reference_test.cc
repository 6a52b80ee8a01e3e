// jakirod(8)'s metric list against the metric table: the page names every family the table
// has and no other, and its list is the table's rendering (`ninja -C build update-man-metrics`
// writes it).

#include "dataplane/control/metric_reference.hh"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "dataplane/control/metric_table.hh"

namespace jakiro {
namespace {

std::string man_page_source() {
    const std::string path = std::string(JAKIRO_SOURCE_ROOT) + "/dataplane/jakirod.8.scd";
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    EXPECT_TRUE(in.good()) << "cannot read " << path;
    return text.str();
}

// The page's METRICS section: from its heading to the next one.
std::string metrics_section(const std::string& page) {
    const auto begin = page.find("\n# METRICS\n");
    if (begin == std::string::npos) {
        return {};
    }
    const auto end = page.find("\n# ", begin + 1);
    return page.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

std::set<std::string> metric_names_in(const std::string& text) {
    std::set<std::string> names;
    // scdoc may escape an underscore; a name is what a reader sees.
    const std::string plain = std::regex_replace(text, std::regex(R"(\\_)"), "_");
    const std::regex name(R"(\bjakiro_[a-z0-9_]*[a-z0-9])");
    for (auto it = std::sregex_iterator(plain.begin(), plain.end(), name);
         it != std::sregex_iterator(); ++it) {
        names.insert(it->str());
    }
    return names;
}

std::string joined(const std::set<std::string>& names) {
    std::string out;
    for (const auto& n : names) {
        out += " " + n;
    }
    return out;
}

TEST(JakirodManPage, NamesEveryMetricOfTheTableAndNoOther) {
    const std::string section = metrics_section(man_page_source());
    ASSERT_FALSE(section.empty()) << "jakirod.8.scd has no METRICS section";
    const std::set<std::string> on_page = metric_names_in(section);
    std::set<std::string> in_table;
    for (const auto& def : metric_table()) {
        in_table.insert(def.name);
    }
    std::set<std::string> missing, unknown;
    for (const auto& n : in_table) {
        if (!on_page.count(n)) {
            missing.insert(n);
        }
    }
    for (const auto& n : on_page) {
        if (!in_table.count(n)) {
            unknown.insert(n);
        }
    }
    EXPECT_TRUE(missing.empty()) << "jakirod(8) does not name:" << joined(missing)
                                 << "\n(run ninja -C build update-man-metrics)";
    EXPECT_TRUE(unknown.empty()) << "jakirod(8) names metrics jakirod does not serve:"
                                 << joined(unknown);
}

TEST(JakirodManPage, ItsMetricListIsTheTablesRendering) {
    const std::string page = man_page_source();
    const auto rendered = with_metric_list(page);
    ASSERT_TRUE(rendered.has_value()) << "jakirod.8.scd lacks the markers of its metric list:\n"
                                      << metric_list_begin << metric_list_end;
    EXPECT_EQ(*rendered, page) << "the metric list of jakirod.8.scd is not the metric table's: "
                                  "run ninja -C build update-man-metrics";
}

TEST(MetricList, GivesEachFamilyItsTypeLabelsAndHelp) {
    const std::string list = metric_list_scdoc();
    EXPECT_NE(list.find("- *jakiro_port_packets_total* (counter by _direction_, _port_): Packets "
                        "the port received"),
              std::string::npos)
        << list;
    EXPECT_NE(list.find("- *jakiro_ready* (gauge): 1 when every port has link"), std::string::npos)
        << list;
}

TEST(MetricList, IsReplacedBetweenItsMarkersOnly) {
    const std::string page = std::string("# METRICS\n\nintro\n\n") + metric_list_begin +
                             "- *jakiro_gone_total* (counter): stale\n" + metric_list_end +
                             "\nafter\n";
    const auto rendered = with_metric_list(page);
    ASSERT_TRUE(rendered.has_value());
    EXPECT_EQ(*rendered, std::string("# METRICS\n\nintro\n\n") + metric_list_begin +
                             metric_list_scdoc() + metric_list_end + "\nafter\n");
    EXPECT_FALSE(with_metric_list("# METRICS\n- *jakiro_x* (gauge): x\n").has_value());
    EXPECT_FALSE(with_metric_list(std::string(metric_list_end) + metric_list_begin).has_value());
}

}  // namespace
}  // namespace jakiro
