#include "dataplane/config/flow_mapping.hh"

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace jakiro {
namespace {

// Tags as yaml-cpp's parser gives untagged nodes: "?" (to be resolved) for plain scalars and
// collections, "!" for quoted scalars.
constexpr const char* plain_tag = "?";
constexpr const char* quoted_tag = "!";

// Nesting deeper than any record has: a deeper text goes to yaml-cpp (which has its own
// bound), so a crafted value cannot exhaust this parser's stack.
constexpr int max_depth = 16;

class flow_reader {
  public:
    explicit flow_reader(std::string_view text) : _text(text) {}

    std::optional<YAML::Node> document() {
        skip_spaces();
        auto node = mapping(0);
        skip_spaces();
        if (!node || _at != _text.size()) {
            return std::nullopt;
        }
        return node;
    }

  private:
    std::optional<YAML::Node> value(int depth) {
        if (_at >= _text.size()) {
            return std::nullopt;
        }
        switch (_text[_at]) {
            case '{':
                return mapping(depth + 1);
            case '[':
                return sequence(depth + 1);
            case '"':
                return quoted();
            default:
                return plain();
        }
    }

    std::optional<YAML::Node> mapping(int depth) {
        if (depth > max_depth || !take('{')) {
            return std::nullopt;
        }
        YAML::Node map(YAML::NodeType::Map);
        map.SetTag(plain_tag);
        std::vector<std::string> keys;
        skip_spaces();
        if (take('}')) {
            return map;
        }
        for (;;) {
            auto key = _at < _text.size() && _text[_at] == '"' ? quoted() : plain();
            if (!key || !key->IsScalar()) {
                return std::nullopt;  // a null key, or none
            }
            for (const auto& seen : keys) {
                if (seen == key->Scalar()) {
                    return std::nullopt;  // what a repeated key means is yaml-cpp's to say
                }
            }
            keys.push_back(key->Scalar());
            skip_spaces();
            // "key: value" with the space YAML needs after the colon of a plain key.
            if (!take(':') || _at >= _text.size() || _text[_at] != ' ') {
                return std::nullopt;
            }
            skip_spaces();
            auto item = value(depth);
            if (!item) {
                return std::nullopt;
            }
            map.force_insert(*key, *item);
            skip_spaces();
            if (take('}')) {
                return map;
            }
            if (!take(',')) {
                return std::nullopt;
            }
            skip_spaces();
            if (_at < _text.size() && (_text[_at] == '}' || _text[_at] == ',')) {
                return std::nullopt;  // a trailing or empty entry
            }
        }
    }

    std::optional<YAML::Node> sequence(int depth) {
        if (depth > max_depth || !take('[')) {
            return std::nullopt;
        }
        YAML::Node list(YAML::NodeType::Sequence);
        list.SetTag(plain_tag);
        skip_spaces();
        if (take(']')) {
            return list;
        }
        for (;;) {
            auto item = value(depth);
            if (!item) {
                return std::nullopt;
            }
            list.push_back(*item);
            skip_spaces();
            if (take(']')) {
                return list;
            }
            if (!take(',')) {
                return std::nullopt;
            }
            skip_spaces();
            if (_at < _text.size() && (_text[_at] == ']' || _text[_at] == ',')) {
                return std::nullopt;
            }
        }
    }

    static bool plain_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '.' || c == '/' || c == '+' || c == '-' || c == '@';
    }

    // A plain scalar of name-like characters. It must start with a letter, digit, '_' or '.'
    // ('-' and '+' open other things in YAML, or numbers whose meaning is the loader's) and end
    // where the flow syntax continues: a space inside, or a colon right after it that is not
    // "key: ", would make it a different scalar in YAML, so those texts are declined.
    std::optional<YAML::Node> plain() {
        const auto start = _at;
        if (_at >= _text.size() || !plain_char(_text[_at]) || _text[_at] == '-' ||
            _text[_at] == '+' || _text[_at] == '@') {
            return std::nullopt;
        }
        while (_at < _text.size() && plain_char(_text[_at])) {
            ++_at;
        }
        const auto scalar = _text.substr(start, _at - start);
        auto after = _at;
        while (after < _text.size() && _text[after] == ' ') {
            ++after;
        }
        if (after < _text.size() && _text[after] != ',' && _text[after] != '}' &&
            _text[after] != ']' && !(_text[after] == ':' && after == _at)) {
            return std::nullopt;
        }
        if (scalar == "null" || scalar == "Null" || scalar == "NULL") {
            return YAML::Node(YAML::NodeType::Null);
        }
        YAML::Node node{std::string(scalar)};
        node.SetTag(plain_tag);
        return node;
    }

    // A double-quoted scalar with JSON's simple escapes; printable ASCII only.
    std::optional<YAML::Node> quoted() {
        if (!take('"')) {
            return std::nullopt;
        }
        std::string scalar;
        while (_at < _text.size()) {
            const char c = _text[_at++];
            if (c == '"') {
                YAML::Node node{scalar};
                node.SetTag(quoted_tag);
                return node;
            }
            if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
                return std::nullopt;
            }
            if (c != '\\') {
                scalar += c;
                continue;
            }
            if (_at >= _text.size()) {
                return std::nullopt;
            }
            switch (_text[_at++]) {
                case '"':
                    scalar += '"';
                    break;
                case '\\':
                    scalar += '\\';
                    break;
                case '/':
                    scalar += '/';
                    break;
                case 'n':
                    scalar += '\n';
                    break;
                case 't':
                    scalar += '\t';
                    break;
                case 'r':
                    scalar += '\r';
                    break;
                default:
                    return std::nullopt;
            }
        }
        return std::nullopt;
    }

    bool take(char c) {
        if (_at < _text.size() && _text[_at] == c) {
            ++_at;
            return true;
        }
        return false;
    }

    void skip_spaces() {
        while (_at < _text.size() && _text[_at] == ' ') {
            ++_at;
        }
    }

    std::string_view _text;
    std::size_t _at = 0;
};

}  // namespace

std::optional<YAML::Node> parse_flow_mapping(std::string_view text) {
    return flow_reader(text).document();
}

}  // namespace jakiro
