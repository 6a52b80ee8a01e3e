#pragma once
// One command line to jakirod's control socket and its reply.

#include <string>

// 0 with the reply's body (after "OK"); 1 when jakirod answered ERR, 2 when it could not be
// reached or did not answer within 5 s. Errors are printed on stderr.
int ask(const std::string& path, const std::string& command, std::string& body);
