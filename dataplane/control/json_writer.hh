#pragma once
// A minimal streaming JSON writer for control-socket replies (no parsing needed daemon-side).

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace jakiro {

class json_writer {
  public:
    json_writer& begin_object(std::string_view key = {}) { return open(key, '{'); }
    json_writer& end_object() { return close('}'); }
    json_writer& begin_array(std::string_view key = {}) { return open(key, '['); }
    json_writer& end_array() { return close(']'); }

    json_writer& value(std::string_view key, std::string_view text) {
        prefix(key);
        quoted(text);
        return *this;
    }
    json_writer& value(std::string_view key, const char* text) {
        return value(key, std::string_view(text));
    }
    json_writer& value(std::string_view key, const std::string& text) {
        return value(key, std::string_view(text));
    }
    json_writer& value(std::string_view key, uint64_t number) {
        prefix(key);
        _out << number;
        return *this;
    }
    json_writer& value(std::string_view key, double number) {
        prefix(key);
        _out << number;
        return *this;
    }
    // A number already written out (report_number()).
    json_writer& raw(std::string_view key, std::string_view number) {
        prefix(key);
        _out << number;
        return *this;
    }
    json_writer& value(std::string_view key, bool flag) {
        prefix(key);
        _out << (flag ? "true" : "false");
        return *this;
    }

    std::string str() const { return _out.str(); }

  private:
    json_writer& open(std::string_view key, char bracket) {
        prefix(key);
        _out << bracket;
        _first.push_back(true);
        return *this;
    }
    json_writer& close(char bracket) {
        _out << bracket;
        _first.pop_back();
        return *this;
    }
    void prefix(std::string_view key) {
        if (!_first.empty()) {
            if (!_first.back()) {
                _out << ',';
            }
            _first.back() = false;
        }
        if (!key.empty()) {
            quoted(key);
            _out << ':';
        }
    }
    void quoted(std::string_view text) {
        _out << '"';
        for (char c : text) {
            if (c == '"' || c == '\\') {
                _out << '\\' << c;
            } else if (static_cast<unsigned char>(c) < 0x20) {
                static const char* hex = "0123456789abcdef";
                _out << "\\u00" << hex[(c >> 4) & 0xf] << hex[c & 0xf];
            } else {
                _out << c;
            }
        }
        _out << '"';
    }

    std::ostringstream _out;
    std::vector<bool> _first;
};

}  // namespace jakiro
