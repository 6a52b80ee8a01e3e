#pragma once
// One command line to jakirod's control socket and its reply.

#include <string>

// 0 with the reply's body (after "OK"); 1 when jakirod answered ERR, 2 when it could not be
// reached or did not answer within 5 s. Errors are printed on stderr (their first line).
int ask(const std::string& path, const std::string& command, std::string& body);
// The same, printing nothing: `error` has why (jakirod's whole refusal, every line of it).
int ask(const std::string& path, const std::string& command, std::string& body, std::string& error);
