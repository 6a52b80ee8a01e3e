#include "dataplane/config/flow_mapping.hh"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace jakiro;

namespace {

// The same tree: types, tags, scalars, key order. Marks are not compared (the fast parse has
// none; a record's errors name fields, not lines).
::testing::AssertionResult same_tree(const YAML::Node& a, const YAML::Node& b,
                                     const std::string& at = "$") {
    if (a.Type() != b.Type()) {
        return ::testing::AssertionFailure() << at << ": type " << a.Type() << " vs " << b.Type();
    }
    if (a.Tag() != b.Tag()) {
        return ::testing::AssertionFailure()
               << at << ": tag '" << a.Tag() << "' vs '" << b.Tag() << "'";
    }
    if (a.IsScalar() && a.Scalar() != b.Scalar()) {
        return ::testing::AssertionFailure()
               << at << ": '" << a.Scalar() << "' vs '" << b.Scalar() << "'";
    }
    if (a.size() != b.size()) {
        return ::testing::AssertionFailure() << at << ": " << a.size() << " vs " << b.size();
    }
    if (a.IsSequence()) {
        for (std::size_t i = 0; i < a.size(); ++i) {
            const auto r = same_tree(a[i], b[i], at + "[" + std::to_string(i) + "]");
            if (!r) {
                return r;
            }
        }
    }
    if (a.IsMap()) {
        auto i = a.begin();
        auto j = b.begin();
        for (; i != a.end(); ++i, ++j) {
            auto r = same_tree(i->first, j->first, at + ".key");
            if (r) {
                r = same_tree(i->second, j->second, at + "." + i->first.as<std::string>(""));
            }
            if (!r) {
                return r;
            }
        }
    }
    return ::testing::AssertionSuccess();
}

// Whatever the fast parse accepts, yaml-cpp reads as the same tree.
::testing::AssertionResult agrees_with_yaml_cpp(const std::string& text) {
    const auto fast = parse_flow_mapping(text);
    if (!fast) {
        return ::testing::AssertionSuccess();
    }
    YAML::Node slow;
    try {
        slow = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        return ::testing::AssertionFailure()
               << "accepted what yaml-cpp refuses: " << text << " (" << e.what() << ")";
    }
    auto r = same_tree(*fast, slow);
    if (!r) {
        r << " in " << text;
    }
    return r;
}

}  // namespace

TEST(FlowMapping, RecordsAsJakiroctlAndJsonWriteThemAreReadAsYamlCppReadsThem) {
    const std::vector<std::string> records = {
        R"({name: t19, vpc: blue, ip: 198.19.1.19/24, mac: "02:00:c6:13:01:19", host: h3, )"
        R"(security_groups: [default], qos: {rate: 1Gbit}, rdma: {max_qps: 64}})",
        R"({"name": "s00001-7", "vpc": "blue", "ip": "198.19.3.7/16", )"
        R"("mac": "02:00:00:01:00:07", "host": "s00001", "security_groups": ["sim"]})",
        R"({name: t1, ip6: "2001:2::1:1/64", limits: {max_flows: 4096, max_packet_rate: 0}})",
        "  {name: a, list: [], map: {}, n: null, q: \"a\\\"b\\\\c\\/d\\n\"}  ",
        "{name: .hidden, x: 0x10, y: yes, z: 1.5e3, w: a_b-c+d@e}",
        "{name: t, nested: [{a: 1}, [b, c], \"d\"]}",
    };
    for (const auto& text : records) {
        ASSERT_TRUE(parse_flow_mapping(text).has_value()) << text;
        EXPECT_TRUE(agrees_with_yaml_cpp(text));
    }
}

TEST(FlowMapping, TextsOutsideTheSubsetAreLeftToYamlCpp) {
    const std::vector<std::string> declined = {
        "{name: t1 # comment}",
        "{name: &a t1}",
        "{name: *a}",
        "{name: !!str t1}",
        "{name: 't1'}",
        "{name: t 1}",
        "{ip6: 2001:2::1/64}",
        "{mac: 02:00:00:00:00:01}",
        "{name: t1, name: t2}",
        "{name: t1,}",
        "{name: t1,, vpc: blue}",
        "{name: \"\\u0041\"}",
        "{name: \"t1}",
        "{name:t1}",
        "{\"name\":\"t1\"}",
        "{name : t1}",
        "{name: -5}",
        "{name: ~}",
        "{null: 1}",
        "{name: t1}\n",
        "{name: t1} x",
        "[a, b]",
        "{name: [a, b,]}",
        "{name: \"caf\xc3\xa9\"}",
        "",
        std::string(40, '{') + std::string(40, '}'),
    };
    for (const auto& text : declined) {
        EXPECT_FALSE(parse_flow_mapping(text).has_value()) << text;
    }
}

TEST(FlowMapping, EveryTreeTheFlowEmitterWritesIsReadAsYamlCppReadsIt) {
    // Scalars that YAML quotes, types, folds or refuses alongside name-like ones.
    const std::vector<std::string> scalars = {"t1",
                                              "blue",
                                              "198.19.1.1/24",
                                              "02:00:c6:13:01:01",
                                              "2001:2::1/64",
                                              "1Gbit",
                                              "yes",
                                              "null",
                                              "~",
                                              "",
                                              "a b",
                                              "-5",
                                              "#x",
                                              "it's",
                                              "q\"d",
                                              "back\\slash",
                                              "a: b",
                                              "[x]",
                                              "{y}",
                                              "0x10",
                                              ".5",
                                              "a,b",
                                              "&a",
                                              "*b",
                                              "!t",
                                              "%",
                                              "@x",
                                              "`x`",
                                              "tab\there",
                                              "-",
                                              "?",
                                              "new\nline",
                                              "caf\xc3\xa9",
                                              "  lead",
                                              "trail ",
                                              "a#b"};
    std::mt19937 rng(7);
    auto pick = [&](std::size_t n) {
        return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
    };
    std::function<YAML::Node(int)> random_node = [&](int depth) -> YAML::Node {
        const auto kind = depth > 2 ? 0 : pick(4);
        if (kind == 1) {
            YAML::Node list(YAML::NodeType::Sequence);
            for (std::size_t i = pick(4); i > 0; --i) {
                list.push_back(random_node(depth + 1));
            }
            return list;
        }
        if (kind == 2) {
            YAML::Node map(YAML::NodeType::Map);
            for (std::size_t i = pick(4); i > 0; --i) {
                map[scalars[pick(scalars.size())]] = random_node(depth + 1);
            }
            return map;
        }
        return YAML::Node(scalars[pick(scalars.size())]);
    };
    int accepted = 0;
    for (int round = 0; round < 3000; ++round) {
        YAML::Node root(YAML::NodeType::Map);
        for (std::size_t i = 1 + pick(6); i > 0; --i) {
            root[scalars[pick(scalars.size())]] = random_node(1);
        }
        YAML::Emitter emit;
        emit << YAML::Flow << root;
        std::string text = emit.c_str();
        ASSERT_TRUE(agrees_with_yaml_cpp(text));
        accepted += parse_flow_mapping(text).has_value() ? 1 : 0;
    }
    // The subset is the common case, not a corner: most emitted records take the fast parse.
    EXPECT_GT(accepted, 300);
}

TEST(FlowMapping, RandomTextIsEitherDeclinedOrReadAsYamlCppReadsIt) {
    const std::string alphabet = "{}[],: \"\\'#&*!-~ab0.:/\n";
    std::mt19937 rng(11);
    int accepted = 0;
    for (int round = 0; round < 20000; ++round) {
        std::string text = "{a: ";
        const auto length = std::uniform_int_distribution<int>(0, 24)(rng);
        for (int i = 0; i < length; ++i) {
            text +=
                alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
        }
        text += "}";
        ASSERT_TRUE(agrees_with_yaml_cpp(text));
        accepted += parse_flow_mapping(text).has_value() ? 1 : 0;
    }
    EXPECT_GT(accepted, 50);
}
