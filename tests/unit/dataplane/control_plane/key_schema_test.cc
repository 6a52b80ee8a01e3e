#include "dataplane/control_plane/key_schema.hh"

#include <gtest/gtest.h>

using namespace jakiro::control_plane;

TEST(KeySchema, KeysOfEveryKindAreDocumentedPaths) {
    EXPECT_EQ(key_of({record_kind::vpc, "", "blue"}), "/jakiro/v1/vpcs/blue");
    EXPECT_EQ(key_of({record_kind::group, "blue", "default"}), "/jakiro/v1/groups/blue/default");
    EXPECT_EQ(key_of({record_kind::vnic, "blue", "t19"}), "/jakiro/v1/vnics/blue/t19");
    EXPECT_EQ(key_of({record_kind::home, "blue", "t19", "h3"}), "/jakiro/v1/homes/h3/blue/t19");
    EXPECT_EQ(prefix_of(record_kind::vnic, "blue"), "/jakiro/v1/vnics/blue/");
    EXPECT_EQ(homes_prefix_of("h3"), "/jakiro/v1/homes/h3/");
    EXPECT_EQ(key_of({record_kind::host, "", "h3"}), "/jakiro/v1/hosts/h3");
    EXPECT_EQ(key_of({record_kind::alive, "", "h3"}), "/jakiro/v1/alive/h3");
    EXPECT_EQ(prefix_of(record_kind::vnic), "/jakiro/v1/vnics/");
}

TEST(KeySchema, ParseKeyInvertsKeyOf) {
    for (const record_key& key :
         {record_key{record_kind::vpc, "", "blue"}, record_key{record_kind::group, "red", "web"},
          record_key{record_kind::vnic, "blue", "t1"},
          record_key{record_kind::vnic, "", "t1", "", true},
          record_key{record_kind::home, "blue", "t1", "h1"},
          record_key{record_kind::host, "", "h1"}, record_key{record_kind::alive, "", "h1"}}) {
        const auto parsed = parse_key(key_of(key));
        ASSERT_TRUE(parsed.has_value()) << key_of(key);
        EXPECT_EQ(*parsed, key);
    }
}

TEST(KeySchema, ParseKeyIgnoresForeignAndMalformedKeys) {
    EXPECT_FALSE(parse_key("/jakiro/v2/vnics/t1"));     // another schema version
    EXPECT_FALSE(parse_key("/other/vnics/t1"));         // not ours
    EXPECT_FALSE(parse_key("/jakiro/v1/vnics/"));       // no name
    EXPECT_FALSE(parse_key("/jakiro/v1/vnics/a/b/c"));  // one segment too many
    EXPECT_FALSE(parse_key("/jakiro/v1/hosts/a/b"));    // one segment too many
    EXPECT_FALSE(parse_key("/jakiro/v1/homes/h1/t1"));  // a home needs its VPC
    EXPECT_FALSE(parse_key("/jakiro/v1/groups/blue"));  // a group needs its VPC
    EXPECT_FALSE(parse_key("/jakiro/v1/routers/r1"));   // unknown kind
    EXPECT_FALSE(parse_key("/jakiro/v1/vnics/t 1"));    // spaces are not names
}

TEST(KeySchema, ValidNameRefusesSlashesSpacesAndControlCharacters) {
    EXPECT_TRUE(valid_name("t19"));
    EXPECT_TRUE(valid_name("web-frontend_2.a"));
    EXPECT_FALSE(valid_name(""));
    EXPECT_FALSE(valid_name("a/b"));
    EXPECT_FALSE(valid_name("a b"));
    EXPECT_FALSE(valid_name(std::string("a\nb")));
}

TEST(KeySchema, PrefixRangeEndIsThePrefixPlusOne) {
    EXPECT_EQ(prefix_range_end("/jakiro/v1/"), "/jakiro/v10");  // '/' + 1 = '0'
    EXPECT_EQ(prefix_range_end("ab\xff"), "ac");
    EXPECT_EQ(prefix_range_end(""), std::string(1, '\0'));
}

TEST(KeySchema, AVnicKeyWithoutItsVpcIsTheLegacyKey) {
    const auto parsed = parse_key("/jakiro/v1/vnics/t19");
    ASSERT_TRUE(parsed.has_value());
    EXPECT_TRUE(parsed->legacy);
    EXPECT_EQ(parsed->name, "t19");
    EXPECT_TRUE(parsed->vpc.empty());
    EXPECT_FALSE(parse_key("/jakiro/v1/vnics/blue/t19")->legacy);
}

TEST(KeySchema, TheSchemaMarkerAndReadersKeysParse) {
    EXPECT_EQ(schema_marker_key(), "/jakiro/v1/schema");
    EXPECT_EQ(parse_key("/jakiro/v1/schema")->kind, record_kind::schema);
    EXPECT_FALSE(parse_key("/jakiro/v1/schema/x"));
    EXPECT_EQ(key_of({record_kind::reader, "", "h3"}), "/jakiro/v1/readers/h3");
    const auto reader = parse_key("/jakiro/v1/readers/h3");
    ASSERT_TRUE(reader.has_value());
    EXPECT_EQ(reader->kind, record_kind::reader);
    EXPECT_EQ(reader->name, "h3");
}
