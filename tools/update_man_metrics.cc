// Rewrites the metric list of jakirod(8) (dataplane/jakirod.8.scd, between its two marker comments)
// from the metric table: `ninja -C build update-man-metrics` after a metric is added or changed.

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "dataplane/control/metric_reference.hh"

int main(int argc, char** argv) {
    const char* usage =
        "usage: update_man_metrics PATH/jakirod.8.scd\n"
        "Rewrites the page's metric list from jakirod's metric table (as `ninja -C build\n"
        "update-man-metrics` does).\n";
    if (argc == 2 && std::string(argv[1]) == "--help") {
        std::cout << usage;
        return 0;
    }
    if (argc != 2) {
        std::cerr << usage;
        return 2;
    }
    std::ifstream in(argv[1]);
    std::ostringstream page;
    page << in.rdbuf();
    if (!in) {
        std::cerr << "update_man_metrics: cannot read " << argv[1] << "\n";
        return 1;
    }
    const auto updated = jakiro::with_metric_list(page.str());
    if (!updated) {
        std::cerr << "update_man_metrics: " << argv[1] << " lacks the metric list's markers:\n"
                  << jakiro::metric_list_begin << jakiro::metric_list_end;
        return 1;
    }
    if (*updated == page.str()) {
        return 0;
    }
    std::ofstream out(argv[1], std::ios::trunc);
    out << *updated;
    if (!out.flush()) {
        std::cerr << "update_man_metrics: cannot write " << argv[1] << "\n";
        return 1;
    }
    std::cout << "updated the metric list of " << argv[1] << "\n";
    return 0;
}
