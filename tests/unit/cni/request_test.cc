// What the plugin accepts from a runtime (CNI_* environment + stdin) and what it refuses, with
// the spec's error code and a message naming the field.

#include "cni/request.hh"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace jakiro::cni {
namespace {

using env_map = std::map<std::string, std::string>;

env_map add_env() {
    return {{"CNI_COMMAND", "ADD"},
            {"CNI_CONTAINERID", "c0ffee"},
            {"CNI_NETNS", "/run/netns/c1"},
            {"CNI_IFNAME", "eth0"},
            {"CNI_PATH", "/usr/lib/cni"}};
}

std::string config(const std::string& extra = "") {
    return R"({"cniVersion": "1.0.0", "name": "jakiro-blue", "type": "jakiro-cni",
               "host_config": "/etc/jakiro/h1.yaml", "vpc": "blue",
               "subnet": "198.19.1.0/24", "security_groups": ["default"])" +
           extra + "}";
}

// The base configuration with `key` set to `json_value` (added, or replacing the base's).
std::string config_with(const std::string& key, const std::string& json_value) {
    std::map<std::string, std::string> keys = {{"cniVersion", R"("1.0.0")"},
                                               {"name", R"("jakiro-blue")"},
                                               {"type", R"("jakiro-cni")"},
                                               {"host_config", R"("/etc/jakiro/h1.yaml")"},
                                               {"vpc", R"("blue")"},
                                               {"subnet", R"("198.19.1.0/24")"},
                                               {"security_groups", R"(["default"])"}};
    keys[key] = json_value;
    std::string text = "{";
    for (const auto& [k, v] : keys) {
        text += (text.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
    }
    return text + "}";
}

cni_error refusal(const env_map& env, const std::string& stdin_text) {
    cni_error error;
    EXPECT_FALSE(parse_request(env, stdin_text, error).has_value()) << stdin_text;
    return error;
}

TEST(CniRequest, AcceptsARuntimesAddWithItsDefaults) {
    cni_error error;
    const auto r = parse_request(add_env(), config(), error);
    ASSERT_TRUE(r) << error.msg;
    EXPECT_EQ(r->cmd, command::add);
    EXPECT_EQ(r->container_id, "c0ffee");
    EXPECT_EQ(r->config.vpc, "blue");
    EXPECT_EQ(r->config.subnet_length, 24);
    EXPECT_EQ(r->config.range_start, 0xc6130101u);  // .1
    EXPECT_EQ(r->config.range_end, 0xc61301feu);    // .254: not the broadcast address
    EXPECT_EQ(r->config.port, "vnet:iface={name}");
    EXPECT_EQ(r->config.data_dir, "/var/lib/jakiro/cni");
    EXPECT_EQ(r->config.security_groups, std::vector<std::string>{"default"});
}

TEST(CniRequest, VersionNeedsNothingButTheCommand) {
    cni_error error;
    const auto r = parse_request({{"CNI_COMMAND", "VERSION"}}, "", error);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->cmd, command::version);
}

TEST(CniRequest, DelMayComeWithoutANamespace) {
    auto env = add_env();
    env["CNI_COMMAND"] = "DEL";
    env["CNI_NETNS"] = "";
    cni_error error;
    EXPECT_TRUE(parse_request(env, config(), error)) << error.msg;
    env["CNI_COMMAND"] = "CHECK";
    EXPECT_EQ(refusal(env, config()).code, error_code::invalid_environment);
}

TEST(CniRequest, RefusesContainerIdsThatCouldLeaveTheLeaseDirectory) {
    for (const char* id : {"../../etc/passwd", "..", ".hidden", "a/b", "a b", "", "a\nb", "-rf"}) {
        auto env = add_env();
        env["CNI_CONTAINERID"] = id;
        const auto error = refusal(env, config());
        EXPECT_EQ(error.code, error_code::invalid_environment) << id;
        EXPECT_NE(error.msg.find("CNI_CONTAINERID"), std::string::npos);
    }
    auto env = add_env();
    env["CNI_CONTAINERID"] = std::string(129, 'a');
    EXPECT_EQ(refusal(env, config()).code, error_code::invalid_environment);
}

TEST(CniRequest, RefusesInterfaceNamesLinuxWouldNot) {
    for (const char* name : {"", ".", "..", "eth/0", "eth:0", "eth 0", "sixteen-chars-xx"}) {
        auto env = add_env();
        env["CNI_IFNAME"] = name;
        const auto error = refusal(env, config());
        EXPECT_EQ(error.code, error_code::invalid_environment) << name;
        EXPECT_NE(error.msg.find("CNI_IFNAME"), std::string::npos);
    }
}

TEST(CniRequest, RefusesANamespaceThatIsNoAbsolutePath) {
    for (const char* netns : {"", "run/netns/x", "/run/netns/../../etc"}) {
        auto env = add_env();
        env["CNI_NETNS"] = netns;
        EXPECT_EQ(refusal(env, config()).code, error_code::invalid_environment) << netns;
    }
}

TEST(CniRequest, RefusesAnUnknownCommand) {
    auto env = add_env();
    env["CNI_COMMAND"] = "ATTACH";
    EXPECT_EQ(refusal(env, config()).code, error_code::invalid_environment);
}

TEST(CniRequest, MalformedJsonIsUndecodable) {
    for (const char* text : {"{", "[1, 2]", "\"blue\"", "", "{\"cniVersion\": }"}) {
        const auto error = refusal(add_env(), text);
        EXPECT_TRUE(error.code == error_code::undecodable ||
                    error.code == error_code::invalid_config)
            << text;
    }
    EXPECT_EQ(refusal(add_env(), "{").code, error_code::undecodable);
    EXPECT_EQ(refusal(add_env(), std::string(2 << 20, ' ')).code, error_code::undecodable);
}

TEST(CniRequest, AnotherCniVersionIsIncompatible) {
    auto text = config();
    text.replace(text.find("1.0.0"), 5, "0.3.1");
    const auto error = refusal(add_env(), text);
    EXPECT_EQ(error.code, error_code::incompatible_version);
    EXPECT_NE(error.msg.find("0.3.1"), std::string::npos);
}

TEST(CniRequest, AMisspelledKeyIsAnUnsupportedField) {
    const auto error = refusal(add_env(), config(R"(, "securty_groups": ["web"])"));
    EXPECT_EQ(error.code, error_code::unsupported_field);
    EXPECT_NE(error.msg.find("securty_groups"), std::string::npos);
}

TEST(CniRequest, RefusesNamesThatWouldBecomePathsOrYaml) {
    // The network name is a directory under data_dir; VPC and group names go into YAML.
    const std::vector<std::pair<std::string, std::string>> hostile = {
        {"name", R"("../x")"},
        {"vpc", R"("blue}, {name: x")"},
        {"security_groups", R"(["default", "a b"])"},
        {"data_dir", R"("/var/lib/../../etc")"},
        {"data_dir", R"("relative")"},
        {"host_config", R"("h1.yaml")"},
        {"port", R"("vnet:iface=fixed")"},
        {"socket", R"("/run/)" + std::string(200, 'x') + R"(.sock")"}};
    for (const auto& [key, value] : hostile) {
        const auto error = refusal(add_env(), config_with(key, value));
        EXPECT_EQ(error.code, error_code::invalid_config) << key << ": " << error.msg;
        EXPECT_NE(error.msg.find(key), std::string::npos) << error.msg;
    }
}

TEST(CniRequest, RefusesSubnetsAndRangesThatDoNotFit) {
    for (const char* extra : {R"(, "range_start": "198.19.2.1")", R"(, "gateway": "10.0.0.1")",
                              R"(, "range_start": "198.19.1.9", "range_end": "198.19.1.8")",
                              R"(, "ready_timeout_ms": 100000000)",
                              R"(, "routes": [{"dst": "nowhere"}])", R"(, "qos": "fast")"}) {
        const auto error = refusal(add_env(), config(extra));
        EXPECT_EQ(error.code, error_code::invalid_config) << extra << ": " << error.msg;
    }
    auto text = config();
    text.replace(text.find("198.19.1.0/24"), 13, "198.19.1.7/24");
    const auto error = refusal(add_env(), text);
    EXPECT_NE(error.msg.find("host bits"), std::string::npos) << error.msg;
}

TEST(CniRequest, PerContainerArgsOverrideTheNetwork) {
    auto env = add_env();
    env["CNI_ARGS"] =
        "IgnoreUnknown=1;K8S_POD_NAME=x;IP=198.19.1.77;JAKIRO_SECURITY_GROUPS=web,db;"
        "JAKIRO_QOS_RATE=2Gbit";
    cni_error error;
    const auto r =
        parse_request(env, config(R"(, "qos": {"rate": "1Gbit", "tcp": {"weight": 2}})"), error);
    ASSERT_TRUE(r) << error.msg;
    EXPECT_EQ(r->config.requested_ip, 0xc613014du);
    EXPECT_EQ(r->config.security_groups, (std::vector<std::string>{"web", "db"}));
    EXPECT_EQ(r->config.qos["rate"].as<std::string>(), "2Gbit");
    EXPECT_EQ(r->config.qos["tcp"]["weight"].as<int>(), 2);

    const auto from_args = parse_request(
        add_env(), config(R"(, "args": {"jakiro": {"security_groups": [], "ip": "198.19.1.5"}})"),
        error);
    ASSERT_TRUE(from_args) << error.msg;
    EXPECT_TRUE(from_args->config.security_groups.empty());
    EXPECT_EQ(from_args->config.requested_ip, 0xc6130105u);
}

TEST(CniRequest, RefusesHostileArgs) {
    auto env = add_env();
    env["CNI_ARGS"] = "IP=198.19.9.9";
    EXPECT_EQ(refusal(env, config()).code, error_code::invalid_config);
    env["CNI_ARGS"] = "JAKIRO_SECURITY_GROUPS=web,../x";
    EXPECT_EQ(refusal(env, config()).code, error_code::invalid_config);
    env["CNI_ARGS"] = "garbage";
    EXPECT_EQ(refusal(env, config()).code, error_code::invalid_environment);
    EXPECT_EQ(refusal(add_env(), config(R"(, "args": {"jakiro": {"vpc": "red"}})")).code,
              error_code::unsupported_field);
}

}  // namespace
}  // namespace jakiro::cni
