#pragma once
// A one-line YAML flow mapping, the form every record in etcd has (`jakiroctl apply` writes
// them with yaml-cpp's flow emitter; JSON objects are one too), read straight into a
// YAML::Node without yaml-cpp's scanner, which costs ~25 µs a record: at a full sync of 50 000
// records of interest that scanner was most of the time.
//
// The grammar taken is a strict subset of YAML's flow style: mappings, sequences, plain
// scalars of name-like characters and double-quoted scalars with JSON's simple escapes, on one
// line. Anything else — a comment, an anchor, a tag, a single quote, a multi-line or spaced
// plain scalar, a colon inside a plain scalar, a repeated key, `\u` escapes — is declined
// (nullopt), and the caller parses the text with YAML::Load, so that every text means exactly
// what yaml-cpp says it means and every error reads as yaml-cpp's.

#include <yaml-cpp/node/node.h>

#include <optional>
#include <string_view>

namespace jakiro {

// The node for `text` (leading and trailing spaces allowed), as YAML::Load would build it
// (the same types, scalars, tags and key order; no marks), or nullopt if the text is outside
// the subset above.
std::optional<YAML::Node> parse_flow_mapping(std::string_view text);

}  // namespace jakiro
